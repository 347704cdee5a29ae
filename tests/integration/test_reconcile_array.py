"""ReconcileArray end to end on the local cloud: a spec change on a running 4-controller array
converges the data plane (the real template, the real Lambda code, the real documents by Run
Command on the nodes' sandboxes), while a sampler watches every host's paths.

The sampler (``PathWatch``) reads every host's ``nvme list-subsys`` five times a second while the
change runs and fails the test if a path of any host to a volume that was there before the
change ever leaves ``live``, or if a host's live paths to such a volume ever drop below one per
controller."""

import time
from typing import Any

import boto3
import pytest

from tests.integration.arrays_world import (
    create_array,
    exported,
    get_array,
    host_paths,
    node_root,
    owned_volumes,
    put_new,
    put_spec,
    settle,
    spec_for,
    write_mounts,
)
from tests.integration.conftest import wait_for_execution
from tests.integration.test_controller_lifecycle import PathWatch, attached_to, check_serving
from tests.integration.test_health import check
from vsa_core.nvme import default_host_nqn, subsystem_nqn

# AWS's timings: volumes attach in seconds, documents run through Run Command's delivery
pytestmark = pytest.mark.usefixtures("realistic_timings")

CONTROLLERS = 4


@pytest.fixture
def running_array(stack_outputs, api, world, arrays, scripted_alarms) -> dict[str, Any]:
    """A running array: 4 serving controllers, 2 volumes, 2 hosts with 4 live paths to each."""
    array_id = arrays()
    scripted_alarms(array_id)  # no scaling under the test: it plays no alarm
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": world.volume()}, {"volumeId": world.volume()}],
        minControllers=CONTROLLERS,
        maxControllers=CONTROLLERS,
    )
    spec["hosts"] = [{"instanceId": world.host(), "mountpoints": ["/data"]} for _ in range(2)]
    create_array(api, array_id, spec)
    settle(array_id, timeout=300)
    volumes = [v["volumeId"] for v in spec["volumes"]]
    array = {
        "arrayId": array_id,
        "spec": spec,
        "volumes": volumes,
        "nqns": [subsystem_nqn(array_id, v) for v in volumes],
        "hosts": {h["instanceId"]: node_root(world.endpoint, h["instanceId"]) for h in spec["hosts"]},
    }
    check_serving(stack_outputs, world, array, CONTROLLERS)
    return array


def apply_and_follow(
    api: Any, stack_outputs: dict[str, str], spec: dict[str, Any], query: str = ""
) -> tuple[dict, float]:
    """PUT the spec, then follow the ReconcileArray run it started to its end: (run, seconds)."""
    started = time.monotonic()
    status, reply = put_spec(api, spec, query)
    answered = time.monotonic() - started
    assert status == 200, reply
    assert reply["reconcile"]["state"] == "converging", reply
    print(
        f"PUT answered in {answered:.1f} s: {reply['reconcile'].get('remaining')} {reply.get('forced', '')}"
    )
    # while it runs, GET shows the array converging with its current step
    # (a 504 is API Gateway giving up on a status read that takes over 29 s, as with 8 test
    # processes on 2 cores; a caller asks again, as wait_until_gone does)
    for _ in range(3):
        code, answer = api.call("GET", f"/arrays/{spec['arrayId']}")
        if code != 504:
            break
    assert code == 200, (code, answer)
    shown = answer["reconcile"]
    assert shown["state"] in ("converging", "converged"), shown
    # A roll replaces every controller one at a time, each bootstrapping in turn: on a loaded
    # machine its run outlasts the default 120 polls; the run bounds itself (its phases'
    # timeouts), so wait for it
    run = wait_for_execution(
        stack_outputs["ReconcileArrayStateMachineArn"], reply["reconcile"]["executionName"]
    )
    assert run["status"] == "SUCCEEDED", run.get("cause")
    return run, (run["stopDate"] - run["startDate"]).total_seconds()


def test_a_volume_added_then_removed_converges_on_every_controller_and_host_without_a_blink(
    stack_outputs, api, world, running_array
):
    array, array_id = running_array, running_array["arrayId"]
    before = {i: exported(node_root(world.endpoint, i)) for i in _serving(stack_outputs, world, array)}
    added = world.volume()
    grown_spec = {**array["spec"], "volumes": [*array["spec"]["volumes"], {"volumeId": added}]}
    new_nqn = subsystem_nqn(array_id, added)
    # When a volume is added to the running array's spec, with the sampler watching
    with PathWatch(array["hosts"], array["nqns"]) as watch:
        _, seconds = apply_and_follow(api, stack_outputs, grown_spec)
    print(f"add a volume to {CONTROLLERS} controllers x {len(array['hosts'])} hosts: {seconds:.1f} s")
    # Then it is attached to all 4, exported identically on each, and every host has 4 live paths
    grown = {**array, "volumes": [*array["volumes"], added], "nqns": [*array["nqns"], new_nqn]}
    controllers = check_serving(stack_outputs, world, grown, CONTROLLERS)
    # and the subsystems that were there are untouched (same identities and cntlid ranges)
    for instance in controllers:
        now = exported(node_root(world.endpoint, instance))
        assert {n: now[n] for n in before[instance]} == before[instance]
    # and no host's path to an existing volume ever left live, none had fewer than 4
    assert watch.samples > 5, watch.samples
    assert watch.not_live == set(), watch.not_live
    assert watch.fewest[0] >= CONTROLLERS, watch.fewest
    shown = get_array(api, array_id)["reconcile"]
    assert (shown["state"], shown["step"], shown["error"]) == ("converged", "done", None), shown
    # Given one host has the new volume mounted (its mount table), the other nothing, as the
    # hosts' report-paths say (the health check sends it)
    mounted_on, other = sorted(array["hosts"])
    write_mounts(array["hosts"][mounted_on], new_nqn, "/mnt/added")
    write_mounts(array["hosts"][other], None, "")
    check(stack_outputs, array_id)
    # When it is removed from the spec, it is refused: 409 naming the host, the mountpoint and
    # how to force, and nothing changed (the version, every host's paths)
    version = get_array(api, array_id)["version"]
    started = time.monotonic()
    status, refused = api.call("PUT", f"/arrays/{array_id}", array["spec"])
    print(f"refused removal answered in {time.monotonic() - started:.1f} s")
    assert status == 409, refused
    assert f"host {mounted_on} has volume {added} mounted at /mnt/added" in refused["message"], refused
    assert "force=true" in refused["message"], refused
    assert other not in refused["message"], refused
    assert get_array(api, array_id)["version"] == version
    assert all(host_paths(root)[new_nqn] for root in array["hosts"].values())
    # When it is removed with force
    with PathWatch(array["hosts"], array["nqns"]) as watch:
        _, seconds = apply_and_follow(api, stack_outputs, array["spec"], "?force=true")
    print(f"remove a volume from {CONTROLLERS} controllers x {len(array['hosts'])} hosts: {seconds:.1f} s")
    # Then no host has a path to it, no controller exports it or holds it, the rest is as before
    for root in array["hosts"].values():
        assert new_nqn not in host_paths(root)
    for instance in controllers:
        assert new_nqn not in exported(node_root(world.endpoint, instance))
    assert attached_to([added]) == {added: set()}
    assert boto3.client("ec2").describe_volumes(VolumeIds=[added])["Volumes"][0]["State"] == "available"
    check_serving(stack_outputs, world, array, CONTROLLERS)
    assert watch.samples > 5, watch.samples
    assert watch.not_live == set(), watch.not_live
    assert watch.fewest[0] >= CONTROLLERS, watch.fewest


def _serving(stack_outputs: dict[str, str], world: Any, array: dict[str, Any]) -> list[str]:
    return check_serving(stack_outputs, world, array, CONTROLLERS)


def allowed_hosts(root: Any, nqn: str) -> set[str]:
    """The host NQNs a controller's subsystem admits (its configfs allowed_hosts links)."""
    folder = root / "sys/kernel/config/nvmet/subsystems" / nqn / "allowed_hosts"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def test_a_host_added_then_removed_is_allowed_then_connected_and_disconnected_then_disallowed(
    stack_outputs, api, world, running_array
):
    array, array_id = running_array, running_array["arrayId"]
    controllers = _serving(stack_outputs, world, array)
    newcomer = world.host()
    with_host = {
        **array["spec"],
        "hosts": [*array["spec"]["hosts"], {"instanceId": newcomer, "mountpoints": ["/x"]}],
    }
    nqn = default_host_nqn(newcomer)
    # When a host is added to the running array's spec, with the sampler on the hosts already there
    with PathWatch(array["hosts"], array["nqns"]) as watch:
        _, seconds = apply_and_follow(api, stack_outputs, with_host)
    print(f"add a host to {CONTROLLERS} controllers x {len(array['volumes'])} volumes: {seconds:.1f} s")
    # Then every controller admits it and it has a live path to every volume through each
    for instance in controllers:
        for subsystem in array["nqns"]:
            assert nqn in allowed_hosts(node_root(world.endpoint, instance), subsystem)
    grown = {**array, "hosts": {**array["hosts"], newcomer: node_root(world.endpoint, newcomer)}}
    check_serving(stack_outputs, world, grown, CONTROLLERS)
    assert watch.not_live == set(), watch.not_live
    assert watch.fewest[0] >= CONTROLLERS, watch.fewest
    # When it is removed again
    with PathWatch(array["hosts"], array["nqns"]) as watch:
        _, seconds = apply_and_follow(api, stack_outputs, array["spec"])
    print(f"remove a host from {CONTROLLERS} controllers x {len(array['volumes'])} volumes: {seconds:.1f} s")
    # Then it holds no path to the array and no controller admits it; the others are untouched
    left = host_paths(node_root(world.endpoint, newcomer))
    assert all(not left.get(subsystem) for subsystem in array["nqns"]), left
    for instance in controllers:
        for subsystem in array["nqns"]:
            assert nqn not in allowed_hosts(node_root(world.endpoint, instance), subsystem)
    check_serving(stack_outputs, world, array, CONTROLLERS)
    assert watch.not_live == set(), watch.not_live
    assert watch.fewest[0] >= CONTROLLERS, watch.fewest
    shown = get_array(api, array_id)["reconcile"]
    assert (shown["state"], shown["pendingHostRemovals"]) == ("converged", []), shown


GIB = 2**30


def _revalidated(root: Any, nqn: str) -> bool:
    """Whether configure-target wrote the namespace's revalidate_size on this controller."""
    return bool((root / "sys/kernel/config/nvmet/subsystems" / nqn / "namespaces/1/revalidate_size").exists())


def test_an_owned_volume_grown_is_re_read_by_every_controller_and_seen_by_every_host_without_a_blink(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given a running array of 2 controllers, 2 hosts, an existing volume and an owned 8 GiB one
    array_id = arrays()
    scripted_alarms(array_id)
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": world.volume()}, {"name": "data", "sizeGiB": 8, "iops": 3000}],
        minControllers=2,
        maxControllers=2,
    )
    spec["hosts"] = [{"instanceId": world.host(), "mountpoints": ["/data"]} for _ in range(2)]
    put_new(api, spec)  # 202: its ReconcileArray run creates the owned volume
    settle(array_id, timeout=300)
    (owned,) = [v["VolumeId"] for v in owned_volumes(array_id)]
    existing = spec["volumes"][0]["volumeId"]
    array = {
        "arrayId": array_id,
        "volumes": [existing, owned],
        "nqns": [subsystem_nqn(array_id, v) for v in (existing, owned)],
        "hosts": {h["instanceId"]: node_root(world.endpoint, h["instanceId"]) for h in spec["hosts"]},
    }
    controllers = check_serving(stack_outputs, world, array, 2)
    shown = get_array(api, array_id)["status"]
    assert {h["instanceId"]: [v["sizeBytes"] for v in h["observed"]["volumes"]] for h in shown["hosts"]} == {
        h: [100 * GIB, 8 * GIB] for h in array["hosts"]
    }
    grown = {**spec, "volumes": [spec["volumes"][0], {"name": "data", "sizeGiB": 16, "iops": 3000}]}
    # When the owned volume is grown to 16 GiB, with the sampler watching every host's paths
    with PathWatch(array["hosts"], array["nqns"]) as watch:
        started = time.monotonic()
        status, reply = api.call("PUT", f"/arrays/{array_id}", grown)
        assert status == 200, reply
        assert reply["reconcile"]["remaining"] == [
            "volume data: grow to 16 GiB (from 8 GiB), re-read the size on every controller, "
            "verify on every host"
        ]
        run = wait_for_execution(
            stack_outputs["ReconcileArrayStateMachineArn"], reply["reconcile"]["executionName"]
        )
        took = time.monotonic() - started
    assert run["status"] == "SUCCEEDED", run.get("cause")
    print(
        f"grow a volume on 2 controllers x 2 hosts: {took:.1f} s from the PUT, "
        f"run {(run['stopDate'] - run['startDate']).total_seconds():.1f} s; sampler: {watch.samples} samples"
    )
    # Then EBS has it at 16 GiB, and every controller's device grew and nvmet re-read it (only it)
    assert boto3.client("ec2").describe_volumes(VolumeIds=[owned])["Volumes"][0]["Size"] == 16
    for instance in controllers:
        root = node_root(world.endpoint, instance)
        assert _revalidated(root, subsystem_nqn(array_id, owned))
        assert not _revalidated(root, subsystem_nqn(array_id, existing))
    # and every controller's exports report and every host's report show the new size
    answer = get_array(api, array_id)
    assert answer["reconcile"]["state"] == "converged", answer["reconcile"]
    shown = answer["status"]
    for controller in shown["controllers"]:
        sizes = {e["volumeId"]: e["sizeBytes"] for e in controller["observed"]["exports"]}
        assert sizes == {existing: 100 * GIB, owned: 16 * GIB}, controller
    for host in shown["hosts"]:
        sizes = {v["volumeId"]: v["sizeBytes"] for v in host["observed"]["volumes"]}
        assert sizes == {existing: 100 * GIB, owned: 16 * GIB}, host
        assert host["paths"] == 2
    assert shown["dataPlane"]["differences"] == []
    # and no host's path ever left live, none had fewer than one per controller
    assert watch.samples > 5, watch.samples
    assert watch.not_live == set(), watch.not_live
    assert watch.fewest[0] >= 2, watch.fewest
