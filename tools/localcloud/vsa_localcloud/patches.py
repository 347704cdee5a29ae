"""Small, targeted fixes to LocalStack itself, applied when the local cloud starts.

Each patch names the gap it closes and the test that pins it. Keep this list short: a patch
here is a LocalStack bug we had to work around, not a feature.
"""

import logging
from typing import Any

from localstack.runtime import hooks
from localstack.utils.patch import patch

LOG = logging.getLogger(__name__)


def _mocked_dynamodb_throw_keeps_its_error_name() -> None:
    """Step Functions mock config (``SFN_MOCK_CONFIG``): a ``Throw`` mocked for a DynamoDB
    task (``arn:aws:states:::dynamodb:*``) reaches the workflow as the generic
    ``DynamoDB.AmazonDynamoDBException`` with an empty cause, because the DynamoDB task's error
    mapper turns every non-``ClientError`` into that name. Step Functions Local (whose mock
    format LocalStack implements) raises the mocked error as written, and so do LocalStack's
    Lambda and aws-sdk tasks. Pinned by
    tests/workflows/test_scale_array_workflow.py::test_decision_already_recorded_still_sets_the_desired_count.
    """
    from localstack.services.stepfunctions.asl.component.common.error_name.failure_event import (
        FailureEventException,
    )
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_task.service.state_task_service_dynamodb import (  # noqa: E501
        StateTaskServiceDynamoDB,
    )

    @patch(StateTaskServiceDynamoDB._from_error)
    def _from_error(fn: Any, self: Any, env: Any, ex: Exception) -> Any:
        if isinstance(ex, FailureEventException):
            return ex.failure_event
        return fn(self, env, ex)


@hooks.on_infra_start()
def apply_localcloud_patches() -> None:
    _mocked_dynamodb_throw_keeps_its_error_name()
    # moto's EC2 model is shared by EC2, Auto Scaling and CloudFormation; patch it before any
    # of them runs (the EC2 provider also applies it, idempotently, when it loads).
    from vsa_localcloud import ebs_model

    ebs_model.apply_patches()
    # REST API methods with AWS_IAM authorization refuse unsigned or badly signed requests, as
    # on AWS (community LocalStack lets them through): a handler added to the invocation chain.
    from vsa_localcloud import apigateway_iam

    apigateway_iam.enforce_iam_authorization()
    # An integration that has not answered within its timeout (29 s by default) gets API
    # Gateway's 504 "Endpoint request timed out", as on AWS (community LocalStack waits on).
    __import__("vsa_localcloud.apigateway_timeout").apigateway_timeout.enforce_integration_timeout()
    # Every role-signed request is authorized against the role's policies, as on AWS (community
    # LocalStack evaluates none): see iam_enforcement.
    from vsa_localcloud import iam_enforcement

    iam_enforcement.install()
    __import__("vsa_localcloud.sfn_errors").sfn_errors.install()  # aws-sdk task errors named as on AWS
    __import__("vsa_localcloud.jsonata").jsonata.install()  # JSONata on the installed JRE, no download
    LOG.info(
        "local-cloud patches applied: mocked DynamoDB task errors keep their names; EBS model; "
        "AWS_IAM authorization of REST API methods; IAM enforcement of role-signed requests"
    )
