"""Many arrays per deployment (issue #16 item 5): an event's registry reads do not grow with the
number of arrays.

Each event a region sends the deployment is replayed through the core functions that handle it
(``tests/many_arrays.py``: an EC2 state change of a controller and of any other instance, a
launch and a terminate lifecycle action, an IOPS alarm) against the registry table as the
template declares it (moto), first with 3 arrays, then with 40; every DynamoDB call is recorded
through botocore's event hooks. No event may Scan, and each makes the same calls and reads the
same items at either size: a Scan (or any read that walks more of the table as it grows)
brought back into a hot path fails here. ``make bench-arrays`` measures the same on the local
cloud at 10 and 1,000 arrays.
"""

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from tests import many_arrays
from tests.many_arrays import Call, Recorder, World
from tests.unit.conftest import REGION

EVENTS: dict[str, Callable[[World], Any]] = {
    "a controller's EC2 state change": lambda w: w.state_change(many_arrays.controller(1, 2)),
    "another instance's EC2 state change": lambda w: w.state_change(many_arrays.foreign(7)),
    "a launch lifecycle action": lambda w: w.launch(1),
    "a terminate lifecycle action": lambda w: w.terminate(2),
    "an IOPS alarm": lambda w: w.alarm(0),
}


def shape(calls: list[Call]) -> list[tuple[str, str | None, int]]:
    """What a test compares: each call's operation, index and items read, in order."""
    return [(c.operation, c.index, c.items_read) for c in calls]


def keyed(calls: list[Call]) -> list[str]:
    """The calls that are not keyed reads (a Scan): empty when the event is O(1) in arrays."""
    return [f"{c.operation} ({c.items_read} items)" for c in calls if c.operation in ("Scan", "BatchGetItem")]


@pytest.fixture
def world(registry_table: str, function_env: None) -> tuple[World, Recorder, Any]:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    many_arrays.seed(dynamodb, registry_table, range(3))
    return World(dynamodb, registry_table), Recorder().attach(dynamodb), dynamodb


def test_no_event_scans_or_reads_more_with_40_arrays_than_with_3(world: tuple[World, Recorder, Any]) -> None:
    the_world, recorder, dynamodb = world
    # Given 3 arrays (SPEC, 4 slots, 30 decisions, 7 backup sets each) / When each event comes
    small: dict[str, list[Call]] = {}
    for name, event in EVENTS.items():
        event(the_world)
        small[name] = recorder.take()
    # And again once the table holds 40 arrays
    many_arrays.seed(dynamodb, the_world.table, range(3, 40))
    recorder.take()
    large = {}
    for name, event in EVENTS.items():
        event(the_world)
        large[name] = recorder.take()
    # Then no event scans, and each reads exactly as much at either size
    assert {name: keyed(calls) for name, calls in {**small, **large}.items() if keyed(calls)} == {}
    for name in EVENTS:
        assert small[name], f"{name}: no DynamoDB call recorded (the recorder is not attached?)"
        assert shape(large[name]) == shape(small[name]), name


def test_another_instances_state_change_starts_nothing_after_one_keyed_read(
    world: tuple[World, Recorder, Any],
) -> None:
    the_world, recorder, _ = world
    # When any instance of the region that holds no slot stops or terminates
    for state in ("stopped", "shutting-down", "terminated"):
        answer = the_world.state_change(many_arrays.foreign(3), state)
        # Then one query of the instances index decides it, and no workflow starts
        assert answer["reason"] == "not a controller"
        assert shape(recorder.take()) == [("Query", "instances", 0)]
    assert the_world.sfn.started == []


def test_a_lost_controller_still_starts_its_drain_which_finds_its_slot(
    world: tuple[World, Recorder, Any],
) -> None:
    the_world, recorder, _ = world
    # When a serving controller of array 2 (slot 1) is lost
    answer = the_world.state_change(many_arrays.controller(2, 1), "shutting-down")
    # Then its drain starts, and Locate reads the slot through the index, then the table
    assert answer["started"] is True
    assert the_world.sfn.started == [f"lost-{many_arrays.controller(2, 1)}-shutting-down"]
    assert shape(recorder.take()) == [
        ("Query", "instances", 1),  # on_controller_event: is it a controller?
        ("Query", "instances", 1),  # Locate: find_slot, the slot's key
        ("GetItem", None, 1),  # the slot itself, consistently
        ("GetItem", None, 1),  # the array
        ("Query", None, many_arrays.CONTROLLERS),  # its slots (the last serving one?)
    ]


def test_the_check_fails_on_a_scan(world: tuple[World, Recorder, Any]) -> None:
    # Given the way find_slot looked a controller up before the instances index: a Scan
    the_world, recorder, dynamodb = world
    assert many_arrays.scan_find_slot(dynamodb, the_world.table, many_arrays.controller(1, 2))
    calls = recorder.take()
    # Then the check names it, with the items it read: every item of every array
    assert keyed(calls) == [f"Scan ({3 * (1 + 4 + 30 + 7)} items)"]
