"""Step Functions ``aws-sdk`` task errors named as AWS names them.

AWS's rule (https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html):
an AWS SDK integration's error is ``<ServiceName>.<ErrorName>``, both PascalCase, the error name
being the one the service's API reference lists, and "always add the Exception suffix ... even if
the suffix is not already part of the error name" (``S3.BucketAlreadyExistsException`` for S3's
``BucketAlreadyExists``; ``AcmPca.ResourceNotFoundException`` for ACM PCA). The service name is
the service id in the AWS SDKs' PascalCase (``ACM PCA`` → ``AcmPca``, ``SSM`` → ``Ssm``, ``Auto
Scaling`` → ``AutoScaling``, ``DynamoDB`` → ``DynamoDb``); the AWS SDK for Java, which Step
Functions calls services with, says ``(Service: Ssm, Status Code: 400, ...)`` in its messages.

Community LocalStack (2026.3, ``StateTaskServiceAwsSdk``) differs in both parts:

* the service part is the botocore service id with its spaces removed, so ``SSM``, ``SNS`` and
  ``EC2`` where AWS says ``Ssm``, ``Sns`` and ``Ec2`` (only ``dynamodb`` and ``sfn`` are bound
  explicitly); a workflow that retries ``Ssm.ThrottlingException`` never matched locally;
* the error part is the Python class botocore raised, not the error code: an error the service
  model lists becomes its shape name (Auto Scaling's ``ResourceContention`` is shape
  ``ResourceContentionFault`` → ``AutoScaling.ResourceContentionFaultException``), and one it
  does not list (a common error: Auto Scaling's ``Throttling``, ``ValidationError``,
  ``InternalFailure``) is a bare ``ClientError`` → ``AutoScaling.AutoScalingException``, where
  AWS's rule gives ``AutoScaling.ResourceContentionException``, ``AutoScaling.ThrottlingException``,
  ``AutoScaling.ValidationErrorException``.

Both name builders are replaced: the service part from the service id as the SDKs spell it, the
error part from the response's error code with the suffix rule. Errors that are not service
errors (a connection failure) keep LocalStack's naming. The Cause keeps LocalStack's format.
The static check of the workflows' names against the same rule is
tests/infra/test_asl_error_names.py. Pinned by tests/localcloud/test_sfn_error_names.py.

Not patched: the optimized DynamoDB task names an error ``DynamoDB.<code>`` (LocalStack's
``StateTaskServiceDynamoDB``), so ``InternalServerError`` would be ``DynamoDB.InternalServerError``
where AWS's Java SDK class is ``InternalServerErrorException``; moto never answers it, nor
``RequestLimitExceeded`` (the only two DynamoDB codes without the suffix), so nothing local can
reach the difference or pin a fix.
"""

import re


def sdk_service_name(service_id: str) -> str:
    """A service id in the AWS SDKs' PascalCase: words split at spaces, hyphens and camel-case
    humps, each capitalised with the rest lower case (``Auto Scaling`` → ``AutoScaling``,
    ``SSM`` → ``Ssm``, ``CloudWatch`` → ``CloudWatch``, ``DynamoDB`` → ``DynamoDb``)."""
    spaced = re.sub(r"[^A-Za-z0-9]+", " ", service_id)
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", spaced)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return "".join(word[:1].upper() + word[1:].lower() for word in spaced.split())


def error_name(service_name: str, code: str) -> str:
    """``<Service>.<Code>Exception`` (the suffix only when the code lacks it)."""
    return f"{service_name}.{code if code.endswith('Exception') else code + 'Exception'}"


def install() -> None:
    from botocore.exceptions import ClientError, UnknownServiceError
    from localstack.aws.spec import get_service_catalog
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_task.service import (
        state_task_service_aws_sdk as aws_sdk,
    )

    task = aws_sdk.StateTaskServiceAwsSdk
    stock_service_name = task._normalise_service_error_name
    stock_exception_name = task._normalise_exception_name

    def normalise_service_error_name(service_name: str) -> str:
        try:
            model = get_service_catalog().get(service_name)
        except UnknownServiceError:
            model = None
        return sdk_service_name(model.service_id) if model is not None else stock_service_name(service_name)

    def normalise_exception_name(norm_service_name: str, ex: Exception) -> str:
        code = ex.response.get("Error", {}).get("Code") if isinstance(ex, ClientError) else None
        return error_name(norm_service_name, code) if code else stock_exception_name(norm_service_name, ex)

    task._normalise_service_error_name = staticmethod(normalise_service_error_name)
    task._normalise_exception_name = staticmethod(normalise_exception_name)
