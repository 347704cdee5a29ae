"""Owned volumes end to end on the local cloud (fast profile; the real template, the real Lambda
code, the real documents on the nodes' sandboxes): the PUT answers at once and ReconcileArray
creates them (issue 17: the PUT no longer creates volumes inline), and a removed one is kept
unless the apply asks to delete it, then deleted only once detached from every controller."""

import time
from typing import Any

import boto3

from tests.integration.arrays_world import (
    alarms_of,
    get_array,
    node_root,
    owned_volumes,
    put_spec,
    settle,
    spec_for,
    write_mounts,
)
from tests.integration.conftest import wait_for_execution
from tests.integration.test_controller_lifecycle import check_serving
from tests.integration.test_health import check
from vsa_core.nvme import subsystem_nqn


def tags(volume: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in volume.get("Tags", [])}


OWNED = [{"name": f"data{i}", "sizeGiB": 8, "iops": 3000} for i in range(3)]


def _array(api: Any, stack_outputs: dict[str, str], world: Any, arrays: Any, scripted_alarms: Any) -> dict:
    """A 1-controller array with an existing volume and three owned ones, applied and converged:
    the PUT's answer, how long it took, the run, and what to check it with."""
    array_id = arrays()
    scripted_alarms(array_id)
    spec = spec_for(array_id, world, volumes=[{"volumeId": world.volume()}, *OWNED])
    started = time.monotonic()
    status, reply = api.call("PUT", f"/arrays/{array_id}", spec)
    answered = time.monotonic() - started
    assert status == 202, reply
    run = wait_for_execution(
        stack_outputs["ReconcileArrayStateMachineArn"], reply["reconcile"]["executionName"]
    )
    assert run["status"] == "SUCCEEDED", run.get("cause")
    settle(array_id, timeout=120)
    return {"spec": spec, "reply": reply, "answered": answered, "run": run}


def test_put_answers_202_with_the_plan_and_the_workflow_creates_tags_and_serves_the_owned_volumes(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # When an array with three owned volumes is applied
    made = _array(api, stack_outputs, world, arrays, scripted_alarms)
    spec, reply = made["spec"], made["reply"]
    array_id = spec["arrayId"]
    took = (made["run"]["stopDate"] - made["run"]["startDate"]).total_seconds()
    print(f"PUT with 3 owned volumes answered in {made['answered']:.1f} s; the run took {took:.1f} s")
    # Then the PUT answered 202 with the plan: each volume to create, and the run that creates them
    assert reply["creating"] == ["data0", "data1", "data2"]
    planned = {c["resource"]: c["action"] for c in reply["changes"]}
    assert [planned[f"volume/data{i}"] for i in range(3)] == ["create"] * 3
    assert reply["reconcile"]["remaining"][0].startswith("volume data0: create (io2 8 GiB, 3,000 IOPS")
    # and the workflow created each once, tagged as owned by the array, served by the controller
    owned = {tags(v)["Name"]: v for v in owned_volumes(array_id)}
    assert sorted(owned) == [f"vsa-{array_id}-data{i}" for i in range(3)]
    assert all(tags(v)["vsa:owned"] == "true" and v["Size"] == 8 for v in owned.values())
    ids = [spec["volumes"][0]["volumeId"], *(v["VolumeId"] for _, v in sorted(owned.items()))]
    host = spec["hosts"][0]["instanceId"]
    array = {
        "arrayId": array_id,
        "volumes": ids,
        "nqns": [subsystem_nqn(array_id, v) for v in ids],
        "hosts": {host: node_root(world.endpoint, host)},
    }
    check_serving(stack_outputs, world, array, 1)
    # and the IOPS alarms watch every volume, the created ones too
    for alarm in alarms_of(array_id).values():
        watched = {
            d["Value"]
            for m in alarm["Metrics"]
            if "MetricStat" in m
            for d in m["MetricStat"]["Metric"]["Dimensions"]
        }
        assert watched == set(ids), alarm["AlarmName"]
    # and GET shows the run converged
    shown = get_array(api, array_id)["reconcile"]
    assert (shown["state"], shown["error"]) == ("converged", None), shown


def test_a_removed_owned_volume_is_kept_unless_asked_then_deleted_once_detached(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given a running array with an existing volume and three owned ones, nothing mounted
    made = _array(api, stack_outputs, world, arrays, scripted_alarms)
    spec = made["spec"]
    array_id, existing = spec["arrayId"], spec["volumes"][0]["volumeId"]
    owned = {tags(v)["Name"].rsplit("-", 1)[1]: v["VolumeId"] for v in owned_volumes(array_id)}
    root = node_root(world.endpoint, spec["hosts"][0]["instanceId"])
    write_mounts(root, None, "")
    check(stack_outputs, array_id)
    ec2 = boto3.client("ec2")
    # When data0 is removed from the spec without asking for deletion
    without = {**spec, "volumes": [v for v in spec["volumes"] if v.get("name") != "data0"]}
    status, reply = put_spec(api, without)
    assert status == 200, reply
    assert reply.get("afterGatewayTimeout") or any(
        "data0" in line and "deleteRemovedVolumes=true" in line for line in reply["reconcile"]["remaining"]
    )
    run = wait_for_execution(
        stack_outputs["ReconcileArrayStateMachineArn"], reply["reconcile"]["executionName"]
    )
    assert run["status"] == "SUCCEEDED", run.get("cause")
    # Then it is kept, detached, and GET names it with how to delete it
    kept = ec2.describe_volumes(VolumeIds=[owned["data0"]])["Volumes"][0]
    assert (kept["State"], kept["Attachments"]) == ("available", [])
    shown = get_array(api, array_id)
    assert [(k["name"], k["volumeId"]) for k in shown["keptVolumes"]] == [("data0", owned["data0"])]
    assert "deleteRemovedVolumes=true" in shown["keptVolumes"][0]["howToDelete"]
    # When data1 is removed too, now asking for deletion (data0, kept earlier, goes with it)
    # (the hosts' mount report read before still counts: it lists data1, nothing mounted)
    asked = {**without, "volumes": [v for v in without["volumes"] if v.get("name") != "data1"]}
    started = time.monotonic()
    status, reply = put_spec(api, asked, query="?deleteRemovedVolumes=true")
    assert status == 200, reply
    run = wait_for_execution(
        stack_outputs["ReconcileArrayStateMachineArn"], reply["reconcile"]["executionName"]
    )
    took = time.monotonic() - started
    assert run["status"] == "SUCCEEDED", run.get("cause")
    print(f"remove an owned volume and delete two: {took:.1f} s from the PUT")
    # Then both are deleted (EBS no longer has them), after being detached from the controller
    for name in ("data0", "data1"):
        found = ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [owned[name]]}])["Volumes"]
        assert [v["State"] for v in found] in ([], ["deleted"]), (name, found)
    # and the volume the array did not create, and the owned one still declared, are untouched
    left = {
        v["VolumeId"]: v["State"]
        for v in ec2.describe_volumes(VolumeIds=[existing, owned["data2"]])["Volumes"]
    }
    assert left == {existing: "in-use", owned["data2"]: "in-use"}
    shown = get_array(api, array_id)
    assert shown["keptVolumes"] == []
    assert shown["reconcile"]["pendingVolumeDeletions"] == []
    assert shown["reconcile"]["state"] == "converged"
