"""``GET /arrays/{id}/events`` on the deployed stack: the real route, its IAM (enforced by the
local cloud), the workflows' real runs and the registry's real records."""

from datetime import datetime

from tests.integration.arrays_world import put_new, settle, spec_for
from tests.integration.conftest import Api, fire_alarm, recent_stamp, wait_for_execution


def test_the_events_tell_the_arrays_story_in_order(stack_outputs, api: Api, world, arrays, scripted_alarms):
    # Given an array declared with one controller, bootstrapped into service
    array_id = arrays()
    scripted_alarms(array_id)  # the test plays the array's alarms
    put_new(api, spec_for(array_id, world, maxControllers=4))
    settle(array_id)
    # When its high alarm fires at 30,000 IOPS: ceil(30,000 / (26,000 x 0.7)) = 2 controllers
    # (the volumes carry 150,000: not volume-bound), and the second one is bootstrapped
    scaled = fire_alarm(array_id, 30_000.0, recent_stamp())
    run = wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], scaled)
    assert run["status"] == "SUCCEEDED", run
    settle(array_id)

    # Then the timeline has both bootstraps around the decision, in that order, each succeeded
    status, answer = api.call("GET", f"/arrays/{array_id}/events")
    assert status == 200, answer
    found = answer["events"]
    times = [datetime.fromisoformat(e["at"]) for e in found]
    assert times == sorted(times)
    story = [(e["kind"], e["outcome"]) for e in found if e["kind"] in ("bootstrap", "decision", "scale")]
    assert story == [("bootstrap", "succeeded"), ("decision", "succeeded"), ("bootstrap", "succeeded")], found
    decision = next(e for e in found if e["kind"] == "decision")
    assert decision["reference"] == scaled
    assert decision["what"].startswith("scale-out 1 -> 2 controllers at 30,000 IOPS"), decision
    bootstraps = [e for e in found if e["kind"] == "bootstrap"]
    assert len({e["reference"] for e in bootstraps}) == 2
    assert all(e["error"] is None for e in found if e["outcome"] == "succeeded")
    assert answer["incomplete"] == []
    assert answer["truncated"] is False

    # And since the decision, only what followed it; limit keeps the newest
    status, later = api.call("GET", f"/arrays/{array_id}/events?since={decision['at'].replace('+', '%2B')}")
    assert status == 200, later
    assert [e["kind"] for e in later["events"] if e["kind"] in ("bootstrap", "decision")] == [
        "decision",
        "bootstrap",
    ]
    status, newest = api.call("GET", f"/arrays/{array_id}/events?limit=1")
    assert status == 200, newest
    assert [(e["at"], e["kind"], e["reference"]) for e in newest["events"]] == [
        (found[-1]["at"], found[-1]["kind"], found[-1]["reference"])
    ]
    assert newest["truncated"] is True


def test_the_events_route_refuses_what_it_cannot_read(api: Api, arrays):
    status, reply = api.call("GET", f"/arrays/{arrays()}/events")
    assert status == 404, reply
    status, reply = api.call("GET", "/arrays/demo/events?limit=0")
    assert status == 422, reply
    assert "query.limit" in reply["message"]
    status, reply = api.call("GET", "/arrays/demo/events?since=2025-01-31T08:00:00")
    assert status == 422, reply
    assert "query.since" in reply["message"]
