"""API Gateway REST API methods with ``AWS_IAM`` authorization accept only SigV4-signed requests.

AWS (API Gateway developer guide, "Control access to a REST API with IAM permissions", and the
knowledge-center article on SigV4 mismatches): an unsigned request to an IAM-authorized method is
refused with 403 ``Missing Authentication Token``; a signature that does not verify with 403 "The
request signature we calculated does not match the signature you provided…"; the credential must
be scoped to ``execute-api``; the signed timestamp must be within 5 minutes; a method with
authorization ``NONE`` stays open. Stock community LocalStack runs the integration for all of them.

The API here is built with the API Gateway API (no SAM): MOCK integrations whose response
template echoes ``$context.identity``, so the test also sees who API Gateway says called.
"""

import datetime
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

REGION = "us-east-1"
LOCAL_SECRET = "test"  # the local cloud's secret for every access key (vsa_localcloud.apigateway_iam)
ACCESS_KEY = "test"
ACCOUNT = "000000000000"  # LocalStack's account for the access key "test"
AMZ_DATE = "%Y%m%dT%H%M%SZ"
IDENTITY_TEMPLATE = (
    '{"accessKey": "$context.identity.accessKey", "accountId": "$context.identity.accountId", '
    '"caller": "$context.identity.caller", "user": "$context.identity.user", '
    '"userArn": "$context.identity.userArn", "method": "$context.httpMethod"}'
)
http = urllib3.PoolManager()


def _method(apigw: Any, api_id: str, resource_id: str, verb: str, authorization: str) -> None:
    apigw.put_method(
        restApiId=api_id, resourceId=resource_id, httpMethod=verb, authorizationType=authorization
    )
    apigw.put_integration(
        restApiId=api_id,
        resourceId=resource_id,
        httpMethod=verb,
        type="MOCK",
        requestTemplates={"application/json": '{"statusCode": 200}'},
    )
    apigw.put_method_response(restApiId=api_id, resourceId=resource_id, httpMethod=verb, statusCode="200")
    apigw.put_integration_response(
        restApiId=api_id,
        resourceId=resource_id,
        httpMethod=verb,
        statusCode="200",
        responseTemplates={"application/json": IDENTITY_TEMPLATE},
    )


@pytest.fixture(scope="module")
def api_url(aws: Callable[[str], Any], endpoint: str) -> Iterator[str]:
    """A REST API, stage v1: GET and PUT /iam with AWS_IAM, GET /open with NONE."""
    apigw = aws("apigateway")
    api_id = apigw.create_rest_api(name=f"iam-{uuid.uuid4().hex[:8]}")["id"]
    root = next(r["id"] for r in apigw.get_resources(restApiId=api_id)["items"] if r["path"] == "/")
    iam = apigw.create_resource(restApiId=api_id, parentId=root, pathPart="iam")["id"]
    opened = apigw.create_resource(restApiId=api_id, parentId=root, pathPart="open")["id"]
    _method(apigw, api_id, iam, "GET", "AWS_IAM")
    _method(apigw, api_id, iam, "PUT", "AWS_IAM")
    _method(apigw, api_id, opened, "GET", "NONE")
    apigw.create_deployment(restApiId=api_id, stageName="v1")
    yield f"{endpoint}/restapis/{api_id}/v1/_user_request_"
    apigw.delete_rest_api(restApiId=api_id)


def signed_headers(
    method: str,
    url: str,
    body: bytes | None = None,
    *,
    secret: str = LOCAL_SECRET,
    service: str = "execute-api",
    at: datetime.datetime | None = None,
) -> dict[str, str]:
    """The headers botocore's SigV4 signer gives the request (optionally as signed at ``at``)."""
    request = AWSRequest(method=method, url=url, data=body, headers={"Content-Type": "application/json"})
    signer = SigV4Auth(Credentials(ACCESS_KEY, secret), service, REGION)
    if at is None:
        signer.add_auth(request)
    else:  # what add_auth does, at another time than now
        request.context["timestamp"] = at.strftime(AMZ_DATE)
        request.headers["X-Amz-Date"] = request.context["timestamp"]
        string_to_sign = signer.string_to_sign(request, signer.canonical_request(request))
        signer._inject_signature_to_request(request, signer.signature(string_to_sign, request))
    return dict(request.prepare().headers.items())


def call(method: str, url: str, headers: dict[str, str] | None = None, body: bytes | None = None) -> Any:
    return http.request(method, url, headers=headers or {}, body=body, retries=False)


def message(reply: Any) -> str:
    return str(json.loads(reply.data)["message"])


def test_unsigned_request_to_an_iam_method_is_missing_authentication_token(api_url: str) -> None:
    reply = call("GET", f"{api_url}/iam")

    assert reply.status == 403
    assert json.loads(reply.data) == {"message": "Missing Authentication Token"}
    assert reply.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"


def test_signed_request_reaches_the_integration_with_the_caller_identity(api_url: str) -> None:
    url = f"{api_url}/iam"

    reply = call("GET", url, signed_headers("GET", url))

    assert reply.status == 200, reply.data
    assert json.loads(reply.data) == {
        "accessKey": ACCESS_KEY,
        "accountId": ACCOUNT,
        "caller": ACCOUNT,
        "user": ACCOUNT,
        "userArn": f"arn:aws:iam::{ACCOUNT}:root",
        "method": "GET",
    }


def test_signed_put_with_a_body_and_query_string_is_accepted(api_url: str) -> None:
    url = f"{api_url}/iam?deleteVolumes=true&b=a%20b"
    body = json.dumps({"arrayId": "demo", "volumes": [{"name": "data2"}]}).encode()

    reply = call("PUT", url, signed_headers("PUT", url, body), body)

    assert reply.status == 200, reply.data
    assert json.loads(reply.data)["method"] == "PUT"


def test_a_signature_with_the_wrong_secret_does_not_match(api_url: str) -> None:
    url = f"{api_url}/iam"

    reply = call("GET", url, signed_headers("GET", url, secret="not-the-secret"))

    assert reply.status == 403
    assert message(reply).startswith(
        "The request signature we calculated does not match the signature you provided. Check your AWS "
        "Secret Access Key and signing method. Consult the service documentation for details.\n\n"
        "The Canonical String for this request should have been\n'GET\n"
    )
    assert "The String-to-Sign should have been\n'AWS4-HMAC-SHA256\n" in message(reply)
    assert reply.headers["x-amzn-ErrorType"] == "InvalidSignatureException"


def test_the_signature_covers_the_body_and_the_query_string(api_url: str) -> None:
    url = f"{api_url}/iam?deleteVolumes=false"
    body = b'{"arrayId": "demo"}'
    headers = signed_headers("PUT", url, body)

    other_body = call("PUT", url, headers, b'{"arrayId": "evil"}')
    other_query = call("PUT", f"{api_url}/iam?deleteVolumes=true", headers, body)

    for reply in (other_body, other_query):
        assert reply.status == 403
        assert message(reply).startswith("The request signature we calculated does not match")


def test_the_credential_must_be_scoped_to_execute_api(api_url: str) -> None:
    url = f"{api_url}/iam"

    reply = call("GET", url, signed_headers("GET", url, service="lambda"))

    assert reply.status == 403
    assert message(reply) == "Credential should be scoped to correct service: 'execute-api'. "


def test_a_signature_older_than_five_minutes_has_expired(api_url: str) -> None:
    url = f"{api_url}/iam"
    ten_minutes_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10)

    reply = call("GET", url, signed_headers("GET", url, at=ten_minutes_ago))

    assert reply.status == 403
    assert message(reply).startswith(
        f"Signature expired: {ten_minutes_ago.strftime(AMZ_DATE)} is now earlier than "
    )
    assert message(reply).endswith(" - 5 min.)")


def test_an_authorization_header_that_is_not_sigv4_is_an_incomplete_signature(api_url: str) -> None:
    reply = call("GET", f"{api_url}/iam", {"Authorization": "Bearer abc"})

    assert reply.status == 403
    assert "Authorization header requires 'Credential' parameter." in message(reply)
    assert reply.headers["x-amzn-ErrorType"] == "IncompleteSignatureException"


def test_a_method_without_authorization_stays_open(api_url: str) -> None:
    reply = call("GET", f"{api_url}/open")

    assert reply.status == 200, reply.data
    assert json.loads(reply.data)["userArn"] == ""


# What SAM generates for `AWS::Serverless::Api` with `Auth: DefaultAuthorizer: AWS_IAM` (the
# integration made a MOCK here): a `awsSigv4` security scheme required by each operation.
SAM_STYLE_DEFINITION = {
    "swagger": "2.0",
    "info": {"version": "1.0", "title": "sigv4-import"},
    "securityDefinitions": {
        "AWS_IAM": {
            "type": "apiKey",
            "name": "Authorization",
            "in": "header",
            "x-amazon-apigateway-authtype": "awsSigv4",
        }
    },
    "paths": {
        "/arrays/{id}": {
            "get": {
                "security": [{"AWS_IAM": []}],
                "responses": {"200": {"description": "ok"}},
                "x-amazon-apigateway-integration": {
                    "type": "mock",
                    "requestTemplates": {"application/json": '{"statusCode": 200}'},
                    "responses": {
                        "default": {"statusCode": "200", "responseTemplates": {"application/json": "{}"}}
                    },
                },
            }
        },
        "/open": {
            "get": {
                "responses": {"200": {"description": "ok"}},
                "x-amazon-apigateway-integration": {
                    "type": "mock",
                    "requestTemplates": {"application/json": '{"statusCode": 200}'},
                    "responses": {
                        "default": {"statusCode": "200", "responseTemplates": {"application/json": "{}"}}
                    },
                },
            }
        },
    },
}


def test_an_openapi_operation_secured_by_a_sigv4_scheme_imports_as_aws_iam(aws, endpoint) -> None:
    apigw = aws("apigateway")
    api_id = apigw.create_rest_api(name=f"sigv4-{uuid.uuid4().hex[:8]}")["id"]
    try:
        apigw.put_rest_api(restApiId=api_id, mode="overwrite", body=json.dumps(SAM_STYLE_DEFINITION).encode())
        apigw.create_deployment(restApiId=api_id, stageName="v1")
        by_path = {r["path"]: r["id"] for r in apigw.get_resources(restApiId=api_id)["items"]}
        secured = apigw.get_method(restApiId=api_id, resourceId=by_path["/arrays/{id}"], httpMethod="GET")
        opened = apigw.get_method(restApiId=api_id, resourceId=by_path["/open"], httpMethod="GET")
        url = f"{endpoint}/restapis/{api_id}/v1/_user_request_"

        assert secured["authorizationType"] == "AWS_IAM"
        assert opened["authorizationType"] == "NONE"
        assert call("GET", f"{url}/arrays/demo").status == 403
        assert call("GET", f"{url}/arrays/demo", signed_headers("GET", f"{url}/arrays/demo")).status == 200
        assert call("GET", f"{url}/open").status == 200
    finally:
        apigw.delete_rest_api(restApiId=api_id)
