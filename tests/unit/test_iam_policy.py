"""The local cloud's IAM policy evaluation (tools/localcloud/vsa_localcloud/iam_policy.py), pure.

Each case comes from AWS's documented evaluation rules and examples:
- Policy evaluation logic: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html
- Condition operators: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html
- Multivalued keys / set operators: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html
- Policy variables: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html
- EC2 tag conditions: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ExamplePolicies_EC2.html
"""

from typing import Any

import pytest

from vsa_localcloud.iam_policy import PolicyError, condition_matches, evaluate, parse_policy

VOLUME = "arn:aws:ec2:us-east-1:123456789012:volume/vol-1"
INSTANCE = "arn:aws:ec2:us-east-1:123456789012:instance/i-1"


def policy(*statements: dict[str, Any]) -> list[Any]:
    return parse_policy({"Version": "2012-10-17", "Statement": list(statements)}, "role/p")


TAGGED_ATTACH = {
    "Effect": "Allow",
    "Action": ["ec2:AttachVolume", "ec2:DetachVolume"],
    "Resource": "*",
    "Condition": {"StringLike": {"aws:ResourceTag/vsa:array": "*"}},
}


def test_multi_resource_action_needs_every_resource_allowed() -> None:
    # Given the old AttachVolume statement (tag required on every resource)
    statements = policy(TAGGED_ATTACH)
    tagged = {"aws:resourcetag/vsa:array": ["a1"]}
    # When the instance is tagged but the operator's volume is not
    decision = evaluate(statements, "ec2:AttachVolume", [(INSTANCE, tagged), (VOLUME, {})])
    # Then the request is denied, and the volume is named
    assert not decision.allowed
    assert decision.per_resource[-1][0] == VOLUME
    # and allowed when both carry the tag
    assert evaluate(statements, "ec2:AttachVolume", [(INSTANCE, tagged), (VOLUME, tagged)]).allowed


def test_explicit_deny_wins_over_allow() -> None:
    statements = policy(
        {"Effect": "Allow", "Action": "ec2:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "ec2:DeleteVolume", "Resource": "*", "Sid": "NoDelete"},
    )
    decision = evaluate(statements, "ec2:DeleteVolume", [(VOLUME, {})])
    assert not decision.allowed
    assert decision.reason == "explicit deny"
    assert decision.statement is not None
    assert decision.statement.sid == "NoDelete"
    assert evaluate(statements, "ec2:AttachVolume", [(VOLUME, {})]).allowed


def test_implicit_deny_without_a_matching_statement() -> None:
    decision = evaluate(
        policy({"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}),
        "ec2:AttachVolume",
        [("*", {})],
    )
    assert not decision.allowed
    assert decision.reason == "no identity-based policy allows"


def test_actions_are_case_insensitive_resources_are_not() -> None:
    statements = policy(
        {"Effect": "Allow", "Action": "EC2:attachvolume", "Resource": "arn:aws:ec2:*:*:volume/vol-*"}
    )
    assert evaluate(statements, "ec2:AttachVolume", [(VOLUME, {})]).allowed
    assert not evaluate(statements, "ec2:AttachVolume", [(VOLUME.replace("vol-1", "VOL-1"), {})]).allowed


def test_not_action_and_not_resource() -> None:
    statements = policy(
        {"Effect": "Allow", "NotAction": "iam:*", "NotResource": "arn:aws:ec2:*:*:volume/vol-secret"}
    )
    assert evaluate(statements, "ec2:AttachVolume", [(VOLUME, {})]).allowed
    assert not evaluate(statements, "iam:PassRole", [("*", {})]).allowed
    assert not evaluate(
        statements, "ec2:AttachVolume", [("arn:aws:ec2:us-east-1:1:volume/vol-secret", {})]
    ).allowed


def test_request_tag_on_create_snapshots_applies_only_to_the_snapshot() -> None:
    # CreateSnapshots is authorized against the instance, each volume and the snapshots; only the
    # snapshot resource type has aws:RequestTag (Service Authorization Reference), so a statement
    # requiring it on Resource "*" fails for the instance and the volumes.
    statements = policy(
        {
            "Effect": "Allow",
            "Action": "ec2:CreateSnapshots",
            "Resource": "*",
            "Condition": {"StringLike": {"aws:RequestTag/vsa:array": "*"}},
        }
    )
    snapshot = ("arn:aws:ec2:us-east-1::snapshot/*", {"aws:requesttag/vsa:array": ["a1"]})
    assert not evaluate(statements, "ec2:CreateSnapshots", [(INSTANCE, {}), (VOLUME, {}), snapshot]).allowed
    assert evaluate(statements, "ec2:CreateSnapshots", [snapshot]).allowed


@pytest.mark.parametrize(
    ("operator", "key_values", "wanted", "expected"),
    [
        ("StringEquals", ["a"], ["a", "b"], True),
        ("StringEquals", ["c"], ["a", "b"], False),
        ("StringEquals", None, ["a"], False),  # absent key: positive operator is false
        ("StringNotEquals", ["c"], ["a", "b"], True),
        ("StringNotEquals", ["a"], ["a", "b"], False),  # NOR over the values
        ("StringNotEquals", None, ["a"], True),  # absent key: negated operator is true
        ("StringEqualsIfExists", None, ["a"], True),
        ("StringEqualsIfExists", ["b"], ["a"], False),
        ("StringEqualsIgnoreCase", ["ABC"], ["abc"], True),
        ("StringLike", ["vsa-a1-iops-high"], ["vsa-*-iops-*"], True),
        ("StringLike", ["vsa-a1"], ["vsa-?2"], False),
        ("StringNotLike", ["prod-x"], ["dev-*"], True),
        ("NumericLessThanEquals", ["100"], ["100"], True),
        ("NumericGreaterThan", ["5"], ["10"], False),
        ("NumericEquals", ["not-a-number"], ["1"], False),
        ("DateGreaterThan", ["2026-01-02T00:00:00Z"], ["2026-01-01T00:00:00Z"], True),
        ("Bool", ["true"], [True], True),
        ("Bool", ["false"], ["true"], False),
        ("IpAddress", ["10.0.1.5"], ["10.0.0.0/16"], True),
        ("NotIpAddress", ["10.0.1.5"], ["10.0.0.0/16"], False),
        ("ArnLike", ["arn:aws:iam::1:role/vsa-x"], ["arn:aws:iam::*:role/vsa-*"], True),
        ("ArnNotEquals", ["arn:aws:iam::1:role/a"], ["arn:aws:iam::1:role/a"], False),
        ("Null", None, ["true"], True),
        ("Null", ["x"], ["true"], False),
        ("Null", ["x"], ["false"], True),
        ("ForAnyValue:StringEquals", ["a", "z"], ["z"], True),
        ("ForAnyValue:StringEquals", None, ["z"], False),
        ("ForAllValues:StringEquals", ["a", "z"], ["a", "b"], False),
        ("ForAllValues:StringEquals", ["a", "b"], ["a", "b", "c"], True),
        ("ForAllValues:StringEquals", None, ["a"], True),  # empty set: vacuously true
    ],
)
def test_condition_operators(
    operator: str, key_values: list[str] | None, wanted: list[Any], expected: bool
) -> None:
    context = {} if key_values is None else {"k:key": key_values}
    assert condition_matches(operator, "k:Key", wanted, context) is expected


def test_tag_keys_restricted_with_for_all_values() -> None:
    # AWS's example: allow creating a volume only with the tag keys "environment" and "cost-center".
    statements = policy(
        {
            "Effect": "Allow",
            "Action": "ec2:CreateVolume",
            "Resource": "*",
            "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": ["environment", "cost-center"]}},
        }
    )
    assert evaluate(statements, "ec2:CreateVolume", [("*", {"aws:tagkeys": ["environment"]})]).allowed
    assert not evaluate(
        statements, "ec2:CreateVolume", [("*", {"aws:tagkeys": ["environment", "owner"]})]
    ).allowed


def test_policy_variables_in_resource_and_condition() -> None:
    statements = policy(
        {
            "Effect": "Allow",
            "Action": "ec2:AttachVolume",
            "Resource": "arn:aws:ec2:*:*:volume/*",
            "Condition": {"StringEquals": {"aws:ResourceTag/team": "${aws:PrincipalTag/team}"}},
        },
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::home/${aws:username}/*"},
        {
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": "arn:aws:s3:::drop/${aws:username, 'anonymous'}/*",
        },
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::lit/${*}"},
    )
    same = {"aws:resourcetag/team": ["storage"], "aws:principaltag/team": ["storage"]}
    other = {"aws:resourcetag/team": ["web"], "aws:principaltag/team": ["storage"]}
    assert evaluate(statements, "ec2:AttachVolume", [(VOLUME, same)]).allowed
    assert not evaluate(statements, "ec2:AttachVolume", [(VOLUME, other)]).allowed
    # a variable with no value makes the element not match; a default fills it
    assert not evaluate(statements, "s3:GetObject", [("arn:aws:s3:::home/bob/x", {})]).allowed
    assert evaluate(
        statements, "s3:GetObject", [("arn:aws:s3:::home/bob/x", {"aws:username": ["bob"]})]
    ).allowed
    assert evaluate(statements, "s3:PutObject", [("arn:aws:s3:::drop/anonymous/x", {})]).allowed
    # ${*} is a literal asterisk, not a wildcard
    assert evaluate(statements, "s3:ListBucket", [("arn:aws:s3:::lit/*", {})]).allowed
    assert not evaluate(statements, "s3:ListBucket", [("arn:aws:s3:::lit/anything", {})]).allowed


def test_tag_on_create_needs_create_action() -> None:
    statements = policy(
        {
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": "*",
            "Condition": {"StringEquals": {"ec2:CreateAction": ["CreateVolume"]}},
        }
    )
    assert evaluate(statements, "ec2:CreateTags", [("*", {"ec2:createaction": ["CreateVolume"]})]).allowed
    assert not evaluate(
        statements, "ec2:CreateTags", [("*", {"ec2:createaction": ["CreateSnapshots"]})]
    ).allowed
    assert not evaluate(statements, "ec2:CreateTags", [(VOLUME, {})]).allowed  # a plain CreateTags


def test_unknown_operator_is_refused_like_iam_does() -> None:
    with pytest.raises(PolicyError):
        policy(
            {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {"StringFuzzy": {"a:b": "c"}}}
        )
