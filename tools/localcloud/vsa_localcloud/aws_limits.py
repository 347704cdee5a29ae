"""Request limits AWS keeps and community LocalStack (moto behind it) does not.

A handler in LocalStack's request chain (``serve_custom_service_request_handlers``) refuses, as
AWS does, a request over one of these limits, so a product call that would fail on AWS fails
here too:

* **EC2 filter values**: more than 200 filter values in one Describe call is refused with
  ``FilterLimitExceeded``, "The maximum number of filter values specified on a single call is
  200" (EC2's error, HTTP 400, as AWS answers it).
* **SSM DescribeInstanceInformation**: a filter of more than 100 values is refused with
  ``ValidationException`` (SSM API reference, InstanceInformationStringFilter: Values, "Array
  Members: Minimum number of 1 item. Maximum number of 100 items"; botocore's model says max 100
  and, like every SDK, does not check a maximum itself).
* **Secrets Manager SecretString**: over 65,536 characters in CreateSecret, PutSecretValue or
  UpdateSecret is refused with ``ValidationException`` (their API reference, SecretString:
  "Length Constraints: Maximum length of 65536"; the quotas page: secret value size 65,536 bytes).

The messages follow AWS's validation form ("1 validation error detected: Value ... at '...'
failed to satisfy constraint: ..."). ``tests/localcloud/test_aws_limits.py`` pins each.
"""

from __future__ import annotations

import logging
from typing import Any

LOG = logging.getLogger(__name__)

EC2_FILTER_VALUES = 200
SSM_FILTER_VALUES = 100
SECRET_STRING_LENGTH = 65_536
SECRET_WRITES = ("CreateSecret", "PutSecretValue", "UpdateSecret")


def problem(service: str, operation: str, request: dict[str, Any]) -> tuple[str, str] | None:
    """(error code, message) when ``request`` is over a limit AWS keeps, else None."""
    if service == "ec2":
        values = sum(len(f.get("Values") or []) for f in request.get("Filters") or [])
        if values > EC2_FILTER_VALUES:
            return (
                "FilterLimitExceeded",
                f"The maximum number of filter values specified on a single call is {EC2_FILTER_VALUES}",
            )
    if service == "ssm" and operation == "DescribeInstanceInformation":
        for n, item in enumerate(request.get("Filters") or [], start=1):
            if len(item.get("Values") or []) > SSM_FILTER_VALUES:
                return (
                    "ValidationException",
                    f"1 validation error detected: Value at 'filters.{n}.member.values' failed to satisfy "
                    f"constraint: Member must have length less than or equal to {SSM_FILTER_VALUES}",
                )
    if service == "secretsmanager" and operation in SECRET_WRITES:
        secret = request.get("SecretString")
        if isinstance(secret, str) and len(secret) > SECRET_STRING_LENGTH:
            return (
                "ValidationException",
                "1 validation error detected: Value at 'secretString' failed to satisfy constraint: "
                f"Member must have length less than or equal to {SECRET_STRING_LENGTH}",
            )
    return None


def handle(chain: Any, context: Any, response: Any) -> None:
    if context.service is None or context.operation is None:
        return
    found = problem(context.service.service_name, context.operation.name, dict(context.service_request or {}))
    if found is None:
        return
    from localstack.aws.api import CommonServiceException

    service, operation = context.service.service_name, context.operation.name
    LOG.warning("AWS limit: %s %s refused: %s", service, operation, found[1])
    raise CommonServiceException(found[0], found[1], status_code=400, sender_fault=True)


def install() -> None:
    from localstack.aws import handlers

    handlers.serve_custom_service_request_handlers.append(handle)
