"""Fencing end to end on the local cloud (``fencing: reservations``), the real template and
Lambda code: each volume has one owner controller (its namespace in the owner's ANA group on
every controller, optimized only there), every controller registers its own reservation key on
every volume, and a lost controller's volumes move to a survivor only after the survivor has
preempted the lost key.

The nodes' nvmet is a configfs tree in their sandboxes and the EBS reservations are the fake
nvme-cli's model of them (``tests/fakes/nvme``: one state per volume, shared by every node it is
attached to), so what is asserted is what configure-target wrote and what EBS would hold.
"""

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3

from tests.integration.arrays_world import create_array, get_array, node_root, settle, spec_for
from tests.integration.conftest import fire_alarm, recent_stamp, wait_for_execution
from tests.integration.test_controller_lifecycle import lost_events, serving
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.nvme import subsystem_nqn


def _registry(stack_outputs: dict[str, str]) -> ArrayRegistry:
    return ArrayRegistry(stack_outputs["RegistryTableName"], boto3.client("dynamodb"))


def ana(root: Path, array_id: str, volumes: list[str]) -> dict[str, tuple[str, str]]:
    """volume -> (its namespace's ANA group, that group's state on this controller's port)."""
    nvmet = root / "sys/kernel/config/nvmet"
    ports = [p for p in (nvmet / "ports").iterdir() if p.is_dir()]
    found = {}
    for volume in volumes:
        group = (
            (nvmet / "subsystems" / subsystem_nqn(array_id, volume) / "namespaces/1/ana_grpid")
            .read_text()
            .strip()
        )
        states = {(p / "ana_groups" / group / "ana_state").read_text().strip() for p in ports}
        found[volume] = (group, "/".join(sorted(states)))
    return found


def registrants(root: Path, volume: str) -> dict[str, Any]:
    """The fake EBS's reservation state of ``volume``: its type and each registrant's key."""
    path = root.parent / ".ebs-reservations" / f"{volume}.json"
    return json.loads(path.read_text()) if path.exists() else {"rtype": 0, "keys": {}}


def wait_for_owners(
    stack_outputs: dict[str, str], array_id: str, slots: set[int], timeout: float = 600
) -> dict:
    """Until the registry records every volume owned by ``slots`` (each owning at least one) and
    no handover under way: ReconcileArray's export phase has handed them over."""
    deadline = time.monotonic() + timeout
    while True:
        array = _registry(stack_outputs).get(array_id)
        if array.owners_handover is None and set(array.owners.values()) == slots:
            return array.owners
        assert time.monotonic() < deadline, (array.owners, array.owners_handover, array.reconcile)
        time.sleep(1)


def scale_out(stack_outputs: dict[str, str], array_id: str, timeout: float = 300) -> None:
    """The high alarm at 40,000 IOPS until a ScaleArray run scales out: a run that finds the
    scaling lock held (the health check's look-ahead run, say) skips, and the alarm fires again
    once the lock is free, as CloudWatch's re-armed alarm would."""
    registry = _registry(stack_outputs)
    deadline = time.monotonic() + timeout
    while True:
        name = fire_alarm(array_id, 40_000.0, recent_stamp())
        run = wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], name)
        assert run["status"] == "SUCCEEDED", run
        if json.loads(run["output"])["action"] == "scale-out":
            return
        assert time.monotonic() < deadline, run["output"]
        while (until := registry.get(array_id).scaling_lock_until) is not None and until > time.time():
            assert time.monotonic() < deadline, "the scaling lock stays held"
            time.sleep(1)


def fenced_array(
    stack_outputs: dict[str, str], api: Any, world: Any, arrays: Any, scripted_alarms: Any, most: int
) -> tuple[str, list[str], dict[str, int]]:
    """An array with fencing, three volumes and two serving controllers (at most ``most``), the
    tests playing its alarms, once the volumes have owners: each controller's BootstrapController,
    once it serves, starts ReconcileArray (unless the recorded run will), whose export phase
    hands them over; no health check runs. Its id, its volumes and their owners."""
    array_id = arrays()
    scripted_alarms(array_id)
    volumes = [world.volume(), world.volume(), world.volume()]
    spec = spec_for(
        array_id, world, volumes=[{"volumeId": v} for v in volumes], minControllers=2, maxControllers=most
    )
    del spec["fencing"]  # the default, as a new array gets it
    create_array(api, array_id, spec)
    assert get_array(api, array_id)["spec"]["fencing"] == "reservations"
    settle(array_id)
    return array_id, volumes, wait_for_owners(stack_outputs, array_id, {0, 1})


def test_each_volume_has_one_owner_and_a_lost_owner_is_fenced_before_a_survivor_serves_it(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given an array with fencing, three volumes and two controllers; once they serve, their
    # BootstrapController runs start ReconcileArray, which hands the volumes over
    array_id, volumes, owners = fenced_array(stack_outputs, api, world, arrays, scripted_alarms, 2)
    # Then every volume has one owner, the split is even, and on every controller each volume's
    # namespace is in its owner's group, optimized on the owner only
    assert sorted(Counter(owners.values()).values()) == [1, 2]
    slots = serving(array_id, stack_outputs)
    roots = {s: node_root(world.endpoint, item["instanceId"]) for s, item in slots.items()}
    for slot, root in roots.items():
        seen = ana(root, array_id, volumes)
        for volume in volumes:
            state = "optimized" if owners[volume] == slot else "inaccessible"
            assert seen[volume] == (str(owners[volume] + 2), state), (slot, seen)
    # And both controllers hold every volume Write Exclusive - All Registrants, each by its key
    held = {v: registrants(roots[0], v) for v in volumes}
    ids = {item["instanceId"] for item in slots.values()}
    assert all(h["rtype"] == 5 and set(h["keys"]) == ids for h in held.values()), held

    # When the controller owning two volumes is lost (EC2 terminates it: no lifecycle action)
    big = next(s for s, n in Counter(owners.values()).items() if n == 2)
    lost, survivor = slots[big]["instanceId"], slots[1 - big]["instanceId"]
    lost_key = {v: h["keys"][lost] for v, h in held.items()}
    boto3.client("ec2").terminate_instances(InstanceIds=[lost])
    drains = [what for how, what in lost_events(stack_outputs, lost).values() if how == "execution"]
    assert drains, "no DrainController ran"
    assert {d["status"] for d in drains} == {"SUCCEEDED"}, drains
    # Then the survivor owns every volume, having preempted the lost controller's key on each
    # (EBS would refuse any write the lost one still holds), and serves them all
    after = wait_for_owners(stack_outputs, array_id, {1 - big})
    assert set(after) == set(volumes)
    for volume in volumes:
        state = registrants(roots[1 - big], volume)
        assert lost not in state["keys"], (volume, state)
        assert state["keys"][survivor] != lost_key[volume]
    assert all(s == (str(1 - big + 2), "optimized") for s in ana(roots[1 - big], array_id, volumes).values())
    # and the drain that fenced says so in its history: a handover with fence, before any host
    # let go of the lost controller's paths
    sfn = boto3.client("stepfunctions")
    fenced = []
    for drain in drains:
        history = sfn.get_execution_history(executionArn=drain["executionArn"], maxResults=1000)["events"]
        for event in history:
            details = event.get("lambdaFunctionScheduledEventDetails") or {}
            given = json.loads(details.get("input") or "{}")
            if given.get("step") == "handover":
                fenced.append(given["fence"])
    assert fenced, "no handover in any drain"
    assert all(fenced), fenced


def test_a_new_controller_takes_its_share_after_the_givers_release_it_and_a_drained_one_hands_it_back(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given an array with fencing whose two controllers own its three volumes
    array_id, volumes, before = fenced_array(stack_outputs, api, world, arrays, scripted_alarms, 3)
    # When a third controller joins (the high alarm at 40,000 IOPS: ScaleArray wants 3)
    scale_out(stack_outputs, array_id)
    settle(array_id, timeout=300)
    slots = serving(array_id, stack_outputs)
    assert sorted(slots) == [0, 1, 2]
    newcomer = node_root(world.endpoint, slots[2]["instanceId"])
    # Then it registered its key on every volume
    assert all(slots[2]["instanceId"] in registrants(newcomer, v)["keys"] for v in volumes)
    # And, with no health check run, its BootstrapController started the handover once it served:
    # ReconcileArray's export phase gives it its share, the givers releasing it first (wave 1),
    # then the newcomer serving it
    after = wait_for_owners(stack_outputs, array_id, {0, 1, 2})
    moved = [v for v in volumes if after[v] != before[v]]
    assert [after[v] for v in moved] == [2], (before, after)
    assert ana(newcomer, array_id, volumes)[moved[0]] == ("4", "optimized")
    giver = node_root(world.endpoint, slots[before[moved[0]]]["instanceId"])
    assert ana(giver, array_id, volumes)[moved[0]] == ("4", "inaccessible")
    # (no one fenced anyone: every controller is still registered on every volume)
    ids = {item["instanceId"] for item in slots.values()}
    assert all(set(registrants(newcomer, v)["keys"]) == ids for v in volumes)

    # When the newcomer is drained (a planned scale-in: the terminate lifecycle action)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=slots[2]["instanceId"], ShouldDecrementDesiredCapacity=True
    )
    settle(array_id, timeout=300)
    # Then its volume went back to a survivor before it left, released by it rather than fenced
    # (it is still registered: a planned drain that could release fences no one)
    back = wait_for_owners(stack_outputs, array_id, {0, 1})
    assert back[moved[0]] in (0, 1)
    assert slots[2]["instanceId"] in registrants(newcomer, moved[0])["keys"]
    taker = node_root(world.endpoint, slots[back[moved[0]]]["instanceId"])
    assert ana(taker, array_id, volumes)[moved[0]] == (str(back[moved[0]] + 2), "optimized")
