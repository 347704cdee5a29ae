"""BootstrapController's handover (``vsa_core.reconcile.aws_start.start_handover``): a controller
of an array with fencing that has just begun serving owns no volume until a ReconcileArray run's
export phase gives it its share. Started unless the recorded run will hand over anyway; the
rule (``plan.export_ahead``) without AWS, the start over moto's Step Functions and DynamoDB."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.conftest import load_event
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.spec import ArraySpec
from vsa_core.reconcile import aws_record, plan
from vsa_core.reconcile.aws_start import ReconcileStarter, start_handover

WAITING = aws_record.WAITING_FOR_LOCK
BEFORE_LOCK = (aws_record.WAITING_FOR_LOCK, aws_record.CREATING_VOLUMES)
NEWCOMER = "i-0a1b2c3d4e5f60999"


@pytest.mark.parametrize(
    ("record", "ahead"),
    [
        (None, False),
        ({}, False),
        ({"state": "converged", "step": "done"}, False),
        ({"state": "failed", "step": "settle"}, False),
        ({"state": "converging", "step": WAITING}, True),
        ({"state": "converging", "step": "creating volumes data2"}, True),
        ({"state": "converging", "step": "settle"}, True),
        ({"state": "converging", "step": "attach"}, True),
        ({"state": "converging", "step": "disconnect"}, True),
        ({"state": "converging", "step": "export"}, False),
        ({"state": "converging", "step": "connect"}, False),
        ({"state": "converging", "step": "roll: replacing an outdated controller"}, False),
    ],
)
def test_a_recorded_run_hands_over_only_while_its_export_phase_is_ahead(
    record: dict[str, str] | None, ahead: bool
) -> None:
    assert plan.export_ahead(record, BEFORE_LOCK) is ahead


def _spec(**changes: Any) -> ArraySpec:
    body = json.loads(load_event("apigateway/put_array.json")["body"])
    body["backup"]["mode"] = "crash"
    body.update(changes)
    return ArraySpec.model_validate(body)


@pytest.fixture
def world(reconcile_starter: ReconcileStarter) -> tuple[ReconcileStarter, ArrayRegistry, Any]:
    starter = reconcile_starter
    return starter, ArrayRegistry(starter.table, starter.dynamodb), starter.sfn


def _runs(sfn: Any, starter: ReconcileStarter) -> list[str]:
    return [e["name"] for e in sfn.list_executions(stateMachineArn=starter.state_machine_arn)["executions"]]


def test_a_newcomer_of_a_fenced_array_starts_a_recorded_reconcile(world: Any) -> None:
    starter, registry, sfn = world
    registry.create(_spec(fencing="reservations"))
    answer = start_handover(starter, registry, "demo", NEWCOMER)
    assert answer["started"] is True, answer
    (name,) = _runs(sfn, starter)
    assert answer["executionArn"].endswith(f":{name}")
    # recorded as an apply's run is: GET /arrays/{id} shows it, its steps record their progress
    record = registry.get("demo").reconcile
    assert record is not None
    assert (record["execution"], record["state"], record["step"]) == (name, "converging", WAITING)


@pytest.mark.parametrize("step", [WAITING, "creating volumes data2", "settle", "attach", "disconnect"])
def test_a_recorded_run_with_its_export_phase_ahead_is_left_to_hand_over(world: Any, step: str) -> None:
    starter, registry, sfn = world
    registry.create(_spec(fencing="reservations"))
    now = datetime.now(UTC).isoformat()
    aws_record.start(starter.dynamodb, starter.table, "demo", "apply-run", 1, now)
    aws_record.progress(starter.dynamodb, starter.table, "demo", "apply-run", step, now)
    answer = start_handover(starter, registry, "demo", NEWCOMER)
    assert answer["started"] is False
    assert "apply-run" in answer["reason"]
    assert _runs(sfn, starter) == []


def test_a_recorded_run_past_its_export_phase_does_not_stop_a_new_one(world: Any) -> None:
    starter, registry, sfn = world
    registry.create(_spec(fencing="reservations"))
    now = datetime.now(UTC).isoformat()
    aws_record.start(starter.dynamodb, starter.table, "demo", "apply-run", 1, now)
    aws_record.progress(starter.dynamodb, starter.table, "demo", "apply-run", "connect", now)
    answer = start_handover(starter, registry, "demo", NEWCOMER)
    assert answer["started"] is True, answer
    assert len(_runs(sfn, starter)) == 1
    assert registry.get("demo").reconcile["execution"] != "apply-run"  # type: ignore[index]


def test_an_array_without_fencing_starts_nothing(world: Any) -> None:
    starter, registry, sfn = world
    registry.create(_spec(fencing="none"))
    answer = start_handover(starter, registry, "demo", NEWCOMER)
    assert answer["started"] is False
    assert answer["reason"] == "the array has no fencing: every controller serves every volume"
    assert _runs(sfn, starter) == []
