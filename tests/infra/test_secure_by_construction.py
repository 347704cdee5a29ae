"""The invariants of docs/security.md, on the template: the product acts only on events an account principal
cannot forge, every change is attributable, and what it must not lose survives the stack.

- Its own events ("Backup Requested") travel on the deployment's bus, whose resource policy
  denies events:PutEvents to every principal but the deployment's scheduler role; every other
  rule listens for an ``aws.*`` source, which only AWS can put (EventBridge refuses such a
  Source from anyone else).
- The API logs every request with its SigV4 caller (CloudTrail does not record API Gateway
  invocations), to a log group with a retention.
- The key that encrypts every array's host keys is retained; the every-minute demand publisher's
  failures are dead-lettered and alarmed; the dead-letter queue takes only this account's rules.
"""

import re
from typing import Any

from tests.infra.test_statemachine_definitions import load_template


def _resources() -> dict[str, Any]:
    return load_template()["Resources"]


def _rules() -> list[tuple[str, dict[str, Any]]]:
    """Every EventBridge rule the template makes: (function/event, properties)."""
    found = []
    for name, resource in _resources().items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event_name, event in resource["Properties"].get("Events", {}).items():
            if event["Type"] == "EventBridgeRule":
                found.append((f"{name}/{event_name}", event["Properties"]))
    return found


def test_every_rule_acts_only_on_aws_sources_or_the_deployments_own_bus() -> None:
    rules = _rules()
    assert rules
    for where, rule in rules:
        sources = rule["Pattern"]["source"]
        if all(source.startswith("aws.") for source in sources):
            continue
        # a source any principal could put: only on the deployment's own bus
        assert rule.get("EventBusName") == {"Ref": "ControlPlaneEventBus"}, where


def test_only_the_deployments_scheduler_role_may_put_events_on_its_bus() -> None:
    policy = _resources()["ControlPlaneEventBusPolicy"]["Properties"]
    assert policy["EventBusName"] == {"Ref": "ControlPlaneEventBus"}
    statement = policy["Statement"]
    assert statement["Effect"] == "Deny"
    assert statement["Principal"] == "*"
    assert statement["Action"] == "events:PutEvents"
    assert statement["Condition"] == {
        "ArnNotEquals": {"aws:PrincipalArn": {"GetAtt": "BackupSchedulerRole.Arn"}}
    }
    # and the scheduler role may put on that bus only
    role = _resources()["BackupSchedulerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    assert [s["Resource"] for s in role] == [
        {
            "Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/"
            "${AWS::StackName}-control-plane"
        }
    ]


def test_the_api_logs_every_request_with_its_caller_to_a_kept_log_group() -> None:
    resources = _resources()
    setting = resources["ArraysApi"]["Properties"]["AccessLogSetting"]
    assert setting["DestinationArn"] == {"GetAtt": "ApiAccessLogGroup.Arn"}
    for variable in (
        "$context.identity.userArn",
        "$context.httpMethod",
        "$context.resourcePath",
        "$context.status",
        "$context.requestId",
    ):
        assert variable in setting["Format"], variable
    group = resources["ApiAccessLogGroup"]
    assert group["Properties"]["RetentionInDays"] == {"Ref": "AccessLogRetentionDays"}
    assert group["DeletionPolicy"] == "Retain"


def test_the_keys_key_outlives_the_stack() -> None:
    key = _resources()["KeysKey"]
    assert key["DeletionPolicy"] == "Retain"
    assert key["UpdateReplacePolicy"] == "Retain"


def test_the_demand_publishers_failures_are_dead_lettered_and_alarmed() -> None:
    resources = _resources()
    publisher = resources["TaskPublishDemandFunction"]["Properties"]
    queue = {"GetAtt": "TriggerDeadLetterQueue.Arn"}
    assert publisher["DeadLetterQueue"]["TargetArn"] == queue
    assert publisher["Events"]["EveryMinute"]["Properties"]["DeadLetterConfig"]["Arn"] == queue
    alarm = resources["DemandPublisherFailedAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "Errors")
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "TaskPublishDemandFunction"}}]
    assert alarm["AlarmActions"] == [{"Ref": "AlertsTopic"}]


def test_the_dead_letter_queue_takes_only_this_accounts_rules() -> None:
    statements = _resources()["TriggerDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    for statement in statements:
        condition = statement.get("Condition", {})
        assert condition.get("StringEquals", {}).get("aws:SourceAccount") == {"Ref": "AWS::AccountId"}
        assert "aws:SourceArn" in condition.get("ArnLike", {})


def _statements(value: Any) -> list[dict[str, Any]]:
    """Every IAM statement in ``value`` (policies of roles, managed policies, SAM policies)."""
    if isinstance(value, dict):
        if "Effect" in value and ("Action" in value or "NotAction" in value):
            return [value]
        return [s for v in value.values() for s in _statements(v)]
    if isinstance(value, list):
        return [s for v in value for s in _statements(v)]
    return []


def _text(value: Any) -> str:
    """A Resource as written: a plain ARN or the text of its ``!Sub``."""
    return str(value["Sub"]) if isinstance(value, dict) and "Sub" in value else str(value)


def test_every_grant_on_an_arrays_resources_is_scoped_to_this_deployment() -> None:
    # item 4 of the deployment's isolation: a second stack in the account (staging beside
    # production) must not reach this one's arrays, even of the same id
    statements = _statements(_resources())
    tagged = 0
    for statement in statements:
        condition = statement.get("Condition", {})
        for kind in ("Resource", "Request"):
            if any(f"aws:{kind}Tag/vsa:array" in keys for keys in condition.values()):
                tagged += 1
                # every condition on the array tag also demands this deployment's tag
                assert condition.get("StringEquals", {}).get(f"aws:{kind}Tag/vsa:deployment") == {
                    "Ref": "DeploymentName"
                }, statement
        resources = statement.get("Resource", [])
        for resource in resources if isinstance(resources, list) else [resources]:
            text = _text(resource)
            # the product's names in ARNs start with the deployment's name, never a fixed "vsa"
            assert "vsa-*" not in text, statement
            assert ":secret:vsa/" not in text, statement
            for named in ("autoScalingGroupName/", ":alarm:", "schedule/default/", ":secret:"):
                if named in text and statement["Effect"] == "Allow":
                    assert f"{named}${{DeploymentName}}" in text, statement
    assert tagged >= 20


def test_the_deployment_name_is_claimed_and_given_to_every_function() -> None:
    resources = _resources()
    claim = resources["DeploymentNameClaim"]
    assert claim["Type"] == "AWS::SSM::Parameter"
    assert claim["Properties"]["Name"] == {"Sub": "/vsa/deployments/${DeploymentName}"}
    variables = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["VSA_DEPLOYMENT_NAME"] == {"Ref": "DeploymentName"}
    # a name with a hyphen would make one deployment's prefix another's (vsa- and vsa-stage-)
    pattern = load_template()["Parameters"]["DeploymentName"]["AllowedPattern"]
    assert re.fullmatch(pattern, "stage")
    assert not re.fullmatch(pattern, "vsa-stage")
    assert not re.fullmatch(pattern, "averylongname")  # names stay within AWS's limits
