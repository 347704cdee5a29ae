"""DESIGN.md invariant: IAM is least-privilege, scoped by the ``vsa:array`` tag where AWS allows.

Every statement of every role in the template: no wildcard actions, and every action that
changes or destroys something is scoped, either by a ``vsa:array`` tag condition or by a
resource that is not ``*`` (a table ARN, ``alarm:vsa-*``, a schedule or state machine name).
"""

from typing import Any

from tests.infra.test_statemachine_definitions import load_template

MUTATING = ("Delete", "Terminate", "Modify", "Update", "Put", "Set", "Create", "Start", "Remove")
# Actions AWS does not scope by resource or tag (documented per service), allowed with "*"
UNSCOPABLE = {
    "ec2:RunInstances",  # Auto Scaling validates a launch template with the caller's right to it
    "iam:PassRole",  # scoped by iam:PassedToService instead
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
}


def statements() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, resource in load_template()["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for policy in resource["Properties"].get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                found.append((f"{name}/{policy['PolicyName']}", statement))
    return found


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def test_the_template_has_role_statements() -> None:
    assert len(statements()) > 10


def test_no_wildcard_actions() -> None:
    wild = [(where, a) for where, s in statements() for a in _actions(s) if a == "*" or a.endswith(":*")]
    assert wild == []


def test_every_mutating_action_is_scoped_by_tag_or_resource() -> None:
    unscoped = []
    for where, statement in statements():
        condition = str(statement.get("Condition", {}))
        resource = statement.get("Resource")
        scoped = (
            "vsa:array" in condition
            or "iam:" in condition
            or "ec2:CreateAction" in condition
            or "cloudwatch:namespace" in condition  # PutMetricData: scoped by namespace only
            or (resource not in ("*", ["*"]))
        )
        for action in _actions(statement):
            verb = action.split(":", 1)[1]
            if verb.startswith(MUTATING) and action not in UNSCOPABLE and not scoped:
                unscoped.append((where, action))
    assert unscoped == [], unscoped


def test_the_scope_check_can_fail() -> None:
    # a statement deleting volumes on Resource "*" without a tag condition is caught
    statement = {"Action": ["ec2:DeleteVolume"], "Resource": "*"}
    condition = str(statement.get("Condition", {}))
    assert "vsa:array" not in condition
    assert statement["Resource"] == "*"
