"""The arrays API on the local cloud: the real template, the real Lambda, SigV4-signed requests.

Apply creates exactly what docs/arrays.md lists (group, hooks, alarms, schedule, owned volumes),
an update changes exactly what changed, an invalid spec leaves no trace, concurrent applies
lose no update, delete removes what the control plane created and nothing else, and bad
requests get 4xx, never 5xx.
"""

import json
import threading
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from tests.integration.arrays_world import (
    OTHER_AZ,
    Api,
    World,
    alarms_of,
    follow_run,
    get_array,
    group_of,
    no_trace,
    owned_volumes,
    put_new,
    schedule_of,
    settle,
    spec_for,
    wait_until_gone,
)
from tests.integration.conftest import wait_for_execution


def test_apply_creates_the_group_hooks_alarms_schedule_and_owned_volume(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    spec = spec_for(array_id, world)
    existing = spec["volumes"][0]["volumeId"]
    reply = put_new(api, spec)
    assert reply["version"] == 1
    assert any(c["action"] == "create" for c in reply["changes"]), reply
    group = group_of(array_id)
    assert group is not None
    assert (group["MinSize"], group["MaxSize"], group["DesiredCapacity"]) == (1, 4, 1)
    assert group["NewInstancesProtectedFromScaleIn"] is True
    assert {"Key": "vsa:array", "Value": array_id} in [
        {"Key": t["Key"], "Value": t["Value"]} for t in group["Tags"]
    ]
    hooks = {
        h["LifecycleHookName"]: h
        for h in boto3.client("autoscaling").describe_lifecycle_hooks(
            AutoScalingGroupName=group["AutoScalingGroupName"]
        )["LifecycleHooks"]
    }
    launch, drain = hooks[f"vsa-{array_id}-bootstrap"], hooks[f"vsa-{array_id}-drain"]
    assert (launch["LifecycleTransition"], launch["DefaultResult"]) == (
        "autoscaling:EC2_INSTANCE_LAUNCHING",
        "ABANDON",
    )
    assert drain["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert 30 <= launch["HeartbeatTimeout"] <= 7200
    alarms = alarms_of(array_id)
    assert set(alarms) == {f"vsa-{array_id}-iops-high", f"vsa-{array_id}-iops-low"}
    watched = {
        d["Value"]
        for m in alarms[f"vsa-{array_id}-iops-high"]["Metrics"]
        if "MetricStat" in m
        for d in m["MetricStat"]["Metric"]["Dimensions"]
    }
    owned = owned_volumes(array_id)
    assert len(owned) == 1
    assert owned[0]["VolumeType"] == "io2"
    assert owned[0]["MultiAttachEnabled"] is True
    assert watched == {existing, owned[0]["VolumeId"]}
    schedule = schedule_of(array_id)
    assert schedule is not None
    assert schedule["ScheduleExpression"] == "cron(0 3 * * ? *)"


def test_reapply_changes_nothing_and_an_update_changes_exactly_what_changed(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    spec = spec_for(array_id, world)
    put_new(api, spec)
    # Re-applying the same spec: 200, same version, nothing created or updated
    status, again = api.call("PUT", f"/arrays/{array_id}", spec)
    assert status == 200, again
    assert again["version"] == 1
    assert [c for c in again["changes"] if c["action"] != "unchanged"] == []
    # Raising maxControllers changes the group's MaxSize and nothing else
    status, updated = api.call("PUT", f"/arrays/{array_id}", {**spec, "maxControllers": 6})
    assert status == 200, updated
    assert updated["version"] == 2
    changed = [c for c in updated["changes"] if c["action"] != "unchanged"]
    assert [c["resource"] for c in changed] == [f"group/vsa-{array_id}-controllers"], changed
    assert group_of(array_id)["MaxSize"] == 6  # type: ignore[index]


@pytest.mark.parametrize(
    ("case", "expected_status", "expected_message"),
    [
        ("volume-in-other-az", 400, "us-east-1b"),
        ("gp3-volume", 400, "io2"),
        ("io2-without-multi-attach", 400, "Multi-Attach"),
        ("host-not-managed", 400, "SSM"),
        ("unknown-launch-template", 400, "launchTemplate nope-"),
        ("seventeen-controllers", 422, "maxControllers"),
    ],
)
def test_invalid_spec_is_rejected_with_its_reason_and_leaves_no_trace(
    api: Api,
    world: World,
    arrays: Callable[[], str],
    case: str,
    expected_status: int,
    expected_message: str,
) -> None:
    array_id = arrays()
    spec = spec_for(array_id, world)
    if case == "volume-in-other-az":
        spec["volumes"] = [{"volumeId": world.volume(az=OTHER_AZ)}]
    elif case == "gp3-volume":
        spec["volumes"] = [{"volumeId": world.volume(kind="gp3")}]
    elif case == "io2-without-multi-attach":
        spec["volumes"] = [{"volumeId": world.volume(multi_attach=False)}]
    elif case == "host-not-managed":
        spec["hosts"] = [{"instanceId": world.host(managed=False), "mountpoints": ["/data"]}]
    elif case == "unknown-launch-template":
        spec["controllers"] = {"launchTemplate": {"launchTemplateName": f"nope-{array_id}"}}
    elif case == "seventeen-controllers":
        spec["maxControllers"] = 17
    status, reply = api.call("PUT", f"/arrays/{array_id}", spec)
    assert status == expected_status, reply
    assert expected_message in json.dumps(reply), reply
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404
    no_trace(array_id)


def test_max_below_the_serving_controllers_is_a_conflict(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    spec = spec_for(array_id, world, minControllers=2)
    put_new(api, spec)
    settle(array_id)
    status, reply = api.call("PUT", f"/arrays/{array_id}", {**spec, "minControllers": 1, "maxControllers": 1})
    assert status == 409, reply
    assert "maxControllers" in reply["message"]
    assert group_of(array_id)["MaxSize"] == 4  # type: ignore[index]


def test_concurrent_applies_lose_no_update(api: Api, world: World, arrays: Callable[[], str]) -> None:
    # Given an array at version 1 and two operators who both read version 1
    array_id = arrays()
    spec = spec_for(array_id, world)
    put_new(api, spec)
    results: dict[int, tuple[int, Any]] = {}

    def apply(max_controllers: int) -> None:
        results[max_controllers] = api.call(
            "PUT",
            f"/arrays/{array_id}",
            {**spec, "maxControllers": max_controllers},
            headers={"If-Match": "1"},
        )

    # When both apply at once
    threads = [threading.Thread(target=apply, args=(n,)) for n in (5, 6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one wins and the other is told to re-read; the stored spec is the winner's
    statuses = sorted(status for status, _ in results.values())
    assert statuses == [200, 409], results
    winner = next(n for n, (status, _) in results.items() if status == 200)
    current = get_array(api, array_id)
    assert current["version"] == 2
    assert current["spec"]["maxControllers"] == winner


def test_delete_refuses_while_bootstrapping_then_removes_what_it_created(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    spec = spec_for(array_id, world)
    existing = spec["volumes"][0]["volumeId"]
    applied = put_new(api, spec, follow=False)
    # A controller waits in Pending:Wait (bootstrapping): delete is refused with the reason
    status, reply = api.call("DELETE", f"/arrays/{array_id}")
    assert status == 409, reply
    assert "bootstrapping" in reply["message"]
    follow_run(applied)  # the owned volume created, the bootstrap done
    settle(array_id)
    status, reply = api.call("DELETE", f"/arrays/{array_id}?deleteVolumes=true")
    assert status == 202, reply
    assert reply["deleteVolumes"] is True
    # a repeated DELETE answers the same workflow (or the array is already gone)
    again = api.call("DELETE", f"/arrays/{array_id}")
    assert again == (202, reply) or again[0] == 404, again
    wait_until_gone(api, array_id)
    no_trace(array_id)
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404
    # The volume the control plane did not create is still there
    assert boto3.client("ec2").describe_volumes(VolumeIds=[existing])["Volumes"][0]["VolumeId"] == existing


def test_delete_stops_a_converging_reconcile_run_then_removes_the_array(
    api: Api, world: World, arrays: Callable[[], str], stack_outputs: dict[str, str]
) -> None:
    # Given a running array whose spec just gained a volume: ReconcileArray is converging it
    array_id = arrays()
    spec = spec_for(array_id, world)
    put_new(api, spec)
    settle(array_id)
    more = {**spec, "volumes": [*spec["volumes"], {"volumeId": world.volume()}]}
    status, applied = api.call("PUT", f"/arrays/{array_id}", more)
    assert status == 200, applied
    run = applied["reconcile"]["executionName"]
    # When the array is deleted at once
    status, reply = api.call("DELETE", f"/arrays/{array_id}?deleteVolumes=true")
    # Then the run is stopped (ABORTED, not FAILED: no workflow-failed alarm for a deletion),
    # with the reason in its history, and the array goes as any other
    assert status == 202, reply
    assert reply["stoppedReconcile"] == [run], reply
    # (the local cloud's engine stops a run when its current state ends: wait for the stop)
    stopped = wait_for_execution(stack_outputs["ReconcileArrayStateMachineArn"], run)
    assert stopped["status"] == "ABORTED", stopped["status"]
    history = boto3.client("stepfunctions").get_execution_history(
        executionArn=stopped["executionArn"], reverseOrder=True, maxResults=1
    )["events"]
    assert history[0]["type"] == "ExecutionAborted", history
    assert history[0]["executionAbortedEventDetails"]["error"] == "ArrayDeleted", history
    wait_until_gone(api, array_id)
    no_trace(array_id)


def test_get_and_list_show_the_array_and_its_live_status(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    spec = spec_for(array_id, world)
    applied = put_new(api, spec, follow=False)
    described = get_array(api, array_id)
    assert described["spec"]["arrayId"] == array_id
    controllers = described["status"]["controllers"]
    assert len(controllers) == 1
    assert controllers[0]["lifecycleState"] == "Pending:Wait"
    assert {h["instanceId"] for h in described["status"]["hosts"]} == {spec["hosts"][0]["instanceId"]}
    status, listed = api.call("GET", "/arrays")
    assert status == 200
    assert array_id in {a["arrayId"] for a in listed["arrays"]}
    follow_run(applied)


def test_bad_requests_get_4xx_never_5xx(api: Api, world: World, arrays: Callable[[], str]) -> None:
    array_id = arrays()
    spec = spec_for(array_id, world)
    assert api.call("PUT", f"/arrays/{array_id}", spec, sign=False)[0] == 403  # unsigned
    assert api.call("PUT", f"/arrays/{array_id}", raw=b"{not json")[0] in (400, 422)
    assert api.call("PUT", f"/arrays/{array_id}", {**spec, "arrayId": "other-id"})[0] == 400
    assert api.call("PUT", f"/arrays/{array_id}", {**spec, "unknownField": 1})[0] == 422
    assert api.call("PUT", "/arrays/BAD_ID", spec)[0] == 422
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404
    assert api.call("DELETE", f"/arrays/{array_id}")[0] == 404
    no_trace(array_id)


# --- growing an owned volume: EBS's modification rules (ModifyVolume, EC2 API reference) ----------


def _grow(spec: dict[str, Any], size: int) -> dict[str, Any]:
    volumes = [dict(v, sizeGiB=size) if v.get("name") == "scratch" else v for v in spec["volumes"]]
    return {**spec, "volumes": volumes}


def _latest_modification(volume_id: str) -> dict[str, Any]:
    found = boto3.client("ec2").describe_volumes_modifications(
        Filters=[{"Name": "volume-id", "Values": [volume_id]}]
    )["VolumesModifications"]
    return dict(found[-1]) if found else {}


@pytest.mark.usefixtures("realistic_timings")
def test_a_volume_still_being_modified_converges_on_reapply_and_refuses_another_size_with_409(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    # Given an array whose owned volume scratch (50 GiB) is available
    array_id = arrays()
    spec = spec_for(array_id, world)
    put_new(api, spec)  # its run created it, waited until available, and attached it (in-use)
    volume_id = owned_volumes(array_id)[0]["VolumeId"]
    state = boto3.client("ec2").describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["State"]
    assert state in ("available", "in-use"), state
    # When it is grown to 60 GiB: 200, the volume's modification starts (modifying: EBS shows
    # the new size only from optimizing on). The realistic profile keeps it modifying 10 s, then
    # optimizing 120 s: a PUT slowed by the loaded machine can answer after the first (the
    # test command's two clouds on 2 cores), and either way it has not completed, which is what
    # the rest of this test needs.
    status, grown = api.call("PUT", f"/arrays/{array_id}", _grow(spec, 60))
    assert status == 200, grown
    assert {c["resource"]: c["action"] for c in grown["changes"]}["volume/scratch"] == "update"
    modification = _latest_modification(volume_id)
    assert (modification["ModificationState"], modification["TargetSize"]) in (
        ("modifying", 60),
        ("optimizing", 60),
    ), modification
    # Then the same spec applied again while it is unfinished changes nothing (no second ModifyVolume)
    status, again = api.call("PUT", f"/arrays/{array_id}", _grow(spec, 60))
    assert status == 200, again
    assert [c for c in again["changes"] if c["action"] != "unchanged"] == [], again
    assert _latest_modification(volume_id)["StartTime"] == modification["StartTime"]
    # And another size while the modification has not completed is a 409 saying what to wait
    # for, with nothing stored
    status, refused = api.call("PUT", f"/arrays/{array_id}", _grow(spec, 70))
    assert status == 409, refused
    assert f"volume scratch ({volume_id}) is still being modified to 60 GiB" in refused["message"]
    assert "apply again once it has completed" in refused["message"]
    described = get_array(api, array_id)
    assert described["version"] == 2
    assert [v.get("sizeGiB") for v in described["spec"]["volumes"]] == [None, 60]


def test_a_fifth_modification_within_24_hours_is_a_409_saying_when_and_stores_nothing(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    # Given an array whose owned volume was grown four times (the fast profile completes each at once)
    array_id = arrays()
    spec = spec_for(array_id, world)
    put_new(api, spec)
    for size in (51, 52, 53, 54):
        status, reply = api.call("PUT", f"/arrays/{array_id}", _grow(spec, size))
        assert status == 200, reply
    # When it is grown a fifth time within 24 hours
    status, refused = api.call("PUT", f"/arrays/{array_id}", _grow(spec, 55))
    # Then 409 names the volume, EBS's rule and when it can be modified again, never a 5xx
    assert status == 409, refused
    volume_id = owned_volumes(array_id)[0]["VolumeId"]
    assert f"volume scratch ({volume_id}) was modified too often" in refused["message"]
    assert "within a rolling 24-hour period" in refused["message"]
    assert "at the latest" in refused["message"]
    # and nothing was written: the stored spec is the fourth, the volume 54 GiB
    described = get_array(api, array_id)
    assert (described["version"], described["spec"]["volumes"][1]["sizeGiB"]) == (5, 54)
    assert owned_volumes(array_id)[0]["Size"] == 54


def test_security_groups_open_to_strangers_unknown_ones_and_a_missing_profile_store_and_create_nothing(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    # Given controllers' security groups: one that does not exist, one that opens NVMe/TCP's
    # port 4420 to the world; and an instance profile that does not exist (issue #20: checked
    # before anything is made; found later, the answer would be 502 with the spec stored and a
    # volume and launch template created)
    array_id = arrays()
    ec2 = boto3.client("ec2")
    open_group = ec2.create_security_group(GroupName=f"{array_id}-open", Description="open to all")["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=open_group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 4420, "ToPort": 4420, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
        ],
    )
    spec = spec_for(array_id, world)
    spec["controllers"] = {
        **spec["controllers"],
        "securityGroupIds": ["sg-0123456789abcdef0", open_group],
        "instanceProfile": f"{array_id}-no-such-profile",
    }
    # When it is applied
    status, reply = api.call("PUT", f"/arrays/{array_id}", spec)
    # Then 400 names every problem at once, and nothing is stored or created
    assert status == 400, reply
    assert "securityGroupIds sg-0123456789abcdef0 does not exist" in reply["message"]
    assert f"{open_group} opens port 4420 (NVMe/TCP) to 0.0.0.0/0" in reply["message"]
    assert f"instanceProfile {array_id}-no-such-profile does not exist" in reply["message"]
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404
    no_trace(array_id)
    templates = ec2.describe_launch_templates(
        Filters=[{"Name": "launch-template-name", "Values": [f"vsa-{array_id}-controller"]}]
    )["LaunchTemplates"]
    assert templates == []


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b'{"arrayId": "\xff\xfe"}', 400, "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "deeper than 32"),
        (b'{"pad": "' + b"x" * 300_000 + b'"}', 413, "at most 262144"),
    ],
)
def test_unreadable_bodies_are_4xx_with_a_message(
    api: Api, arrays: Callable[[], str], raw: bytes, status: int, message: str
) -> None:
    array_id = arrays()
    got, reply = api.call("PUT", f"/arrays/{array_id}", raw=raw)
    assert got == status, reply
    assert message in reply["message"]
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404


def test_a_string_for_a_number_is_422_naming_the_field(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    status, reply = api.call("PUT", f"/arrays/{array_id}", spec_for(array_id, world, minControllers="1"))
    assert status == 422, reply
    assert "body.minControllers: Input should be a valid integer" in reply["message"]
    no_trace(array_id)
