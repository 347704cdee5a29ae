"""The look-ahead: the health check stores each array's forecast floor and starts ScaleArray when
the floor is above the group's desired count and no run holds the scaling lock. The rule
(``forecast.lookahead``, pure), the start's exact request (botocore Stubber: the alarm's own
request shape, an execution name per health-check period), and the health check's step
(moto DynamoDB for the stored floor)."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.specs import BASE
from tests.unit.conftest import REGION
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.spec import ArraySpec
from vsa_core.health import aws_check
from vsa_core.naming import scale_execution_name
from vsa_core.scaling import forecast
from vsa_core.scaling.aws_lookahead import ScaleStarter
from vsa_core.scaling.events import ScaleRequest

NOW = datetime(2026, 3, 2, 12, 57, 10, tzinfo=UTC)
PERIOD = timedelta(minutes=5)
ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:vsa-scale-array"
FLOOR = forecast.Floor(6, 1_000_000.0, "hourly", "forecast floor 6: recurring", 10)
OFF = forecast.Floor(0, 0.0, None, "forecast off: 1 h of history, too little for a pattern", 10)
SPEC = ArraySpec(arrayId="demo", availabilityZone="us-east-1a", **BASE, minControllers=2, maxControllers=8)


CEILING = forecast.Floor(0, 0.0, None, "forecast off: nothing recurring ahead", 10, 3, 500_000.0)
"""Off as a floor (nothing above minControllers ahead), with a short cycle whose ceiling is 3."""


@pytest.mark.parametrize(
    ("floor", "desired", "lock_until", "kind", "why"),
    [
        (FLOOR, 2, None, "high", "ScaleArray started ahead of the surge"),
        (FLOOR, 6, None, None, "at or below the desired count 6"),
        (FLOOR, 2, int(NOW.timestamp()) + 60, None, "holds the lock"),
        (FLOOR, 2, int(NOW.timestamp()) - 1, "high", "started"),  # a lease that ended is free
        (OFF, 2, None, None, "forecast off"),
        (forecast.Floor(12, 2e6, "daily", "r", 10), 8, None, None, "the floor 8 is at or below"),
        # a short cycle's ceiling below the desired count: the low alarm's run, for the cycle's fall
        (CEILING, 8, None, "low", "to shed the cycle's fall"),
        (CEILING, 8, int(NOW.timestamp()) + 60, None, "holds the lock"),
        (CEILING, 3, None, None, "forecast off"),  # at the ceiling: nothing to shed
        # a floor above the desired count wins over a ceiling (both can hold in one cycle)
        (forecast.Floor(6, 1e6, "hourly", "r", 10, 7, 1.2e6), 4, None, "high", "ahead of the surge"),
    ],
)
def test_the_lookahead_starts_above_the_desired_count_or_for_a_cycles_fall_outside_a_run(
    floor: forecast.Floor, desired: int, lock_until: int | None, kind: str | None, why: str
) -> None:
    decided, reason = forecast.lookahead(floor, desired, 8, lock_until, NOW)
    assert decided == kind
    assert why in reason


def test_no_run_for_a_ceiling_under_min_controllers_at_min_controllers() -> None:
    # an array at its minControllers (4) sheds nothing whatever the ceiling (3) says: no run every
    # health-check period through the cycle's quiet phase
    assert forecast.lookahead(CEILING, 4, 8, None, NOW, min_controllers=4)[0] is None
    assert forecast.lookahead(CEILING, 5, 8, None, NOW, min_controllers=4)[0] == "low"


def _sfn_expecting(name: str) -> tuple[Any, Stubber]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    stubber = Stubber(sfn)
    stubber.add_response(
        "start_execution",
        {"executionArn": f"{ARN}:{name}".replace("stateMachine", "execution"), "startDate": NOW},
        {"stateMachineArn": ARN, "name": name, "input": ANY},
    )
    return sfn, stubber


def test_the_start_is_the_alarms_request_named_per_health_check_period() -> None:
    name = scale_execution_name("demo", "lookahead:vsa-demo-iops-high", "2026-03-02T12:55:00+00:00")
    sfn, stubber = _sfn_expecting(name)
    # a second run in the same period (two minutes on) names the same execution, which Step
    # Functions refuses: nothing new starts and the name is still answered
    stubber.add_client_error(
        "start_execution",
        "ExecutionAlreadyExists",
        "exists",
        expected_params={"stateMachineArn": ARN, "name": name, "input": ANY},
    )
    with stubber:
        assert ScaleStarter(sfn, ARN, 60).start("demo", NOW, PERIOD) == name
        assert ScaleStarter(sfn, ARN, 60).start("demo", NOW + timedelta(minutes=2), PERIOD) == name
    stubber.assert_no_pending_responses()


def test_the_started_run_carries_a_valid_scale_request() -> None:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    seen: list[dict[str, Any]] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        seen.append(params)

    sfn.meta.events.register("provide-client-params.stepfunctions.StartExecution", capture)
    stubber = Stubber(sfn)
    stubber.add_response("start_execution", {"executionArn": f"{ARN}:x", "startDate": NOW})
    with stubber:
        ScaleStarter(sfn, ARN, 45).start("demo", NOW, PERIOD)
    request = ScaleRequest.model_validate(json.loads(seen[0]["input"]))
    assert (request.array_id, request.alarm_name, request.alarm_kind) == (
        "demo",
        "vsa-demo-iops-high",
        "high",
    )
    assert request.demand_iops is None  # ScaleArray reads the demand itself
    assert request.event_id.startswith("lookahead:")
    # standing in for the high alarm, it is not the alarm's own run: no datapoints confirmed it
    assert not request.by_high_alarm
    assert request.rearm_seconds == 45
    assert request.lock_until > request.lock_now == int(NOW.timestamp())


def test_a_release_is_started_as_the_low_alarms_run() -> None:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    seen: list[dict[str, Any]] = []
    sfn.meta.events.register(
        "provide-client-params.stepfunctions.StartExecution", lambda params, **_: seen.append(params)
    )
    stubber = Stubber(sfn)
    stubber.add_response("start_execution", {"executionArn": f"{ARN}:x", "startDate": NOW})
    with stubber:
        name = ScaleStarter(sfn, ARN, 45).start("demo", NOW, PERIOD, "low")
    request = ScaleRequest.model_validate(json.loads(seen[0]["input"]))
    assert (request.alarm_name, request.alarm_kind) == ("vsa-demo-iops-low", "low")
    # its own execution name: a surge's run in the same period is not taken for it
    assert name == scale_execution_name("demo", "lookahead:vsa-demo-iops-low", "2026-03-02T12:55:00+00:00")


def _ctx(table: str, sfn: Any) -> aws_check.HealthContext:
    return aws_check.HealthContext(
        registry=None,  # type: ignore[arg-type]
        backups=None,  # type: ignore[arg-type]
        clients=None,  # type: ignore[arg-type]
        documents=None,  # type: ignore[arg-type]
        deployment="vsa-test",
        period=PERIOD,
        scale=ScaleStarter(sfn, ARN, 60),
        dynamodb=boto3.client("dynamodb", region_name=REGION),
        table=table,
    )


def test_the_health_check_stores_the_floor_and_starts_scale_array_above_the_desired_count(
    registry_table: str,
) -> None:
    # Given array demo at 2 controllers and a floor of 6 for the coming minutes
    registry = ArrayRegistry(registry_table, boto3.client("dynamodb", region_name=REGION))
    array = registry.create(SPEC)
    name = scale_execution_name("demo", "lookahead:vsa-demo-iops-high", "2026-03-02T12:55:00+00:00")
    sfn, stubber = _sfn_expecting(name)
    health = aws_check.ArrayHealth("demo", None)  # type: ignore[arg-type]
    with stubber:
        # When the health check's step runs for it
        aws_check._lookahead(_ctx(registry_table, sfn), array, health, FLOOR, 2, NOW)
    stubber.assert_no_pending_responses()
    # Then the floor is stored for PlanScale and ScaleArray was started
    assert registry.get("demo").forecast_floor == forecast.stored(FLOOR, NOW)
    assert (health.forecast_floor, health.lookahead) == (6, name)


def test_the_health_check_starts_the_low_alarms_run_for_a_cycles_fall_and_stores_the_ceiling(
    registry_table: str,
) -> None:
    # Given array demo at 8 controllers and a short cycle whose ceiling needs 3 in the coming minutes
    registry = ArrayRegistry(registry_table, boto3.client("dynamodb", region_name=REGION))
    array = registry.create(SPEC)
    runs = [NOW + timedelta(minutes=k) for k in range(5)]
    names = [
        scale_execution_name(
            "demo",
            "lookahead:vsa-demo-iops-low",
            f"2026-03-02T12:55:00+00:00@{run.replace(second=0).isoformat()}",
        )
        for run in runs
    ]
    sfn = boto3.client("stepfunctions", region_name=REGION)
    inputs: list[dict[str, Any]] = []
    sfn.meta.events.register(
        "provide-client-params.stepfunctions.StartExecution", lambda params, **_: inputs.append(params)
    )
    stubber = Stubber(sfn)
    for name in names:
        stubber.add_response(
            "start_execution",
            {"executionArn": f"{ARN}:{name}".replace("stateMachine", "execution"), "startDate": NOW},
            {"stateMachineArn": ARN, "name": name, "input": ANY},
        )
    health = aws_check.ArrayHealth("demo", None)  # type: ignore[arg-type]
    with stubber:
        aws_check._lookahead(_ctx(registry_table, sfn), array, health, CEILING, 8, NOW)
    stubber.assert_no_pending_responses()
    # Then the low alarm's runs were started, one a minute until the next health check: the first
    # at once, each later one waiting until its minute (notBefore) with its lock's lease from then
    requests = [ScaleRequest.model_validate(json.loads(given["input"])) for given in inputs]
    assert requests[0].not_before is None
    assert [r.not_before for r in requests[1:]] == [run.strftime("%Y-%m-%dT%H:%M:%SZ") for run in runs[1:]]
    assert [r.lock_now for r in requests] == [int(run.timestamp()) for run in runs]
    name = names[0]
    # Then the low alarm's run was started, and PlanScale reads the ceiling back as it was stored
    assert health.lookahead == name
    stored = registry.get("demo").forecast_floor
    back = forecast.from_stored(stored, NOW + timedelta(minutes=1), timedelta(minutes=10))
    assert (back.ceiling_controllers, back.ceiling_iops) == (3, 500_000.0)


def test_no_start_while_a_run_holds_the_lock_or_the_floor_is_off(registry_table: str) -> None:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    registry = ArrayRegistry(registry_table, dynamodb)
    registry.create(SPEC)
    dynamodb.update_item(
        TableName=registry_table,
        Key={"pk": {"S": "ARRAY#demo"}, "sk": {"S": "SPEC"}},
        UpdateExpression="SET scalingLock = :me, scalingLockUntil = :until",
        ExpressionAttributeValues={
            ":me": {"S": "scale-demo-x"},
            ":until": {"N": str(int(NOW.timestamp()) + 600)},
        },
    )
    locked = registry.get("demo")
    assert locked.scaling_lock_until == int(NOW.timestamp()) + 600
    sfn = boto3.client("stepfunctions", region_name=REGION)
    with Stubber(sfn) as stubber:  # any call would fail: nothing is expected
        health = aws_check.ArrayHealth("demo", None)  # type: ignore[arg-type]
        aws_check._lookahead(_ctx(registry_table, sfn), locked, health, FLOOR, 2, NOW)
        off = aws_check.ArrayHealth("demo", None)  # type: ignore[arg-type]
        aws_check._lookahead(_ctx(registry_table, sfn), registry.get("demo"), off, OFF, 2, NOW + PERIOD)
    stubber.assert_no_pending_responses()
    assert (health.lookahead, off.lookahead) == (None, None)
    # the newer (off) floor is what PlanScale reads now, with its reason
    assert registry.get("demo").forecast_floor == forecast.stored(OFF, NOW + PERIOD)
