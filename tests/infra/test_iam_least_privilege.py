"""An invariant (docs/security.md): IAM is least-privilege, scoped by the ``vsa:array`` tag where AWS allows.

Every statement of every role in the template: no wildcard actions, and every action that
changes or destroys something is scoped, either by a ``vsa:array`` tag condition or by a
resource that is not ``*`` (a table ARN, ``alarm:vsa-*``, a schedule or state machine name).
"""

from typing import Any

from tests.infra.test_statemachine_definitions import load_template

MUTATING = ("Delete", "Terminate", "Modify", "Update", "Put", "Set", "Create", "Start", "Remove")
# Actions AWS does not scope by resource or tag (documented per service), allowed with "*"
UNSCOPABLE = {
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
            or "ec2:LaunchTemplate" in condition  # RunInstances: only through a launch template
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


# --- no path from an API caller to more power (docs/security.md) ------------------------


def _role_statements(action: str) -> list[tuple[str, dict[str, Any]]]:
    return [(w, s) for w, s in statements() if s["Effect"] == "Allow" and action in _actions(s)]


def test_pass_role_names_only_the_operators_node_roles_or_the_stacks_own_scheduler_role() -> None:
    # iam:PassRole on "*" lets whoever steers the passing call launch under any role in the
    # account (an administrator's instance profile): every grant names its roles
    grants = _role_statements("iam:PassRole")
    assert grants
    for where, statement in grants:
        resource = statement["Resource"]
        assert resource not in ("*", ["*"]), where
        assert "iam:PassedToService" in str(statement.get("Condition", {})), where
        text = str(resource)
        # the operator's node roles (a path), the scheduler's and the drill instances' (the
        # stack's own roles, SSM's agent only)
        assert any(r in text for r in ("NodeRolePath", "BackupSchedulerRole", "DrillInstanceRole")), (
            where,
            text,
        )


def test_ec2_tags_are_allowed_only_at_creation_or_as_the_consistency_label() -> None:
    for where, statement in _role_statements("ec2:CreateTags"):
        condition = statement.get("Condition", {})
        at_creation = "ec2:CreateAction" in str(condition)
        label_only = condition.get("ForAllValues:StringEquals", {}).get("aws:TagKeys") == ["vsa:consistency"]
        assert at_creation or label_only, (where, statement)


def test_every_role_that_tags_ec2_resources_carries_the_explicit_deny_on_existing_resources() -> None:
    resources = load_template()["Resources"]
    deny = resources["ProductTagsAtCreationOnlyPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
    assert deny["Effect"] == "Deny"
    assert deny["Action"] == "ec2:CreateTags"
    assert deny["Condition"]["Null"] == {"ec2:CreateAction": "true"}
    assert deny["Condition"]["ForAnyValue:StringLike"] == {"aws:TagKeys": "vsa:*"}
    taggers = {where.split("/", 1)[0] for where, _ in _role_statements("ec2:CreateTags")}
    assert taggers
    for role in taggers:
        attached = [str(a) for a in resources[role]["Properties"].get("ManagedPolicyArns", [])]
        assert any("ProductTagsAtCreationOnlyPolicy" in a for a in attached), role


def test_every_volume_delete_requires_a_volume_the_product_created() -> None:
    # an operator's data volume may carry vsa:array (it is in the array); only what the control
    # plane created itself (vsa:owned=true), a restore made (vsa:restored-from) or a drill made
    # (vsa:drill, tagged at creation: the tag can never be added later) may be deleted
    grants = _role_statements("ec2:DeleteVolume")
    assert grants
    for where, statement in grants:
        condition = statement.get("Condition", {})
        owned = condition.get("StringEquals", {}).get("aws:ResourceTag/vsa:owned") == "true"
        restored = "aws:ResourceTag/vsa:restored-from" in condition.get("StringLike", {})
        drilled = "aws:ResourceTag/vsa:drill" in condition.get("StringLike", {})
        assert owned or restored or drilled, (where, condition)
        assert condition.get("StringEquals", {}).get("aws:ResourceTag/vsa:deployment"), (where, condition)


def test_run_instances_only_through_a_launch_template_and_group_tags_only_on_the_products_groups() -> None:
    for where, statement in _role_statements("ec2:RunInstances"):
        condition = statement.get("Condition", {})
        assert "ec2:LaunchTemplate" in condition.get("ArnLike", {}), where
        if where.startswith("TaskDrillRole"):
            # a drill instance overrides its template's instance profile (the drill role's only)
            # and placement, so its resources are not all the template's: instead the instance
            # and its volumes must be created with the drill's and the deployment's tags
            resources = str(statement["Resource"])
            if "instance/" in resources or "volume/" in resources:
                assert "aws:RequestTag/vsa:drill" in condition.get("StringLike", {}), where
                assert condition.get("StringEquals", {}).get("aws:RequestTag/vsa:deployment"), where
            continue
        assert condition.get("Bool", {}).get("ec2:IsLaunchTemplateResource") == "true", where
    for where, statement in _role_statements("autoscaling:CreateOrUpdateTags"):
        assert statement["Resource"] not in ("*", ["*"]), where
