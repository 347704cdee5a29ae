"""The health check on the local cloud: the real template deployed, the real Lambda code, the
real documents on the nodes' sandboxes. Each run is invoked for the test's own array (the
schedule is off on the local cloud: a run in the middle of another test would replace its
hosts' last reports); a controller dies the way a wedged nvmet does, its port taken down on
its node behind the control plane's back, and nothing but the health check notices."""

import json
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config

from tests.integration.arrays_world import (
    FAKES,
    World,
    create_array,
    get_array,
    group_of,
    host_paths,
    node_root,
    settle,
    spec_for,
)
from tests.integration.conftest import Api, wait_for_execution


def check(stack_outputs: dict[str, str], array_id: str) -> dict[str, Any]:
    """One health-check run for the array, and (waited for) the report-paths it sent."""
    # the function may run for its whole Timeout (120 s, template.yaml); botocore's default read
    # timeout (60 s) gives up first on a loaded machine (ReadTimeoutError while it runs on)
    reply = boto3.client("lambda", config=Config(read_timeout=150, retries={"max_attempts": 0})).invoke(
        FunctionName=stack_outputs["TaskHealthCheckFunctionName"],
        Payload=json.dumps({"arrayIds": [array_id]}).encode(),
    )
    payload = json.loads(reply["Payload"].read())
    assert "FunctionError" not in reply, payload
    (seen,) = payload["arrays"]
    ssm = boto3.client("ssm")
    deadline = time.monotonic() + 120
    document = stack_outputs["ReportPathsDocumentName"]
    while True:
        pending = [
            i
            for i in ssm.list_command_invocations(Filters=[{"key": "DocumentName", "value": document}])[
                "CommandInvocations"
            ]
            if i["Status"] in ("Pending", "InProgress", "Delayed")
        ]
        if not pending:
            return dict(seen)
        assert time.monotonic() < deadline, f"report-paths still running: {pending}"
        time.sleep(0.5)


def take_port_down(endpoint: str, instance_id: str) -> None:
    """What a wedged nvmet looks like from outside: its TCP port no longer serves any subsystem
    (configfs: the port's subsystem links gone), while the instance runs on."""
    ports = node_root(endpoint, instance_id) / "sys/kernel/config/nvmet/ports"
    links = [link for port in ports.iterdir() for link in (port / "subsystems").iterdir()]
    assert links, f"{instance_id} exports nothing to take down"
    for link in links:
        if link.is_symlink() or link.is_file():
            link.unlink()
        else:
            shutil.rmtree(link)


def metric(name: str, array_id: str) -> float | None:
    now = datetime.now(UTC)
    points = boto3.client("cloudwatch").get_metric_statistics(
        Namespace="VSA/Arrays",
        MetricName=name,
        Dimensions=[{"Name": "ArrayId", "Value": array_id}],
        StartTime=now - timedelta(minutes=15),
        EndTime=now + timedelta(minutes=1),
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    return max(p["Maximum"] for p in points) if points else None


def test_a_controller_no_host_reaches_is_replaced_and_the_hosts_end_with_a_live_path_per_controller(
    api: Api, world: World, arrays: Callable[[], str], stack_outputs: dict[str, str]
) -> None:
    # Given an array of one volume and two hosts, served by two controllers
    array_id = arrays()
    volume = world.volume()
    hosts = [{"instanceId": world.host(), "mountpoints": ["/data"]} for _ in range(2)]
    spec = spec_for(
        array_id, world, volumes=[{"volumeId": volume}], hosts=hosts, minControllers=2, maxControllers=2
    )
    create_array(api, array_id, spec)
    settle(array_id)
    status = get_array(api, array_id)["status"]
    assert status["dataPlane"]["converged"] is True, status["dataPlane"]
    controllers = {c["instanceId"]: c["privateIp"] for c in status["controllers"]}

    # When the health check runs: every host reports both paths live (report-paths, read only)
    first = check(stack_outputs, array_id)
    assert (first["servingControllers"], first["hostsShortOfPaths"], first["deadControllers"]) == (2, {}, {})
    assert first["reportsRequested"] == 4  # report-paths to 2 hosts, report-exports to 2 controllers
    second = check(stack_outputs, array_id)  # reads the first run's report-paths
    assert (second["hostsReporting"], second["minLivePaths"], second["replaced"]) == (2, 2, None)
    shown = get_array(api, array_id)["status"]["hosts"]
    assert {h["observed"]["report"]["document"] for h in shown} == {"report-paths"}
    # and publishes what it saw, which the deployed dashboard graphs
    assert metric("ServingControllers", array_id) == 2
    assert metric("MinLivePaths", array_id) == 2
    body = boto3.client("cloudwatch").get_dashboard(DashboardName=stack_outputs["OperationsDashboardName"])
    searched = json.dumps(json.loads(body["DashboardBody"]))
    for name in (
        "ServingControllers",
        "MinLivePaths",
        "HostsShortOfPaths",
        "DeadControllers",
        "BackupAgeSeconds",
    ):
        assert f'MetricName=\\"{name}\\"' in searched, name

    # When one controller's nvmet stops serving while its instance runs
    dead = sorted(controllers)[0]
    take_port_down(world.endpoint, dead)
    for host in hosts:  # (the hosts see it: its paths reconnect)
        for states in host_paths(node_root(world.endpoint, host["instanceId"])).values():
            assert states[controllers[dead]] == "connecting", states
    # Then the next run (reading reports taken before) sees nothing yet; the one after suspects
    # it, witnessed by both hosts; the one after that confirms it and has the group replace it
    assert check(stack_outputs, array_id)["deadControllers"] == {}
    suspected = check(stack_outputs, array_id)
    assert suspected["deadControllers"] == {dead: sorted(h["instanceId"] for h in hosts)}
    assert suspected["hostsShortOfPaths"] == {h["instanceId"]: 1 for h in hosts}
    assert suspected["replaced"] is None
    confirmed = check(stack_outputs, array_id)
    assert confirmed["replaced"] == dead
    group = group_of(array_id)
    assert group is not None
    assert {i["InstanceId"]: i.get("HealthStatus") for i in group["Instances"]}.get(dead) in (
        "Unhealthy",
        None,
    )

    # And the group replaces it: the lost controller drains (its dead path taken off every
    # host), a new one bootstraps, and every host ends with a live path per serving controller
    deadline = time.monotonic() + 300
    while True:
        group = group_of(array_id)
        assert group is not None
        members = {i["InstanceId"]: i["LifecycleState"] for i in group["Instances"]}
        if dead not in members and list(members.values()) == ["InService", "InService"]:
            break
        assert time.monotonic() < deadline, f"no replacement after 300 s: {members}"
        time.sleep(2)
    settle(array_id)
    status = get_array(api, array_id)["status"]
    assert status["dataPlane"]["converged"] is True, status["dataPlane"]["differences"]
    serving = {c["instanceId"]: c["privateIp"] for c in status["controllers"]}
    assert dead not in serving
    assert len(serving) == 2
    for host in hosts:
        for states in host_paths(node_root(world.endpoint, host["instanceId"])).values():
            assert {a: s for a, s in states.items() if s == "live"} == dict.fromkeys(serving.values(), "live")
            assert controllers[dead] not in states or controllers[dead] in serving.values()
    healed = check(stack_outputs, array_id)
    assert (healed["deadControllers"], healed["replaced"]) == ({}, None)


def test_a_path_lost_behind_the_control_planes_back_is_drift_that_the_health_check_converges(
    api: Api, world: World, arrays: Callable[[], str], stack_outputs: dict[str, str]
) -> None:
    # Given an array of one volume and two hosts, served by two controllers, converged
    array_id = arrays()
    volume = world.volume()
    hosts = [world.host() for _ in range(2)]
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": volume}],
        hosts=[{"instanceId": h, "mountpoints": ["/data"]} for h in hosts],
        minControllers=2,
        maxControllers=2,
    )
    create_array(api, array_id, spec)
    settle(array_id)
    assert check(stack_outputs, array_id)["drift"] == []
    status = get_array(api, array_id)["status"]
    lost = sorted(c["privateIp"] for c in status["controllers"])[0]

    # When one host's path through one controller is disconnected behind the control plane's back
    ssm = boto3.client("ssm")
    command = ssm.send_command(
        DocumentName=stack_outputs["DisconnectPathDocumentName"],
        InstanceIds=[hosts[0]],
        Parameters={
            "ArrayId": [array_id],
            "Volumes": [volume],
            "Address": [lost],
            "NvmeCommand": [str(FAKES / "nvme")],
        },
    )["Command"]["CommandId"]
    ssm.get_waiter("command_executed").wait(
        CommandId=command, InstanceId=hosts[0], WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )

    # Then the health check names the drift on its first run (the host's own report says so) and
    # holds; the controller is not dead (the other host reaches it)
    first = check(stack_outputs, array_id)
    assert first["drift"], first
    assert (first["deadControllers"], first["reconcileStarted"]) == ({}, None)
    assert first["hostsShortOfPaths"] == {hosts[0]: 1}
    # and on the second it starts ReconcileArray, which connects the host again
    second = check(stack_outputs, array_id)
    assert second["reconcileStarted"], second
    run = wait_for_execution(stack_outputs["ReconcileArrayStateMachineArn"], second["reconcileStarted"])
    assert run["status"] == "SUCCEEDED", run.get("cause")
    for states in host_paths(node_root(world.endpoint, hosts[0])).values():
        assert states.get(lost) == "live", states
    healed = check(stack_outputs, array_id)
    assert (healed["drift"], healed["hostsShortOfPaths"], healed["reconcileStarted"]) == ([], {}, None)


def test_a_subsystem_unlinked_from_a_controllers_port_is_seen_by_report_exports_and_converged(
    api: Api, world: World, arrays: Callable[[], str], stack_outputs: dict[str, str]
) -> None:
    # Given an array of two volumes and two hosts, served by two controllers, converged
    array_id = arrays()
    volumes = [world.volume(), world.volume()]
    hosts = [world.host() for _ in range(2)]
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": v} for v in volumes],
        hosts=[{"instanceId": h, "mountpoints": ["/data"]} for h in hosts],
        minControllers=2,
        maxControllers=2,
    )
    create_array(api, array_id, spec)
    settle(array_id)
    status = get_array(api, array_id)["status"]
    victim = sorted(status["controllers"], key=lambda c: c["instanceId"])[1]
    assert check(stack_outputs, array_id)["drift"] == []

    # When one volume's subsystem is unlinked from that controller's port behind our back
    nqn = f"nqn.2025-01.org.vsa-control-plane:array:{array_id}:{volumes[1]}"
    ports = node_root(world.endpoint, victim["instanceId"]) / "sys/kernel/config/nvmet/ports"
    links = list(ports.glob(f"*/subsystems/{nqn}"))
    assert links
    for link in links:
        link.unlink()

    # Then the controller's own report-exports shows it (the next run reads it), the controller
    # is not dead (the hosts reach it for the other volume), and the drift starts ReconcileArray
    seen = check(stack_outputs, array_id)  # reads the reports sent before the change
    seen = check(stack_outputs, array_id)
    shown = get_array(api, array_id)["status"]["controllers"]
    report = next(c for c in shown if c["instanceId"] == victim["instanceId"])["observed"]["report"]
    assert report["document"] == "report-exports", report
    assert seen["deadControllers"] == {}
    assert any(volumes[1] in text for text in seen["drift"]), seen["drift"]
    started = check(stack_outputs, array_id)["reconcileStarted"]
    assert started, "no ReconcileArray for a drift seen on two runs"
    run = wait_for_execution(stack_outputs["ReconcileArrayStateMachineArn"], started)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    # And the subsystem is linked again: every host has a live path to it through both
    assert list(ports.glob(f"*/subsystems/{nqn}"))
    for host in hosts:
        states = host_paths(node_root(world.endpoint, host))[nqn]
        assert sorted(states.values()) == ["live", "live"], states
    healed = check(stack_outputs, array_id)
    healed = check(stack_outputs, array_id)
    assert (healed["drift"], healed["hostsShortOfPaths"]) == ([], {})
