"""API Gateway gives up on an integration past its timeout: 504 "Endpoint request timed out".

AWS, Amazon API Gateway developer guide, "Amazon API Gateway quotas"
(https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html), quotas for
configuring and running a REST API: "Integration timeout: 50 milliseconds - 29 seconds for all
integration types, including Lambda, Lambda proxy, HTTP, HTTP proxy, and AWS integrations" (the
integration's ``timeoutInMillis``, 29,000 when unset). Past it the caller gets the
``INTEGRATION_TIMEOUT`` gateway response, default status 504 ("Gateway response types for API
Gateway"), as AWS sends it: ``Content-Type: application/json``, ``x-amzn-ErrorType:
InternalServerErrorException``, body ``{"message": "Endpoint request timed out"}``; the Lambda
function is not stopped. Stock community LocalStack waits for the function however long it runs.

A tiny REST API built with the API Gateway API (no SAM): ``/slow`` a Lambda proxy integration
with ``timeoutInMillis`` 1000 whose function sleeps 8 s, ``/fast`` one with the default timeout
whose function answers at once.
"""

import io
import json
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3

REGION = "us-east-1"
ACCOUNT = "000000000000"
SLEEP_SECONDS = 8
HANDLER = f"""
import json, time

def handler(event, context):
    if event["path"].endswith("/slow"):
        time.sleep({SLEEP_SECONDS})
    return {{"statusCode": 200, "body": json.dumps({{"path": event["path"]}})}}
"""
http = urllib3.PoolManager()


def _zip(source: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", source)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def api_url(aws: Callable[[str], Any], endpoint: str) -> Iterator[str]:
    lam, apigw = aws("lambda"), aws("apigateway")
    name = f"apigw-timeout-{uuid.uuid4().hex[:8]}"
    function_arn = lam.create_function(
        FunctionName=name,
        Runtime="python3.13",
        Role=f"arn:aws:iam::{ACCOUNT}:role/apigw-timeout-test",
        Handler="app.handler",
        Code={"ZipFile": _zip(HANDLER)},
        Timeout=SLEEP_SECONDS + 5,
    )["FunctionArn"]
    lam.get_waiter("function_active_v2").wait(FunctionName=name)
    api_id = apigw.create_rest_api(name=name)["id"]
    root = next(r["id"] for r in apigw.get_resources(restApiId=api_id)["items"] if r["path"] == "/")
    uri = f"arn:aws:apigateway:{REGION}:lambda:path/2015-03-31/functions/{function_arn}/invocations"
    for path, timeout in (("slow", {"timeoutInMillis": 1000}), ("fast", {})):
        resource = apigw.create_resource(restApiId=api_id, parentId=root, pathPart=path)["id"]
        apigw.put_method(restApiId=api_id, resourceId=resource, httpMethod="GET", authorizationType="NONE")
        apigw.put_integration(
            restApiId=api_id,
            resourceId=resource,
            httpMethod="GET",
            type="AWS_PROXY",
            integrationHttpMethod="POST",
            uri=uri,
            **timeout,
        )
    apigw.create_deployment(restApiId=api_id, stageName="v1")
    yield f"{endpoint}/restapis/{api_id}/v1/_user_request_"
    apigw.delete_rest_api(restApiId=api_id)
    lam.delete_function(FunctionName=name)


def test_an_integration_past_its_timeout_answers_504_endpoint_request_timed_out(api_url: str) -> None:
    # Given a Lambda proxy integration with a 1 s timeout whose function takes 8 s
    started = time.monotonic()
    # When it is called
    reply = http.request("GET", f"{api_url}/slow", retries=False, timeout=60)
    waited = time.monotonic() - started
    # Then API Gateway answers 504 itself, in AWS's shape, without waiting for the function
    assert reply.status == 504, reply.data
    assert reply.data == b'{"message": "Endpoint request timed out"}'
    assert reply.headers["x-amzn-ErrorType"] == "InternalServerErrorException"
    assert reply.headers["Content-Type"] == "application/json"
    assert waited < SLEEP_SECONDS, f"answered after {waited:.1f} s: it waited for the function"


def test_an_integration_within_its_timeout_answers_the_functions_response(api_url: str) -> None:
    # Given a Lambda proxy integration with the default timeout (29 s) and a quick function
    # When it is called / Then the function's response comes through
    reply = http.request("GET", f"{api_url}/fast", retries=False, timeout=60)
    assert reply.status == 200, reply.data
    assert json.loads(reply.data) == {"path": "/fast"}


def test_the_timeout_is_read_from_the_integration(aws: Callable[[str], Any], api_url: str) -> None:
    # The 1 s is the integration's own setting, as put (not a local default)
    apigw = aws("apigateway")
    api_id = api_url.split("/restapis/")[1].split("/")[0]
    slow = next(r for r in apigw.get_resources(restApiId=api_id)["items"] if r["path"] == "/slow")
    integration = apigw.get_integration(restApiId=api_id, resourceId=slow["id"], httpMethod="GET")
    assert integration["timeoutInMillis"] == 1000
