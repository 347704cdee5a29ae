"""The control endpoint answers unknown areas and actions with a clear 404."""

import urllib3


def test_unknown_area_is_404_with_the_known_ones(endpoint: str) -> None:
    reply = urllib3.PoolManager().request("POST", f"{endpoint}/_localcloud/nope/x", body=b"{}")
    assert reply.status == 404
    assert b"unknown area 'nope'" in reply.data
    assert b"autoscaling" in reply.data


def test_event_capture_receives_an_event_put_on_the_default_bus(aws, event_capture) -> None:
    capture = event_capture({"source": ["vsa.test"]})
    aws("events").put_events(Entries=[{"Source": "vsa.test", "DetailType": "ping", "Detail": '{"n": 1}'}])
    (event,) = capture.wait_for(lambda e: e["detail-type"] == "ping")
    assert event["detail"] == {"n": 1}
    assert event["source"] == "vsa.test"
