"""aws-sdk task errors are named as AWS names them (vsa_localcloud/sfn_errors.py).

AWS (https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html): an AWS
SDK integration's error is ``<ServiceName>.<ErrorName>``, both PascalCase, with ``Exception``
appended "even if the suffix is not already part of the error name". Stock LocalStack said
``SSM.…`` for ``Ssm.…`` and ``AutoScaling.AutoScalingException`` for any error Auto Scaling's
model does not list (its throttle ``Throttling``, ``ValidationError``), so a workflow's retrier
for ``AutoScaling.ThrottlingException`` or ``Ssm.ThrottlingException`` never matched locally.
"""

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.localcloud.conftest import run_execution

TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "states.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


@pytest.fixture(scope="module")
def role(aws: Callable[[str], Any]) -> Iterator[str]:
    # The local cloud enforces IAM on the workflow's calls: a role that may call what the tasks call
    iam, name = aws("iam"), f"vsa-sfn-errors-{uuid.uuid4().hex[:8]}"
    arn: str = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(TRUST))["Role"]["Arn"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["ssm:GetCommandInvocation", "autoscaling:CompleteLifecycleAction"],
                "Resource": "*",
            }
        ],
    }
    iam.put_role_policy(RoleName=name, PolicyName="tasks", PolicyDocument=json.dumps(policy))
    yield arn
    iam.delete_role_policy(RoleName=name, PolicyName="tasks")
    iam.delete_role(RoleName=name)


def _error_of(
    aws: Callable[[str], Any], role: str, resource: str, parameters: dict[str, Any]
) -> dict[str, Any]:
    """Run one aws-sdk task that fails; answer what its catcher saw (Error, Cause)."""
    definition = {
        "StartAt": "Call",
        "States": {
            "Call": {
                "Type": "Task",
                "Resource": resource,
                "Parameters": parameters,
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }
    described = run_execution(aws, definition, role)
    assert described["status"] == "SUCCEEDED", described
    caught: dict[str, Any] = json.loads(described["output"])
    return caught


def test_a_modelled_error_is_service_pascal_dot_code_exception(aws: Callable[[str], Any], role: str) -> None:
    # SSM's GetCommandInvocation of an unknown command: InvocationDoesNotExist (modelled, no
    # suffix). AWS: "Ssm.InvocationDoesNotExistException"; stock LocalStack: "SSM.…"
    caught = _error_of(
        aws,
        role,
        "arn:aws:states:::aws-sdk:ssm:getCommandInvocation",
        {"CommandId": str(uuid.uuid4()), "InstanceId": "i-0123456789abcdef0"},
    )
    assert caught["Error"] == "Ssm.InvocationDoesNotExistException", caught


def test_an_error_the_model_does_not_list_keeps_its_code(aws: Callable[[str], Any], role: str) -> None:
    # Auto Scaling answers an unknown group's lifecycle action with ValidationError, a common error
    # its model does not list (as its throttle, Throttling). AWS's rule:
    # "AutoScaling.ValidationErrorException"; stock LocalStack: "AutoScaling.AutoScalingException"
    caught = _error_of(
        aws,
        role,
        "arn:aws:states:::aws-sdk:autoscaling:completeLifecycleAction",
        {
            "AutoScalingGroupName": f"vsa-missing-{uuid.uuid4().hex[:8]}",
            "LifecycleHookName": "launch",
            "LifecycleActionResult": "CONTINUE",
            "InstanceId": "i-0123456789abcdef0",
        },
    )
    assert caught["Error"] == "AutoScaling.ValidationErrorException", caught
