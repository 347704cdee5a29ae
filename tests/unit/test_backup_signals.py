"""The freeze window's signals: the rules (pure) and the steps that use them, against moto's S3
(the markers), botocore's Stubber for SSM and EC2 (the calls' order and shape)."""

import base64
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from tests.unit import test_backup_service as backup_world
from tests.unit.conftest import REGION
from tests.unit.test_backup_service import _frozen_hosts, record, service, snapshots_taken
from vsa_core.backups import sets, signals
from vsa_core.backups.aws_signals import Signals

BUCKET = "vsa-signals-test"
world = backup_world.world  # the backup service tests' array: 2 io2 volumes, a host, a controller


@pytest.fixture
def bucket(aws: None) -> Signals:
    s3 = boto3.client("s3", region_name=REGION, config=Config(signature_version="s3v4"))
    s3.create_bucket(Bucket=BUCKET)
    return Signals(BUCKET, s3)


def decoded(parameter: str) -> str:
    return base64.urlsafe_b64decode(parameter + "=" * (-len(parameter) % 4)).decode()


def _answer_sends(stub: Stubber, count: int) -> None:
    for _ in range(count):
        stub.add_response("send_command", {"Command": {"CommandId": "11111111-2222-3333-4444-555555555555"}})


def _sends(count: int) -> tuple[Any, Stubber, list[dict[str, Any]]]:
    """An SSM client whose next ``count`` SendCommands are answered, and the parameters each
    was called with."""
    ssm = boto3.client("ssm", region_name=REGION)
    sent: list[dict[str, Any]] = []
    ssm.meta.events.register("provide-client-params.ssm.SendCommand", lambda params, **_: sent.append(params))
    stub = Stubber(ssm)
    _answer_sends(stub, count)
    return ssm, stub, sent


def test_the_keys_the_marker_and_the_parameter_form() -> None:
    assert signals.thaw_key("a", "bk-1") == "signals/a/bk-1/thaw"
    assert signals.host_key("a", "bk-1", "i-1") == "signals/a/bk-1/hosts/i-1"
    listing = [
        "signals/a/bk-1/thaw",
        "signals/a/bk-1/hosts/i-1",
        "signals/a/bk-1/hosts/i-2",
        "signals/a/bk-2/hosts/i-3",
    ]
    assert signals.reported_hosts(listing, "a", "bk-1") == {"i-1", "i-2"}
    marker = json.loads(signals.thaw_marker("bk-1", 10.5, 10.6))
    assert marker == {
        "thaw": True,
        "backupId": "bk-1",
        "snapshotRequestedAt": 10.5,
        "snapshotReturnedAt": 10.6,
    }
    url = "https://b.s3.us-east-1.amazonaws.com/signals/a/bk-1/thaw?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=130"
    form = signals.as_parameter(url)
    assert set(form) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )  # freeze-io's pattern
    assert decoded(form) == url
    # a URL outlives the latest delivery of freeze-io plus its watchdog's window
    assert signals.url_seconds(10) > signals.DELIVERY_SECONDS + 10
    assert (
        signals.next_look(True, False),
        signals.next_look(True, True),
        signals.next_look(False, False),
    ) == (0, 1, 1)
    # before the hosts' common instant: its whole seconds, whatever the look can go by, rounded
    # up when the wait then ends at most LOOK_SLACK_SECONDS (0.25 s) after the instant
    assert signals.LOOK_SLACK_SECONDS == 0.25
    assert (
        signals.next_look(True, False, 2.9),
        signals.next_look(True, False, 2.7),
        signals.next_look(False, False, 1.0),
        signals.next_look(True, False, 0.8),
        signals.next_look(True, False, 0.7),
    ) == (3, 2, 1, 1, 0)


def test_with_signals_each_host_gets_its_urls_presigned_with_signature_version_4(
    world: dict[str, Any], bucket: Signals
) -> None:
    backup = record(world["table"], state="freezing")
    hosts = [{**h, "timeoutSeconds": "10"} for h in _frozen_hosts(backup.backup_id)]
    for h in hosts:
        h.pop("freezeCommandId")
    ssm, stub, sent = _sends(len(hosts))
    with stub, pytest.MonkeyPatch.context() as patch:
        patch.setattr("vsa_core.backups.aws_snapshot.SEND_WORKERS", 1)
        answer = service(world["table"], ssm=ssm, signals=bucket).freeze(
            backup.backup_id, hosts, "vsa-freeze-io", "demo"
        )
    assert answer["signals"] is True
    thaws = set()
    for params, host in zip(sent, hosts, strict=True):
        thaw, frozen = (
            decoded(params["Parameters"]["ThawSignal"][0]),
            decoded(params["Parameters"]["FrozenSignal"][0]),
        )
        thaws.add(urlsplit(thaw).path)
        assert urlsplit(frozen).path.endswith(f"/signals/demo/{backup.backup_id}/hosts/{host['instanceId']}")
        for url in (thaw, frozen):
            query = parse_qs(urlsplit(url).query)
            assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
            assert query["X-Amz-Expires"] == [str(signals.url_seconds(10))]
    assert len(thaws) == 1
    assert thaws.pop().endswith(f"/signals/demo/{backup.backup_id}/thaw")
    # and every host polls the marker as often as that many hosts may
    polls = {params["Parameters"]["SignalPollMilliseconds"][0] for params in sent}
    assert polls == {str(signals.poll_milliseconds(len(hosts)))}


def test_the_freeze_step_reaches_the_snapshot_steps_services_after_the_sends_and_never_fails_for_it(
    world: dict[str, Any], bucket: Signals
) -> None:
    # Given a host to freeze, with the deployment's signals
    backup = record(world["table"], state="freezing")
    hosts = [{**h, "timeoutSeconds": "10"} for h in _frozen_hosts(backup.backup_id)]
    calls: list[str] = []
    ec2 = boto3.client("ec2", region_name=REGION)
    ssm, stub, _ = _sends(len(hosts))
    for client in (bucket.s3, ec2, ssm):
        client.meta.events.register("provide-client-params", lambda model, **_: calls.append(model.name))
    with stub:
        service(world["table"], ssm=ssm, ec2=ec2, signals=bucket).freeze(
            backup.backup_id, hosts, "vsa-freeze-io", "demo"
        )
    # Then after the sends, inside the lead, one listing of the set's reports and one
    # DescribeSnapshots of the set: the Snapshot step's first look and its CreateSnapshots then
    # find their connections open in this execution environment
    presigned = {"GetObject", "PutObject"}  # the hosts' URLs, signed here, never sent from here
    assert [c for c in calls if c not in presigned] == ["SendCommand"] * len(hosts) + [
        "ListObjectsV2",
        "DescribeSnapshots",
    ]
    # and an EC2 that refuses it costs only the warm-up: the freeze is answered as before
    refusing = Stubber(ec2)
    refusing.add_client_error("describe_snapshots", "UnauthorizedOperation", http_status_code=403)
    _answer_sends(stub, len(hosts))
    with stub, refusing:
        answer = service(world["table"], ssm=ssm, ec2=ec2, signals=bucket).freeze(
            backup.backup_id, hosts, "vsa-freeze-io", "demo"
        )
    assert [h["freezeError"] for h in answer["hosts"]] == [""] * len(hosts)
    refusing.assert_no_pending_responses()


def test_every_host_is_given_one_instant_to_freeze_at_a_lead_after_the_sends_began(
    world: dict[str, Any],
) -> None:
    # Given three hosts, sent one after the other while the clock moves on
    backup = record(world["table"], state="freezing")
    hosts = [
        {
            "instanceId": f"i-000000000000000{n}",
            "mountpoints": "/data",
            "timeoutSeconds": "10",
            "freezeKey": f"k{n}",
        }
        for n in range(3)
    ]
    ssm, stub, sent = _sends(len(hosts))
    ticks = iter([1000.0, 1000.4, 1000.8, 1001.2, 1001.6])
    with stub, pytest.MonkeyPatch.context() as patch:
        patch.setattr("vsa_core.backups.aws_snapshot.SEND_WORKERS", 1)
        answer = service(world["table"], ssm=ssm, clock=lambda: next(ticks)).freeze(
            backup.backup_id, hosts, "vsa-freeze-io", "demo"
        )
    # Then every host got the same FreezeAt: the lead after the first send began, in epoch ms
    instants = {params["Parameters"]["FreezeAt"][0] for params in sent}
    assert instants == {str(round((1000.0 + signals.FREEZE_LEAD_SECONDS) * 1000))}
    assert answer["freezeAt"] == 1000.0 + signals.FREEZE_LEAD_SECONDS
    assert len(sent) == 3
    # and with no lead (VSA_FREEZE_LEAD_MILLISECONDS=0) no instant: each host freezes at once
    sent.clear()
    _answer_sends(stub, len(hosts))
    with stub:
        answer = service(world["table"], ssm=ssm, freeze_lead=0).freeze(
            backup.backup_id, hosts, "vsa-freeze-io", "demo"
        )
    assert [p for p in sent if "FreezeAt" in p["Parameters"]] == []
    assert answer["freezeAt"] is None


def test_before_the_common_instant_the_snapshot_step_waits_its_whole_seconds_then_looks_at_once(
    world: dict[str, Any], bucket: Signals
) -> None:
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)
    freezing = {"hosts": hosts, "sentAt": 100.0, "freezeAt": 102.7, "signals": True}
    ssm = boto3.client("ssm", region_name=REGION)
    with Stubber(ssm):  # nothing queued: before the instant nothing has ended, SSM is not read
        looks = [
            service(world["table"], ssm=ssm, signals=bucket, clock=lambda now=now: now).snapshot(
                "demo", backup.backup_id, world["controller"], [], [], freezing, "", 10, {"ssmCheckedAt": now}
            )["waitSeconds"]
            for now in (100.1, 101.5, 102.2)
        ]
    assert looks == [2, 1, 0]


@pytest.mark.parametrize("hosts", [1, 4, 16, 50, 51, 128, 256, 1000, 5000, 10_000])
def test_the_hosts_together_poll_the_marker_within_s3s_rate_on_one_key(hosts: int) -> None:
    # Given that many hosts, each polling every poll_milliseconds(hosts)
    interval = signals.poll_milliseconds(hosts)
    # Then the interval is one freeze-io accepts (10-1000 ms)
    assert signals.POLL_MS_FLOOR <= interval <= signals.POLL_MS_CEILING == 1000
    # and together they GET the key at most GETS_PER_SECOND a second, under S3's 5,500 per
    # partitioned prefix, unless a second between looks is already the slowest allowed
    rate = hosts * 1000 / interval
    assert rate <= signals.GETS_PER_SECOND < 5500 or interval == signals.POLL_MS_CEILING
    # and no slower than that rate needs: a millisecond less would break it (or hit the floor)
    assert interval == signals.POLL_MS_FLOOR or hosts * 1000 / (interval - 1) > signals.GETS_PER_SECOND


def test_up_to_250_hosts_poll_every_50_ms_and_more_less_often() -> None:
    assert [signals.poll_milliseconds(n) for n in (0, 1, 4, 250, 256, 1000)] == [50, 50, 50, 50, 52, 200]


def _marker(bucket: Signals, backup_id: str, instance: str, status: str = "frozen") -> None:
    report = {"document": "freeze-io", "status": status, "freezeStartedAt": 1.0, "frozeAt": 1.1}
    bucket.s3.put_object(
        Bucket=BUCKET, Key=signals.host_key("demo", backup_id, instance), Body=json.dumps(report)
    )


def test_a_look_within_a_second_reads_only_the_markers_then_run_command_for_the_hosts_without_one(
    world: dict[str, Any], bucket: Signals
) -> None:
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)
    _marker(bucket, backup.backup_id, hosts[0]["instanceId"])
    freezing = {"hosts": hosts, "sentAt": 99.0, "signals": True}
    ssm = boto3.client("ssm", region_name=REGION)
    stub = Stubber(ssm)  # no answer queued: any SSM call fails the test
    with stub:
        soon = service(world["table"], ssm=ssm, signals=bucket, clock=lambda: 100.0).snapshot(
            "demo", backup.backup_id, world["controller"], [], [], freezing, "", 10, {"ssmCheckedAt": 99.5}
        )
    assert soon == {
        "taken": False,
        "waiting": [hosts[1]["instanceId"]],
        "waitSeconds": 0,
        "ssmCheckedAt": 99.5,
    }
    # a second on, Run Command's status is read for the host without a marker (only it)
    stub.add_response(
        "get_command_invocation",
        {"Status": "InProgress"},
        {"CommandId": hosts[1]["freezeCommandId"], "InstanceId": hosts[1]["instanceId"]},
    )
    with stub:
        later = service(world["table"], ssm=ssm, signals=bucket, clock=lambda: 100.6).snapshot(
            "demo", backup.backup_id, world["controller"], [], [], freezing, "", 10, {"ssmCheckedAt": 99.5}
        )
    assert later == {
        "taken": False,
        "waiting": [hosts[1]["instanceId"]],
        "waitSeconds": 0,
        "ssmCheckedAt": 100.6,
    }


def test_the_last_marker_starts_the_snapshot_then_the_thaw_marker_goes_out_and_thaw_io_is_left_to_thaw(
    world: dict[str, Any], bucket: Signals
) -> None:
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)
    _marker(bucket, backup.backup_id, hosts[0]["instanceId"])
    _marker(bucket, backup.backup_id, hosts[1]["instanceId"], status="failed")
    ec2, ssm = boto3.client("ec2", region_name=REGION), boto3.client("ssm", region_name=REGION)
    snapshots, commands = Stubber(ec2), Stubber(ssm)
    snapshots.add_response("create_snapshots", snapshots_taken(world["volumes"]))
    # no SSM answer queued: no GetCommandInvocation (the markers said it all) and no thaw-io
    # (the marker is written: the workflow's Thaw sends it, outside the hosts' window)
    volumes = [{"volumeId": v} for v in world["volumes"]]
    clock = iter([100.0, 100.0, 100.2])
    with snapshots, commands:
        answer = service(
            world["table"], ec2=ec2, ssm=ssm, signals=bucket, clock=lambda: next(clock)
        ).snapshot(
            "demo",
            backup.backup_id,
            world["controller"],
            [],
            volumes,
            {"hosts": hosts, "sentAt": 99.0, "signals": True},
            "vsa-thaw-io",
        )
    assert answer["taken"] is True
    marker = bucket.s3.get_object(Bucket=BUCKET, Key=signals.thaw_key("demo", backup.backup_id))[
        "Body"
    ].read()
    assert json.loads(marker)["thaw"] is True
    assert [h["thawCommandId"] for h in answer["thawHosts"]] == ["", ""]
    # the workflow's Taken? reads waitSeconds beside taken: present whether taken or not
    assert answer["waitSeconds"] == 0
    # each host's result is what it PUT, as Run Command would have shown it
    assert [(f["instanceId"], f["status"]) for f in answer["freezes"]] == [
        (hosts[0]["instanceId"], "Success"),
        (hosts[1]["instanceId"], "Failed"),
    ]
    assert json.loads(answer["freezes"][0]["stdout"])["frozeAt"] == 1.1
    # and once the hosts are recorded, the backup's markers are gone
    service(world["table"], signals=bucket).record_hosts("demo", backup.backup_id, answer["freezes"], [])
    assert (
        bucket.s3.list_objects_v2(Bucket=BUCKET, Prefix=signals.backup_prefix("demo", backup.backup_id))[
            "KeyCount"
        ]
        == 0
    )


def test_a_thaw_marker_s3_refuses_sends_thaw_io_to_every_host_at_once(
    world: dict[str, Any], bucket: Signals
) -> None:
    # Given both hosts reported frozen, and S3 refusing the thaw marker's PUT
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)
    for host in hosts:
        _marker(bucket, backup.backup_id, host["instanceId"])

    def refused(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {"Code": "AccessDenied", "Message": "Access Denied"}
        return AWSResponse("https://s3", 403, {}, None), {"Error": error, "ResponseMetadata": {}}

    bucket.s3.meta.events.register("before-call.s3.PutObject", refused)
    ec2 = boto3.client("ec2", region_name=REGION)
    snapshots = Stubber(ec2)
    snapshots.add_response("create_snapshots", snapshots_taken(world["volumes"]))
    ssm, commands, sent = _sends(len(hosts))
    with snapshots, commands:
        answer = service(world["table"], ec2=ec2, ssm=ssm, signals=bucket).snapshot(
            "demo",
            backup.backup_id,
            world["controller"],
            [],
            [{"volumeId": v} for v in world["volumes"]],
            {"hosts": hosts, "sentAt": 99.0, "signals": True},
            "vsa-thaw-io",
        )
    # then thaw-io went to every host from the step itself, as without signals
    assert answer["taken"] is True
    assert sorted(s["InstanceIds"][0] for s in sent) == sorted(h["instanceId"] for h in hosts)
    assert {s["DocumentName"] for s in sent} == {"vsa-thaw-io"}
    assert all(h["thawCommandId"] for h in answer["thawHosts"])


def test_the_label_is_read_before_the_freeze_and_the_snapshots_are_tagged_with_it(
    world: dict[str, Any], bucket: Signals
) -> None:
    # Given a set labelled "nightly", its hosts sent freeze-io by the Freeze step
    backup = record(world["table"], state="freezing", label="nightly")
    hosts = [{**host, "timeoutSeconds": "10"} for host in _frozen_hosts(backup.backup_id)]
    ssm, stub, _ = _sends(len(hosts))
    with stub:
        freezing = service(world["table"], ssm=ssm, signals=bucket).freeze(
            backup.backup_id, hosts, "vsa-freeze-io", "demo"
        )
    assert freezing["label"] == "nightly"
    # When every host has reported and the record can no longer be read (a DynamoDB outage, say)
    for host in hosts:
        _marker(bucket, backup.backup_id, host["instanceId"])
    ec2 = boto3.client("ec2", region_name=REGION)
    asked: list[dict[str, Any]] = []
    ec2.meta.events.register(
        "provide-client-params.ec2.CreateSnapshots", lambda params, **_: asked.append(params)
    )
    snapshots = Stubber(ec2)
    snapshots.add_response("create_snapshots", snapshots_taken(world["volumes"]))
    gone = service("no-such-table", ec2=ec2, ssm=boto3.client("ssm", region_name=REGION), signals=bucket)
    with snapshots, pytest.raises(ClientError, match="ResourceNotFound"):  # the record, read after it
        gone.snapshot(
            "demo",
            backup.backup_id,
            world["controller"],
            [],
            [{"volumeId": v} for v in world["volumes"]],
            freezing,
        )
    # Then CreateSnapshots was still called, its tags carrying the label the Freeze step read
    tags = {t["Key"]: t["Value"] for t in asked[0]["TagSpecifications"][0]["Tags"]}
    assert tags[sets.LABEL_TAG] == "nightly"


def test_a_host_that_ends_between_the_listing_and_run_commands_answer_is_counted_by_its_report(
    world: dict[str, Any], bucket: Signals
) -> None:
    # Given one host reported, the other ending (its report PUT, then its command) while the step
    # reads Run Command's status after the first listing
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)
    _marker(bucket, backup.backup_id, hosts[0]["instanceId"])
    ssm = boto3.client("ssm", region_name=REGION)
    ssm.meta.events.register(
        "provide-client-params.ssm.GetCommandInvocation",
        lambda **_: _marker(bucket, backup.backup_id, hosts[1]["instanceId"]),
    )
    stub = Stubber(ssm)
    stub.add_response("get_command_invocation", {"Status": "Success", "StandardOutputContent": "{}"})
    freezing = {"hosts": hosts, "sentAt": 98.0, "signals": True}
    ec2 = boto3.client("ec2", region_name=REGION)
    snapshots = Stubber(ec2)
    snapshots.add_response("create_snapshots", snapshots_taken(world["volumes"]))
    volumes = [{"volumeId": v} for v in world["volumes"]]
    # When the step looks a second after the sends
    with stub, snapshots:
        answer = service(world["table"], ec2=ec2, ssm=ssm, signals=bucket, clock=lambda: 100.0).snapshot(
            "demo", backup.backup_id, world["controller"], [], volumes, freezing, "", 10, {}
        )
    # Then both count as reported (no second wait for signals said to be missing): the snapshot is taken
    assert answer["taken"] is True
    assert [f["status"] for f in answer["freezes"]] == ["Success", "Success"]
    assert all("frozeAt" in f["stdout"] for f in answer["freezes"]), answer["freezes"]


def test_an_unreadable_bucket_leaves_the_look_to_run_command_and_the_backup_goes_on(
    world: dict[str, Any],
) -> None:
    # Given the signals' bucket gone (or S3 refusing): a host frozen as Run Command says
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)[:1]
    missing = Signals("vsa-signals-missing", boto3.client("s3", region_name=REGION))
    ssm = boto3.client("ssm", region_name=REGION)
    stub = Stubber(ssm)
    stub.add_response("get_command_invocation", {"Status": "InProgress"})
    with stub:
        answer = service(world["table"], ssm=ssm, signals=missing, clock=lambda: 100.0).snapshot(
            "demo",
            backup.backup_id,
            world["controller"],
            [],
            [],
            {"hosts": hosts, "sentAt": 98.0, "signals": True},
        )
    # Then the look is Run Command's, the next a second later, as without signals: no failed step
    assert answer == {
        "taken": False,
        "waiting": [hosts[0]["instanceId"]],
        "waitSeconds": 1,
        "ssmCheckedAt": 100.0,
    }
