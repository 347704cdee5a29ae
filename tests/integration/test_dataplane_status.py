"""Status from what the nodes report, and a dry-run that changes nothing, on the local cloud:
the real template deployed with the controller lifecycle on, the real Lambda code, the real
documents run by Run Command on the nodes' sandboxes. Nothing here fakes a report: a path is
lost the way an operator (or anything behind the control plane's back) would lose it, by
running disconnect-path on the host."""

import time
from collections.abc import Callable
from typing import Any

import boto3

from tests.integration.arrays_world import (
    FAKES,
    World,
    create_array,
    group_of,
    owned_volumes,
    put_new,
    read_array,
    settle,
    spec_for,
)
from tests.integration.conftest import Api


def _status(api: Api, array_id: str) -> dict[str, Any]:
    code, answer = read_array(api, array_id)
    assert code == 200, answer
    return dict(answer["status"])


def _run(document: str, instance_id: str, parameters: dict[str, list[str]]) -> None:
    ssm = boto3.client("ssm")
    command = ssm.send_command(DocumentName=document, InstanceIds=[instance_id], Parameters=parameters)
    command_id = command["Command"]["CommandId"]
    ssm.get_waiter("command_executed").wait(
        CommandId=command_id, InstanceId=instance_id, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )


def test_status_counts_a_hosts_paths_from_its_report_and_names_the_path_it_lost(
    api: Api, world: World, arrays: Callable[[], str], stack_outputs: dict[str, str]
) -> None:
    # Given an array of one volume and one host, served by two controllers
    array_id = arrays()
    volume = world.volume()
    spec = spec_for(array_id, world, volumes=[{"volumeId": volume}], minControllers=2, maxControllers=2)
    create_array(api, array_id, spec)
    settle(array_id)
    host = spec["hosts"][0]["instanceId"]
    status = _status(api, array_id)
    # Then the status is converged: every controller exports the volume, the host reports a
    # live path through each, at the volume's size, round-robin
    assert status["dataPlane"] == {"converged": True, "servingControllers": 2, "differences": []}
    (shown,) = status["hosts"]
    assert shown["paths"] == 2
    (seen,) = shown["observed"]["volumes"]
    assert (seen["volumeId"], seen["livePaths"], seen["ioPolicy"], seen["sizeBytes"]) == (
        volume,
        2,
        "round-robin",
        100 * 2**30,
    )
    assert shown["observed"]["report"]["document"] == "connect-path"
    for controller in status["controllers"]:
        (export,) = controller["observed"]["exports"]
        assert (export["volumeId"], export["enabled"], export["sizeBytes"]) == (volume, True, 100 * 2**30)

    # When the host loses its path through one controller behind the control plane's back
    lost = next(c for c in status["controllers"] if c["slot"] == 1)
    address = lost["privateIp"]
    _run(
        stack_outputs["DisconnectPathDocumentName"],
        host,
        {
            "ArrayId": [array_id],
            "Volumes": [volume],
            "Address": [address],
            "NvmeCommand": [str(FAKES / "nvme")],
        },
    )
    # Then the status says so from the host's own report, in words, while the registry still
    # counts two serving controllers
    status = _status(api, array_id)
    assert status["hosts"][0]["paths"] == 1
    assert status["dataPlane"]["converged"] is False
    assert status["dataPlane"]["servingControllers"] == 2
    assert [d["text"] for d in status["dataPlane"]["differences"]] == [
        f"host {host} has no path to volume {volume} through controller {lost['instanceId']} ({address})"
    ]


def test_a_dry_run_shows_the_plan_and_changes_nothing(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    # Given an applied array with one controller serving
    array_id = arrays()
    spec = spec_for(array_id, world, minControllers=1, maxControllers=4)
    put_new(api, spec)
    settle(array_id)
    before = (group_of(array_id), sorted(v["VolumeId"] for v in owned_volumes(array_id)))
    # When a spec adding a volume and a host and raising maxControllers is dry-run
    changed = {
        **spec,
        "maxControllers": 6,
        "volumes": [*spec["volumes"], {"name": "more", "sizeGiB": 20, "iops": 1000}],
        "hosts": [*spec["hosts"], {"instanceId": world.host(), "mountpoints": ["/data"]}],
    }
    started = time.monotonic()
    code, plan = api.call("PUT", f"/arrays/{array_id}?dryRun=true", changed)
    # Then it answers the plan, control plane and data plane, within the API's time
    assert code == 200, plan
    assert time.monotonic() - started < 29
    assert plan["dryRun"] is True
    assert plan["version"] == 1
    steps = [(c["resource"], c["action"]) for c in plan["changes"] if c["action"] != "unchanged"]
    new_host = changed["hosts"][1]["instanceId"]
    assert ("volume/more", "create") in steps
    assert ("group/" + f"vsa-{array_id}-controllers", "update") in steps
    assert ("volume/more", "attach") in steps
    assert ("volume/more", "export") in steps
    assert (f"host/{spec['hosts'][0]['instanceId']}", "connect") in steps
    assert (f"host/{new_host}", "allow") in steps
    assert (f"host/{new_host}", "connect") in steps
    # and nothing was created, modified or stored
    assert (group_of(array_id), sorted(v["VolumeId"] for v in owned_volumes(array_id))) == before
    code, stored = read_array(api, array_id)
    assert code == 200
    assert stored["version"] == 1
    assert stored["spec"]["maxControllers"] == 4
