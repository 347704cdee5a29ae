"""The EventBridge rules in the template match the events they are for, and no others.

The IOPS rule matches the arrays' IOPS alarms by wildcard (``<deployment>-*-iops-high``,
``-iops-low``), not by the prefix ``vsa-``: the stack's own ``<stack>-backup-failed`` alarm starts
with it too when the stack does (the default stack name is ``vsa-…``), so a prefix match would
start the scaling trigger on a failed backup, which would fail into the dead-letter queue. The
pattern is evaluated here offline by moto's EventBridge pattern matcher (the one its rules
deliver by; moto answers no ``TestEventPattern``); ``tests/localcloud/test_cloudwatch.py``
asks the local cloud's EventBridge the same through ``TestEventPattern``.

EventBridge documents ``wildcard`` matching for event buses ("Comparison operators for use in
event patterns", https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-create-pattern-operators.html):
``*`` matches any run of characters, and the pattern must match the whole value.
"""

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from moto.events.models import EventPattern

from tests.infra.test_statemachine_definitions import load_template
from vsa_core.naming import DEFAULT_DEPLOYMENT, group_name, iops_alarm_name

ROOT = Path(__file__).resolve().parents[2]


def deployed(value: Any, deployment: str) -> Any:
    """A template value as CloudFormation resolves it in a stack of ``DeploymentName=deployment``
    (the patterns' only intrinsic is ``!Sub`` of that parameter)."""
    if isinstance(value, dict):
        if set(value) == {"Sub"}:
            return value["Sub"].replace("${DeploymentName}", deployment)
        return {k: deployed(v, deployment) for k, v in value.items()}
    if isinstance(value, list):
        return [deployed(v, deployment) for v in value]
    return value


def iops_rule_pattern(deployment: str = DEFAULT_DEPLOYMENT) -> dict[str, Any]:
    """The deployed pattern of the rule that starts the scaling trigger."""
    function = load_template()["Resources"]["OnIopsAlarmFunction"]["Properties"]
    pattern: dict[str, Any] = function["Events"]["IopsAlarmStateChange"]["Properties"]["Pattern"]
    return dict(deployed(pattern, deployment))


def alarm_state_change(alarm_name: str, state: str = "ALARM") -> dict[str, Any]:
    """The sample IOPS alarm event (AWS's shape) re-aimed at ``alarm_name``."""
    event: dict[str, Any] = json.loads((ROOT / "events/cloudwatch/iops_alarm_high.json").read_text())
    event = copy.deepcopy(event)
    event["detail"]["alarmName"] = alarm_name
    event["resources"] = [f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:{alarm_name}"]
    event["detail"]["state"]["value"] = state
    return event


@pytest.fixture
def iops_rule() -> Any:
    """Tests the rule's pattern against one event, as EventBridge matches rules."""

    def test(event: dict[str, Any]) -> bool:
        return bool(EventPattern.load(json.dumps(iops_rule_pattern())).matches_event(event))

    return test


def matches(iops_rule: Any, event: dict[str, Any]) -> bool:
    return bool(iops_rule(event))


@pytest.mark.parametrize("array_id", ["demo", "prod-db-01", "iops-high", "backup-failed"])
@pytest.mark.parametrize("kind", ["high", "low"])
def test_the_iops_rule_matches_every_arrays_iops_alarm(iops_rule: Any, array_id: str, kind: str) -> None:
    # Given an ALARM of an array's IOPS alarm, named as the core names it
    event = alarm_state_change(iops_alarm_name(array_id, kind))  # type: ignore[arg-type]
    # When EventBridge tests the rule's pattern / Then it matches
    assert matches(iops_rule, event)


@pytest.mark.parametrize(
    "alarm_name",
    [
        "vsa-backup-failed",  # stack "vsa"
        "vsa-demo-backup-failed",  # stack "vsa-demo"
        "vsa-demo-iops-high-backup-failed",  # a stack named like an alarm
        "vsa-demo-iops-highest",
        "other-demo-iops-high",
    ],
)
def test_the_iops_rule_does_not_match_other_alarms(iops_rule: Any, alarm_name: str) -> None:
    # Given an ALARM of an alarm that is not an array's IOPS alarm (the stack's backup-failed)
    event = alarm_state_change(alarm_name)
    # When EventBridge tests the rule's pattern / Then it does not match
    assert not matches(iops_rule, event)


def test_the_backup_failed_sample_does_not_match(iops_rule: Any) -> None:
    # Given the sample event of stack vsa-demo's backup-failed alarm entering ALARM
    event = json.loads((ROOT / "events/cloudwatch/backup_failed_alarm.json").read_text())
    # When tested against the rule / Then it does not match
    assert not matches(iops_rule, event)


def test_the_iops_rule_does_not_match_leaving_alarm(iops_rule: Any) -> None:
    # Given an IOPS alarm returning to OK / Then the rule does not match
    assert not matches(iops_rule, alarm_state_change("vsa-demo-iops-high", state="OK"))


def lifecycle_rule_matches(event: dict[str, Any], deployment: str = DEFAULT_DEPLOYMENT) -> bool:
    """The deployed pattern of the rule that starts the controller workflows on a lifecycle action."""
    function = load_template()["Resources"]["OnControllerEventFunction"]["Properties"]
    pattern = deployed(function["Events"]["ControllerLifecycleAction"]["Properties"]["Pattern"], deployment)
    return bool(EventPattern.load(json.dumps(pattern)).matches_event(event))


def lifecycle_action(sample: str, group: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((ROOT / "events" / "autoscaling" / sample).read_text())
    event["detail"]["AutoScalingGroupName"] = group
    return event


@pytest.mark.parametrize("sample", ["launch_lifecycle_action.json", "terminate_lifecycle_action.json"])
@pytest.mark.parametrize("array_id", ["demo", "prod-db-01", "controllers"])
def test_the_lifecycle_rule_matches_every_arrays_group(sample: str, array_id: str) -> None:
    # Given a lifecycle action of an array's controller group (vsa_core.naming.group_name)
    # Then the rule matches it: the workflow starts
    assert lifecycle_rule_matches(lifecycle_action(sample, group_name(array_id)))


@pytest.mark.parametrize(
    "group", ["vsa-web", "vsa-demo-controllers-old", "web-controllers", "team-vsa-demo-controllers"]
)
def test_the_lifecycle_rule_drops_other_groups_before_any_execution(group: str) -> None:
    # Given a lifecycle action of a group that is not an array's (another team's, in the region)
    # Then EventBridge drops it: no Lambda, no execution
    assert not lifecycle_rule_matches(lifecycle_action("launch_lifecycle_action.json", group))


@pytest.mark.parametrize(("mine", "other"), [("vsa", "stage"), ("stage", "vsa"), ("prod", "prod2")])
def test_each_deployments_rules_match_only_its_own_arrays(
    mine: str, other: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two deployments in one region, each with an array of the same id
    def names(deployment: str) -> tuple[str, str]:
        monkeypatch.setenv("VSA_DEPLOYMENT_NAME", deployment)
        return iops_alarm_name("db", "high"), group_name("db")

    my_alarm, my_group = names(mine)
    their_alarm, their_group = names(other)
    pattern = iops_rule_pattern(mine)
    launch = "launch_lifecycle_action.json"
    # Then one deployment's rules match its own array's alarm and group, never the other's
    assert EventPattern.load(json.dumps(pattern)).matches_event(alarm_state_change(my_alarm))
    assert not EventPattern.load(json.dumps(pattern)).matches_event(alarm_state_change(their_alarm))
    assert lifecycle_rule_matches(lifecycle_action(launch, my_group), mine)
    assert not lifecycle_rule_matches(lifecycle_action(launch, their_group), mine)
