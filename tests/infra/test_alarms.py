"""The deployment's own alarms (template.yaml): every one pages the AlertsTopic, each means
something is wrong, and together they cover every workflow's failures, the dead-letter queue and
a retention failure apart from a failed backup.

What a CloudWatch alarm watches is only a name and dimensions: a typo watches a metric nothing
publishes and the alarm never fires (``TreatMissingData: notBreaching``). So the state machines,
queues and the retention metric are read from the template and the code, not listed here.
"""

import json
from pathlib import Path
from typing import Any

import pytest
from moto.events.models import EventPattern

from tests.infra.test_event_rules import alarm_state_change, iops_rule_pattern
from tests.infra.test_statemachine_definitions import load_template
from vsa_core.backups.aws_retention import RETENTION_FAILURES_METRIC, RETENTION_NAMESPACE
from vsa_core.scaling.rules import STALE_METRIC, STALE_NAMESPACE

RESOURCES: dict[str, Any] = load_template()["Resources"]
ALARMS = {n: r["Properties"] for n, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
STATE_MACHINES = sorted(n for n, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::StateMachine")
QUEUES = sorted(n for n, r in RESOURCES.items() if r["Type"] == "AWS::SQS::Queue")


def watched(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """Every metric the alarm reads: its own, or each MetricStat of its metric math."""
    if "MetricName" in alarm:
        return [{k: alarm.get(k) for k in ("Namespace", "MetricName", "Dimensions")}]
    return [q["MetricStat"]["Metric"] for q in alarm.get("Metrics", []) if "MetricStat" in q]


def alarms_on(namespace: str, metric: str, dimension_value: Any) -> list[str]:
    return [
        name
        for name, alarm in ALARMS.items()
        for m in watched(alarm)
        if m["Namespace"] == namespace
        and m["MetricName"] == metric
        and any(d["Value"] == dimension_value for d in m.get("Dimensions", []))
    ]


@pytest.mark.parametrize("name", sorted(ALARMS))
def test_every_alarm_pages_the_alerts_topic_and_stays_quiet_without_data(name: str) -> None:
    alarm = ALARMS[name]
    assert alarm["AlarmActions"] == [{"Ref": "AlertsTopic"}]
    assert alarm["TreatMissingData"] == "notBreaching"  # no executions, no messages: nothing wrong
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == 0
    assert alarm["AlarmName"]["Sub"].startswith("${AWS::StackName}-")


@pytest.mark.parametrize("name", sorted(ALARMS))
def test_no_alarm_of_ours_starts_the_scaling_trigger(name: str) -> None:
    # the IOPS rule matches vsa-*-iops-high|low; a stack named vsa-demo makes vsa-demo-<suffix>
    suffix = ALARMS[name]["AlarmName"]["Sub"].removeprefix("${AWS::StackName}")
    pattern = EventPattern.load(json.dumps(iops_rule_pattern()))
    assert not pattern.matches_event(alarm_state_change(f"vsa-demo{suffix}"))


@pytest.mark.parametrize("machine", STATE_MACHINES)
@pytest.mark.parametrize("metric", ["ExecutionsFailed", "ExecutionsTimedOut"])
def test_every_workflow_that_fails_or_times_out_raises_an_alarm(machine: str, metric: str) -> None:
    assert alarms_on("AWS/States", metric, {"Ref": machine}), f"no alarm on {metric} of {machine}"


def test_each_failure_alarm_adds_failed_and_timed_out_missing_as_zero() -> None:
    for name, alarm in ALARMS.items():
        if "Metrics" not in alarm:
            continue
        [returned] = [q for q in alarm["Metrics"] if q.get("ReturnData", True)]
        ids = [q["Id"] for q in alarm["Metrics"] if "MetricStat" in q]
        assert returned["Expression"] == " + ".join(f"FILL({i}, 0)" for i in ids), name


@pytest.mark.parametrize("queue", QUEUES)
def test_a_dead_letter_queue_that_is_not_empty_raises_an_alarm(queue: str) -> None:
    [name] = alarms_on("AWS/SQS", "ApproximateNumberOfMessagesVisible", {"GetAtt": f"{queue}.QueueName"})
    assert ALARMS[name]["Statistic"] == "Maximum"


def test_a_retention_failure_has_its_own_alarm_on_what_the_backup_steps_publish() -> None:
    # the metric the code puts, under the deployment's dimension as the function is told it
    [name] = alarms_on(RETENTION_NAMESPACE, RETENTION_FAILURES_METRIC, {"Ref": "AWS::StackName"})
    assert name != "BackupFailedAlarm"
    assert ALARMS[name]["Dimensions"] == [{"Name": "Deployment", "Value": {"Ref": "AWS::StackName"}}]
    environment = RESOURCES["TaskBackupFunction"]["Properties"]["Environment"]["Variables"]
    assert environment["VSA_DEPLOYMENT"] == {"Ref": "AWS::StackName"}
    # and the backup steps' role may put it (and only into that namespace)
    statements = [
        s
        for policy in RESOURCES["TaskBackupRole"]["Properties"]["Policies"]
        for s in policy["PolicyDocument"]["Statement"]
        if "cloudwatch:PutMetricData" in s["Action"]
    ]
    assert [s["Condition"] for s in statements] == [
        {"StringEquals": {"cloudwatch:namespace": RETENTION_NAMESPACE}}
    ]


def test_persistent_stale_data_has_its_own_alarm_on_what_plan_scale_publishes() -> None:
    # the metric PlanScale puts on a stale hold, under the deployment's dimension
    [name] = alarms_on(STALE_NAMESPACE, STALE_METRIC, {"Ref": "AWS::StackName"})
    alarm = ALARMS[name]
    # stale in each of 3 consecutive 5-minute periods: longer than any EBS landing delay
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (
        "Sum",
        300,
        3,
        3,
    )
    environment = RESOURCES["TaskPlanScaleFunction"]["Properties"]["Environment"]["Variables"]
    assert environment["VSA_DEPLOYMENT"] == {"Ref": "AWS::StackName"}
    statements = [
        s
        for policy in RESOURCES["TaskPlanScaleRole"]["Properties"]["Policies"]
        for s in policy["PolicyDocument"]["Statement"]
        if "cloudwatch:PutMetricData" in s["Action"]
    ]
    assert [s["Condition"] for s in statements] == [
        {"StringEquals": {"cloudwatch:namespace": STALE_NAMESPACE}}
    ]
    # and the runbook has its row: what it means and what to do
    readme = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    assert "| `scaling-stale-data` |" in readme
    assert alarm["AlarmName"] == {"Sub": "${AWS::StackName}-scaling-stale-data"}


def test_the_health_checks_alarms_and_dashboard_watch_what_it_publishes() -> None:
    import json
    import re

    from vsa_core.health import aws_check

    # the deployment-wide alarms on the health check's own metrics, under the stack's dimension
    health = {n: a for n, a in ALARMS.items() if a.get("Namespace") == aws_check.DEPLOYMENT_NAMESPACE}
    assert {a["MetricName"] for a in health.values()} == {
        "HostsShortOfPaths",
        "BackupsOverdue",
        "ControllersReplaced",
        "UnfinishedApplies",
    }
    for alarm in health.values():
        assert alarm["MetricName"] in aws_check.DEPLOYMENT_METRICS
        assert alarm["Dimensions"] == [{"Name": "Deployment", "Value": {"Ref": "AWS::StackName"}}]
    function = RESOURCES["TaskHealthCheckFunction"]["Properties"]
    assert function["Environment"]["Variables"]["VSA_DEPLOYMENT"] == {"Ref": "AWS::StackName"}
    # its failures: Lambda's own Errors metric of the function
    failed = ALARMS["HealthCheckFailedAlarm"]
    assert (failed["Namespace"], failed["MetricName"]) == ("AWS/Lambda", "Errors")
    assert failed["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "TaskHealthCheckFunction"}}]
    # the dashboard: valid JSON, every SEARCH over a per-array metric someone publishes
    body = RESOURCES["OperationsDashboard"]["Properties"]["DashboardBody"]
    text = next(iter(body.values())) if isinstance(body, dict) else body  # !Sub
    if isinstance(text, list):  # !Sub [text, {ArraysNamespace: the deployment's}]
        text, variables = text
        assert set(variables) == {"ArraysNamespace"}
        assert "${ArraysNamespace}" in text
    widgets = json.loads(re.sub(r"\$\{[^}]+\}", "x", text))["widgets"]
    searched = set(re.findall(r'MetricName=\\"(\w+)\\"', text))
    assert searched <= {*aws_check.ARRAY_METRICS, "DemandIops"}, searched
    assert {"ServingControllers", "MinLivePaths", "BackupAgeSeconds", "DemandIops"} <= searched
    alarm_widget = next(w for w in widgets if w["type"] == "alarm")
    assert len(alarm_widget["properties"]["alarms"]) == len(ALARMS)
