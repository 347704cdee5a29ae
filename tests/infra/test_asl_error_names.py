"""Every ``ErrorEquals`` name in every workflow is one AWS can produce for that state.

Step Functions matches error names as plain strings: a misspelt or invented name is accepted at
deploy time and simply never matches, so a retrier meant for a throttle never retries and a
catcher meant for a known failure never catches (issue 15: ``AutoScaling.Throttling``,
``Ssm.InternalServerError`` and friends left every passing throttle or 5xx of those tasks to
undo and ABANDON). The names a state can produce, by resource:

- every state: the ``States.*`` names of
  https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html;
- ``arn:aws:states:::aws-sdk:<service>:<action>``: ``<Service>.<Error>`` per
  https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html — both
  parts PascalCase, ``<Error>`` one of the operation's modelled errors (botocore's model, by
  the error code the API reference lists) or an error common to every AWS API
  (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/CommonErrors.html and the same page
  in every service's reference), with ``Exception`` appended "even if the suffix is not already
  part of the error name"; plus the SDK's generic ``<Service>.<Service>Exception`` and
  ``<Service>.SdkClientException``. ``<Service>`` is the service id in the AWS SDKs' PascalCase
  (the page's own example: ACM PCA is ``AcmPca``; SSM ``Ssm``, DynamoDB ``DynamoDb``);
- optimized integrations: the names AWS documents for them — Lambda
  (https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html:
  ``Lambda.ClientExecutionTimeoutException``, ``Lambda.ServiceException``,
  ``Lambda.AWSLambdaException``, ``Lambda.SdkClientException``, ``Lambda.TooManyRequestsException``,
  ``Lambda.Unknown``, and the Invoke API's errors) and DynamoDB (``DynamoDB.<Error>Exception`` for
  the operation's errors, the generic ``DynamoDB.AmazonDynamoDBException``);
- a Lambda task also raises the project's own named errors (the ``errorType`` of a Lambda error
  is the exception's class name): every exception class in ``layers/core`` and ``functions``;
- a Map or Parallel state: whatever its inner states can produce, and its inner ``Fail`` states' errors.
"""

import ast
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.model import OperationModel

ROOT = Path(__file__).resolve().parents[2]
ASL_FILES = sorted((ROOT / "statemachines").glob("*.asl.json"))

# https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html
STATES_ERRORS = frozenset(
    {
        "States.ALL",
        "States.HeartbeatTimeout",
        "States.Timeout",
        "States.TaskFailed",
        "States.Permissions",
        "States.ResultPathMatchFailure",
        "States.ParameterPathFailure",
        "States.QueryEvaluationError",
        "States.BranchFailed",
        "States.NoChoiceMatched",
        "States.IntrinsicFailure",
        "States.ExceedToleratedFailureThreshold",
        "States.ItemReaderFailed",
        "States.ResultWriterFailed",
        "States.Runtime",
    }
)

# "Common Errors" of the AWS API references (the same page in each service's reference, e.g.
# https://docs.aws.amazon.com/autoscaling/ec2/APIReference/CommonErrors.html,
# https://docs.aws.amazon.com/systems-manager/latest/APIReference/CommonErrors.html), current
# and earlier editions (Throttling, MissingAction, ... were listed before the pages were unified),
# and EC2's common client error for throttling (RequestLimitExceeded,
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
COMMON_ERRORS = frozenset(
    {
        "AccessDeniedException",
        "ExpiredTokenException",
        "IncompleteSignature",
        "InternalFailure",
        "InvalidAction",
        "InvalidClientTokenId",
        "InvalidParameterCombination",
        "InvalidParameterValue",
        "InvalidQueryParameter",
        "MalformedHttpRequestException",
        "MalformedQueryString",
        "MissingAction",
        "MissingAuthenticationToken",
        "MissingParameter",
        "NotAuthorized",
        "OptInRequired",
        "RequestAbortedException",
        "RequestEntityTooLargeException",
        "RequestExpired",
        "RequestLimitExceeded",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
        "UnknownOperationException",
        "UnrecognizedClientException",
        "ValidationError",
        "ValidationException",
    }
)

# Resource service names of aws-sdk integrations that are not botocore's service names (besides
# botocore's hyphens: acmpca is acm-pca).
SDK_TO_BOTOCORE = {"sfn": "stepfunctions", "cloudwatchlogs": "logs"}

# https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html
LAMBDA_GENERIC = frozenset(
    {
        "Lambda.ClientExecutionTimeoutException",
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.TooManyRequestsException",
        "Lambda.Unknown",
        # a function that runs past its Timeout: the invocation's errorType, which the Lambda task
        # fails with (https://docs.aws.amazon.com/lambda/latest/dg/troubleshooting-invocation.html
        # #troubleshooting-timeouts: Sandbox.Timedout, "Task timed out after N seconds"; the local
        # cloud's process executor answers the same)
        "Sandbox.Timedout",
    }
)

SDK_ARN = re.compile(r"^arn:[^:]+:states:::aws-sdk:(?P<service>[a-z0-9]+):(?P<action>[A-Za-z0-9]+)(\..+)?$")
OPTIMIZED_ARN = re.compile(r"^arn:[^:]+:states:::(?P<service>[a-z0-9]+):(?P<action>[A-Za-z0-9]+)(\..+)?$")
LAMBDA_ARN = re.compile(r"^arn:[^:]+:lambda:[^:]*:[^:]*:function:.+$")
PLACEHOLDER = re.compile(r"^\$\{(?P<name>[A-Za-z0-9_]+)\}$")


def with_exception_suffix(name: str) -> str:
    """AWS's rule for aws-sdk error names: always end in ``Exception``."""
    return name if name.endswith("Exception") else f"{name}Exception"


def sdk_pascal(service_id: str) -> str:
    """A service id in the AWS SDKs' PascalCase: words split at spaces, hyphens and camel-case
    humps (``DynamoDB`` is Dynamo + DB), each word capitalised with the rest lower case:
    ``ACM PCA`` -> ``AcmPca``, ``Auto Scaling`` -> ``AutoScaling``, ``SSM`` -> ``Ssm``."""
    spaced = re.sub(r"[^A-Za-z0-9]+", " ", service_id)
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", spaced)  # CloudWatch -> Cloud Watch, DynamoDB -> Dynamo DB
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)  # ACMSuccess -> ACM Success
    return "".join(word[:1].upper() + word[1:].lower() for word in spaced.split())


@cache
def _session() -> botocore.session.Session:
    return botocore.session.get_session()


def botocore_service(service: str) -> str:
    """The botocore name of an integration's service (``acmpca`` is ``acm-pca``)."""
    by_plain = {name.replace("-", ""): name for name in _session().get_available_services()}
    return SDK_TO_BOTOCORE.get(service) or by_plain.get(service, service)


def botocore_operation(service: str, action: str) -> OperationModel:
    model = _session().get_service_model(botocore_service(service))
    by_lower = {name.lower(): name for name in model.operation_names}
    if action.lower() not in by_lower:
        raise LookupError(f"{service} has no operation {action!r}")
    return model.operation_model(by_lower[action.lower()])


def _error_names(operation: OperationModel) -> set[str]:
    """An operation's error names as its API reference lists them (the error code), with the
    AWS SDK for Java's spelling of the shape (a ``...Fault`` shape is ``...Exception``) too."""
    names = set(COMMON_ERRORS)
    for shape in operation.error_shapes:
        names.add(shape.metadata.get("error", {}).get("code") or shape.name)
        names.add(re.sub(r"Fault$", "", shape.name))
    return names


def aws_sdk_names(service: str, action: str) -> set[str]:
    operation = botocore_operation(service, action)
    prefix = sdk_pascal(operation.service_model.service_id)
    names = {f"{prefix}.{with_exception_suffix(name)}" for name in _error_names(operation)}
    return names | {f"{prefix}.{prefix}Exception", f"{prefix}.SdkClientException"}


@cache
def domain_errors() -> frozenset[str]:
    """Names of the exception classes the project's code defines (a Lambda's ``errorType``)."""
    classes: dict[str, list[str]] = {}
    for path in [*(ROOT / "layers" / "core").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in classes:  # one of ours: an exception if one of its bases is
            return name not in seen and any(is_exception(base, seen | {name}) for base in classes[name])
        return name in ("Exception", "BaseException") or name.endswith(("Error", "Exception"))

    return frozenset(name for name in classes if is_exception(name))


def lambda_names() -> set[str]:
    invoke = botocore_operation("lambda", "invoke")
    return (
        set(LAMBDA_GENERIC)
        | {f"Lambda.{with_exception_suffix(n)}" for n in _error_names(invoke)}
        | domain_errors()
    )


def optimized_names(service: str, action: str) -> set[str]:
    if service == "lambda" and action == "invoke":
        return lambda_names()
    if service == "dynamodb":
        operation = botocore_operation("dynamodb", action)
        names = {f"DynamoDB.{with_exception_suffix(n)}" for n in _error_names(operation)}
        return names | {"DynamoDB.AmazonDynamoDBException", "DynamoDB.SdkClientException"}
    raise LookupError(
        f"no error names known for the optimized integration {service}:{action}: add AWS's documented ones"
    )


def function_placeholders() -> set[str]:
    """DefinitionSubstitutions that are Lambda function ARNs (``!GetAtt <Function>.Arn``)."""
    from tests.infra.test_statemachine_definitions import load_template

    resources = load_template()["Resources"]
    functions = {
        n for n, r in resources.items() if r["Type"] in ("AWS::Serverless::Function", "AWS::Lambda::Function")
    }
    found = set()
    for resource in resources.values():
        for key, value in resource.get("Properties", {}).get("DefinitionSubstitutions", {}).items():
            target = value.get("GetAtt") if isinstance(value, dict) else None
            if isinstance(target, str) and target.split(".")[0] in functions:
                found.add(key)
    return found


def task_names(resource: str, lambda_placeholders: set[str]) -> set[str]:
    """The names a Task state with this Resource can produce, besides ``States.*``."""
    rendered = resource.replace("${Partition}", "aws")
    if match := SDK_ARN.match(rendered):
        return aws_sdk_names(match["service"], match["action"])
    if match := OPTIMIZED_ARN.match(rendered):
        return optimized_names(match["service"], match["action"])
    placeholder = PLACEHOLDER.match(resource)
    if LAMBDA_ARN.match(rendered) or (placeholder and placeholder["name"] in lambda_placeholders):
        return lambda_names()
    raise LookupError(f"unknown task resource {resource!r}")


def _inner_states(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    inner: dict[str, dict[str, Any]] = {}
    for branch in state.get("Branches", []):
        inner.update(branch["States"])
    for key in ("Iterator", "ItemProcessor"):
        if key in state:
            inner.update(state[key]["States"])
    return inner


def producible(state: dict[str, Any], lambda_placeholders: set[str]) -> set[str]:
    """Every error name a state can produce (``States.*`` included)."""
    names = set(STATES_ERRORS)
    if state.get("Type") == "Task":
        names |= task_names(state["Resource"], lambda_placeholders)
    for inner in _inner_states(state).values():
        if inner.get("Type") == "Fail" and "Error" in inner:
            names.add(inner["Error"])
        names |= producible(inner, lambda_placeholders)
    return names


def walk(states: dict[str, dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        yield name, state
        yield from walk(_inner_states(state))


def refused_names(definition: dict[str, Any], lambda_placeholders: set[str]) -> list[str]:
    """``state: name`` for every ErrorEquals name the state cannot produce, and every misplaced
    ``States.ALL`` (it must stand alone, in the last retrier or catcher)."""
    refused = []
    for state_name, state in walk(definition["States"]):
        for field in ("Retry", "Catch"):
            rules = state.get(field, [])
            if not rules:
                continue
            try:
                allowed = producible(state, lambda_placeholders)
            except LookupError as error:
                refused.append(f"{state_name}: {error}")
                continue
            for index, rule in enumerate(rules):
                errors = rule["ErrorEquals"]
                refused += [f"{state_name}.{field}: {name}" for name in errors if name not in allowed]
                if "States.ALL" in errors and (len(errors) > 1 or index != len(rules) - 1):
                    refused.append(f"{state_name}.{field}: States.ALL must be alone and last")
    return refused


@pytest.mark.parametrize("path", ASL_FILES, ids=[p.name for p in ASL_FILES])
def test_every_error_name_is_one_aws_can_produce(path: Path) -> None:
    # Given a workflow as deployed
    definition = json.loads(path.read_text())
    # When each retrier's and catcher's names are checked against what its state can produce
    refused = refused_names(definition, function_placeholders())
    # Then every name can match
    assert refused == [], f"{path.name}: names no AWS state produces:\n" + "\n".join(refused)


def _task(resource: str, errors: list[str]) -> dict[str, Any]:
    task = {"Type": "Task", "Resource": resource, "End": True}
    return {"StartAt": "T", "States": {"T": task | {"Retry": [{"ErrorEquals": errors}]}}}


def test_an_invented_aws_sdk_name_is_refused() -> None:
    # AutoScaling's throttle has the code "Throttling": Step Functions reports it with the suffix
    resource = "arn:${Partition}:states:::aws-sdk:autoscaling:recordLifecycleActionHeartbeat"
    refused = refused_names(_task(resource, ["AutoScaling.Throttling"]), set())
    assert refused == ["T.Retry: AutoScaling.Throttling"]
    assert refused_names(_task(resource, ["AutoScaling.ThrottlingException"]), set()) == []


def test_names_follow_the_documented_rule() -> None:
    # The page's own examples: AcmPca.ResourceNotFoundException, S3.BucketAlreadyExistsException
    assert "AcmPca.ResourceNotFoundException" in aws_sdk_names("acmpca", "deleteCertificateAuthority")
    assert "S3.BucketAlreadyExistsException" in aws_sdk_names("s3", "createBucket")
    # Service ids in the SDKs' PascalCase
    assert [
        sdk_pascal(s)
        for s in ("ACM PCA", "Auto Scaling", "SSM", "SNS", "EC2", "CloudWatch", "DynamoDB", "SFN")
    ] == [
        "AcmPca",
        "AutoScaling",
        "Ssm",
        "Sns",
        "Ec2",
        "CloudWatch",
        "DynamoDb",
        "Sfn",
    ]
    # A modelled error without the suffix gets it; a Fault shape is named by its code
    assert "Ssm.InvocationDoesNotExistException" in aws_sdk_names("ssm", "getCommandInvocation")
    assert "Ssm.InvocationDoesNotExist" not in aws_sdk_names("ssm", "getCommandInvocation")
    assert "AutoScaling.ResourceContentionException" in aws_sdk_names(
        "autoscaling", "completeLifecycleAction"
    )


def test_lambda_tasks_may_catch_the_domain_errors() -> None:
    # The project's named errors are what its Lambdas raise; an unknown one is refused
    assert {"TeardownPendingError", "PreflightError", "SnapshotLimitError"} <= domain_errors()
    resource = "arn:${Partition}:states:::lambda:invoke"
    assert refused_names(_task(resource, ["TeardownPendingError", "Lambda.ServiceException"]), set()) == []
    assert refused_names(_task(resource, ["TeardownPendingErr"]), set()) == ["T.Retry: TeardownPendingErr"]


def test_a_map_catches_what_its_inner_states_raise() -> None:
    inner = {"StartAt": "F", "States": {"F": {"Type": "Fail", "Error": "HostNotReady"}}}
    definition = {
        "StartAt": "M",
        "States": {
            "M": {
                "Type": "Map",
                "ItemProcessor": inner,
                "End": True,
                "Catch": [
                    {"ErrorEquals": ["HostNotReady"], "Next": "M"},
                    {"ErrorEquals": ["Nope"], "Next": "M"},
                ],
            }
        },
    }
    assert refused_names(definition, set()) == ["M.Catch: Nope"]


def test_states_all_must_stand_alone_and_last() -> None:
    resource = "arn:${Partition}:states:::lambda:invoke"
    definition = _task(resource, ["States.ALL", "Lambda.ServiceException"])
    assert refused_names(definition, set()) == ["T.Retry: States.ALL must be alone and last"]
