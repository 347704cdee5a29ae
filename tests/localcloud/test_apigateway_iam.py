"""API Gateway REST API methods with ``AWS_IAM`` authorization accept only SigV4-signed requests
from callers allowed ``execute-api:Invoke`` on them.

AWS (API Gateway developer guide, "Control access to a REST API with IAM permissions", and the
knowledge-center article on SigV4 mismatches): an unsigned request to an IAM-authorized method is
refused with 403 ``Missing Authentication Token``; a signature that does not verify with 403 "The
request signature we calculated does not match the signature you provided…"; the credential must
be scoped to ``execute-api``; the signed timestamp must be within 5 minutes; a method with
authorization ``NONE`` stays open. Stock community LocalStack runs the integration for all of them.

Authorization ("Control access for invoking an API" and "How API Gateway resource policies affect
authorization workflow" in the same guide; the knowledge-center article "How do I troubleshoot
HTTP 403 errors from API Gateway?"): the caller's identity-based policies, and the API's resource
policy if it has one, must allow ``execute-api:Invoke`` on
``arn:aws:execute-api:<region>:<account>:<api-id>/<stage>/<METHOD>/<path>``; otherwise 403
``AccessDeniedException`` ``{"Message":"User: <caller ARN> is not authorized to perform:
execute-api:Invoke on resource: <ARN, account masked but its last 4 digits>"}``, ``… with an
explicit deny`` when a statement denies it.

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


def _build_api(aws: Callable[[str], Any], endpoint: str, policy: dict[str, Any] | None = None) -> str:
    """A REST API (optionally with a resource policy), stage v1: GET and PUT /iam and GET
    /items/{id} with AWS_IAM, GET /open with NONE; its invoke URL."""
    apigw = aws("apigateway")
    extra = {"policy": json.dumps(policy)} if policy else {}
    api_id = apigw.create_rest_api(name=f"iam-{uuid.uuid4().hex[:8]}", **extra)["id"]
    root = next(r["id"] for r in apigw.get_resources(restApiId=api_id)["items"] if r["path"] == "/")
    iam = apigw.create_resource(restApiId=api_id, parentId=root, pathPart="iam")["id"]
    opened = apigw.create_resource(restApiId=api_id, parentId=root, pathPart="open")["id"]
    items = apigw.create_resource(restApiId=api_id, parentId=root, pathPart="items")["id"]
    item = apigw.create_resource(restApiId=api_id, parentId=items, pathPart="{id}")["id"]
    _method(apigw, api_id, iam, "GET", "AWS_IAM")
    _method(apigw, api_id, iam, "PUT", "AWS_IAM")
    _method(apigw, api_id, item, "GET", "AWS_IAM")
    _method(apigw, api_id, opened, "GET", "NONE")
    apigw.create_deployment(restApiId=api_id, stageName="v1")
    return f"{endpoint}/restapis/{api_id}/v1/_user_request_"


def api_id_of(url: str) -> str:
    return url.split("/restapis/", 1)[1].split("/", 1)[0]


@pytest.fixture(scope="module")
def api_url(aws: Callable[[str], Any], endpoint: str) -> Iterator[str]:
    url = _build_api(aws, endpoint)
    yield url
    aws("apigateway").delete_rest_api(restApiId=api_id_of(url))


def signed_headers(
    method: str,
    url: str,
    body: bytes | None = None,
    *,
    secret: str = LOCAL_SECRET,
    credentials: Credentials | None = None,
    service: str = "execute-api",
    at: datetime.datetime | None = None,
) -> dict[str, str]:
    """The headers botocore's SigV4 signer gives the request, signed with ``credentials`` (by
    default the plain key ``test`` with ``secret``), optionally as signed at ``at``."""
    request = AWSRequest(method=method, url=url, data=body, headers={"Content-Type": "application/json"})
    signer = SigV4Auth(credentials or Credentials(ACCESS_KEY, secret), service, REGION)
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


# --- authorization: execute-api:Invoke ------------------------------------------------------------


def invoke_arn(url: str, method: str, path: str) -> str:
    """The method's ARN as API Gateway's messages show it: the account masked but its last 4 digits."""
    return f"arn:aws:execute-api:{REGION}:********{ACCOUNT[-4:]}:{api_id_of(url)}/v1/{method}/{path}"


def denied(caller_arn: str, url: str, method: str, path: str, explicit: bool = False) -> dict[str, str]:
    message = (
        f"User: {caller_arn} is not authorized to perform: execute-api:Invoke on resource: "
        f"{invoke_arn(url, method, path)}"
    )
    return {"Message": message + (" with an explicit deny" if explicit else "")}


def invoke_policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(resource: str) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": "execute-api:Invoke", "Resource": resource}


def deny(resource: str) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": "execute-api:Invoke", "Resource": resource}


class User:
    """An IAM user with an access key: its ARN, its id and its credentials."""

    def __init__(self, iam: Any, name: str) -> None:
        self.name = name
        made = iam.create_user(UserName=name)["User"]
        self.arn, self.user_id = made["Arn"], made["UserId"]
        key = iam.create_access_key(UserName=name)["AccessKey"]
        self.credentials = Credentials(key["AccessKeyId"], key["SecretAccessKey"])


@pytest.fixture
def make_user(aws: Callable[[str], Any]) -> Iterator[Callable[..., User]]:
    """``make_user(*statements, group=None)``: an IAM user whose inline policy (or, with
    ``group``, whose group's inline policy) has those statements; deleted afterwards."""
    iam = aws("iam")
    made: list[tuple[User, str | None]] = []

    def make(*statements: dict[str, Any], group: str | None = None) -> User:
        user = User(iam, f"apiuser-{uuid.uuid4().hex[:8]}")
        made.append((user, group))
        document = json.dumps(invoke_policy(*statements))
        if group is not None:
            iam.create_group(GroupName=group)
            iam.put_group_policy(GroupName=group, PolicyName="invoke", PolicyDocument=document)
            iam.add_user_to_group(GroupName=group, UserName=user.name)
        elif statements:
            iam.put_user_policy(UserName=user.name, PolicyName="invoke", PolicyDocument=document)
        return user

    yield make
    for user, group in made:
        if group is not None:
            iam.remove_user_from_group(GroupName=group, UserName=user.name)
            iam.delete_group_policy(GroupName=group, PolicyName="invoke")
            iam.delete_group(GroupName=group)
        for policy in iam.list_user_policies(UserName=user.name)["PolicyNames"]:
            iam.delete_user_policy(UserName=user.name, PolicyName=policy)
        iam.delete_access_key(UserName=user.name, AccessKeyId=user.credentials.access_key)
        iam.delete_user(UserName=user.name)


@pytest.fixture
def make_session(aws: Callable[[str], Any]) -> Iterator[Callable[..., tuple[str, Credentials]]]:
    """``make_session(*statements)``: a role with those statements, assumed (sts:AssumeRole);
    answers the session's ARN and credentials."""
    iam = aws("iam")
    made: list[str] = []
    trust = invoke_policy({"Effect": "Allow", "Principal": {"AWS": ACCOUNT}, "Action": "sts:AssumeRole"})

    def make(*statements: dict[str, Any]) -> tuple[str, Credentials]:
        name = f"apirole-{uuid.uuid4().hex[:8]}"
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        made.append(name)
        iam.put_role_policy(
            RoleName=name, PolicyName="invoke", PolicyDocument=json.dumps(invoke_policy(*statements))
        )
        reply = aws("sts").assume_role(RoleArn=arn, RoleSessionName="caller")
        creds = reply["Credentials"]
        return reply["AssumedRoleUser"]["Arn"], Credentials(
            creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"]
        )

    yield make
    for name in made:
        iam.delete_role_policy(RoleName=name, PolicyName="invoke")
        iam.delete_role(RoleName=name)


def call_as(credentials: Credentials, method: str, url: str, body: bytes | None = None) -> Any:
    return call(method, url, signed_headers(method, url, body, credentials=credentials), body)


def test_a_user_with_no_policy_is_refused_with_api_gateways_access_denied(
    api_url: str, make_user: Callable[..., User]
) -> None:
    # Given an IAM user whose policies allow nothing
    user = make_user()

    # When it calls an IAM-authorized method, correctly signed with its own secret
    reply = call_as(user.credentials, "GET", f"{api_url}/iam")

    # Then API Gateway refuses it: no identity-based policy allows execute-api:Invoke
    assert reply.status == 403
    assert json.loads(reply.data) == denied(user.arn, api_url, "GET", "iam")
    assert reply.headers["x-amzn-ErrorType"] == "AccessDeniedException"


def test_a_user_allowed_get_only_can_get_but_not_put(api_url: str, make_user: Callable[..., User]) -> None:
    # Given a user allowed execute-api:Invoke on every GET of the API's stage v1
    user = make_user(allow(f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{api_id_of(api_url)}/v1/GET/*"))

    # When it reads and then writes
    got = call_as(user.credentials, "GET", f"{api_url}/iam")
    body = b'{"arrayId": "demo"}'
    put = call_as(user.credentials, "PUT", f"{api_url}/iam", body)

    # Then the read reaches the integration as that user, the write is refused
    assert got.status == 200, got.data
    identity = json.loads(got.data)
    assert (identity["userArn"], identity["caller"], identity["user"]) == (
        user.arn,
        user.user_id,
        user.user_id,
    )
    assert identity["accessKey"] == user.credentials.access_key
    assert put.status == 403
    assert json.loads(put.data) == denied(user.arn, api_url, "PUT", "iam")


def test_the_requested_region_is_the_apis_region(api_url: str, make_user: Callable[..., User]) -> None:
    # aws:RequestedRegion ("AWS global condition context keys"): "the AWS Region that was called
    # in the request", in every request's context; an API's is its Region.
    # Given a user allowed only in the API's Region and one allowed only in another
    resource = f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{api_id_of(api_url)}/v1/GET/*"
    here, elsewhere = (
        make_user(dict(allow(resource), Condition={"StringEquals": {"aws:RequestedRegion": region}}))
        for region in (REGION, "us-west-2")
    )
    # When each calls the API / Then the first is let through, the second refused
    assert call_as(here.credentials, "GET", f"{api_url}/iam").status == 200
    refused = call_as(elsewhere.credentials, "GET", f"{api_url}/iam")
    assert refused.status == 403
    assert json.loads(refused.data) == denied(elsewhere.arn, api_url, "GET", "iam")


def test_the_resource_is_the_path_as_sent_so_a_path_parameter_is_its_value(
    api_url: str, make_user: Callable[..., User]
) -> None:
    # Given a user allowed GET on /items/a1 only (the resource /items/{id})
    user = make_user(allow(f"arn:aws:execute-api:*:*:{api_id_of(api_url)}/*/GET/items/a1"))

    # When it reads item a1 and item b2
    first = call_as(user.credentials, "GET", f"{api_url}/items/a1")
    second = call_as(user.credentials, "GET", f"{api_url}/items/b2")

    # Then only a1 is allowed
    assert first.status == 200, first.data
    assert second.status == 403
    assert json.loads(second.data) == denied(user.arn, api_url, "GET", "items/b2")


def test_an_explicit_deny_beats_an_allow(api_url: str, make_user: Callable[..., User]) -> None:
    # Given a user allowed everything on the API but denied its PUTs
    api = f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{api_id_of(api_url)}"
    user = make_user(allow(f"{api}/*"), deny(f"{api}/*/PUT/*"))

    # When it reads and writes
    got = call_as(user.credentials, "GET", f"{api_url}/iam")
    put = call_as(user.credentials, "PUT", f"{api_url}/iam", b"{}")

    # Then the write is refused "with an explicit deny"
    assert got.status == 200, got.data
    assert put.status == 403
    assert json.loads(put.data) == denied(user.arn, api_url, "PUT", "iam", explicit=True)


def test_a_groups_policy_authorizes_its_members(api_url: str, make_user: Callable[..., User]) -> None:
    # Given a user with no policy of its own, in a group allowed the API
    user = make_user(
        allow(f"arn:aws:execute-api:*:*:{api_id_of(api_url)}/*"), group=f"g-{uuid.uuid4().hex[:8]}"
    )

    # When it calls
    reply = call_as(user.credentials, "GET", f"{api_url}/iam")

    # Then the group's policy allows it
    assert reply.status == 200, reply.data


def test_a_users_key_verifies_only_with_its_own_secret(api_url: str, make_user: Callable[..., User]) -> None:
    # Given a user allowed the API
    user = make_user(allow("*"))
    forged = Credentials(user.credentials.access_key, LOCAL_SECRET)

    # When a request names its access key but is signed with the local cloud's plain secret
    reply = call_as(forged, "GET", f"{api_url}/iam")

    # Then the signature does not match
    assert reply.status == 403
    assert message(reply).startswith("The request signature we calculated does not match")


def test_an_inactive_access_key_is_an_invalid_security_token(
    aws: Callable[[str], Any], api_url: str, make_user: Callable[..., User]
) -> None:
    # Given a user allowed the API whose access key is made inactive
    user = make_user(allow("*"))
    aws("iam").update_access_key(
        UserName=user.name, AccessKeyId=user.credentials.access_key, Status="Inactive"
    )

    # When it calls
    reply = call_as(user.credentials, "GET", f"{api_url}/iam")

    # Then the key is refused
    assert reply.status == 403
    assert message(reply) == "The security token included in the request is invalid."


def test_a_role_session_is_authorized_by_its_roles_policies(
    api_url: str, make_session: Callable[..., tuple[str, Credentials]]
) -> None:
    # Given two assumed roles: one allowed the API, one allowed something else only
    api = f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{api_id_of(api_url)}"
    allowed_arn, allowed = make_session(allow(f"{api}/v1/*"))
    other_arn, other = make_session(allow(f"{api}/v2/*"))

    # When each calls with its session credentials (and session token)
    reply = call_as(allowed, "GET", f"{api_url}/iam")
    refused = call_as(other, "GET", f"{api_url}/iam")
    without_token = call_as(Credentials(allowed.access_key, allowed.secret_key), "GET", f"{api_url}/iam")

    # Then the first reaches the integration as its session, the second is refused, and session
    # credentials without their token are not accepted
    assert reply.status == 200, reply.data
    assert json.loads(reply.data)["userArn"] == allowed_arn
    assert refused.status == 403
    assert json.loads(refused.data) == denied(other_arn, api_url, "GET", "iam")
    assert without_token.status == 403
    assert message(without_token) == "The security token included in the request is invalid."


@pytest.fixture
def api_with_policy(aws: Callable[[str], Any], endpoint: str) -> Iterator[Callable[..., str]]:
    """``api_with_policy(*statements)``: a REST API like ``api_url``'s with that resource policy."""
    urls: list[str] = []

    def make(*statements: dict[str, Any]) -> str:
        urls.append(_build_api(aws, endpoint, invoke_policy(*statements)))
        return urls[-1]

    yield make
    for url in urls:
        aws("apigateway").delete_rest_api(restApiId=api_id_of(url))


def test_a_resource_policy_that_denies_a_principal_refuses_it(
    api_with_policy: Callable[..., str], make_user: Callable[..., User]
) -> None:
    # Given a user allowed the API by its own policy, and an API whose resource policy (in
    # API Gateway's short form execute-api:/…) denies that user its PUTs and allows everyone
    user = make_user(allow("*"))
    other = make_user(allow("*"))
    url = api_with_policy(
        {"Effect": "Allow", "Principal": "*", "Action": "execute-api:Invoke", "Resource": "execute-api:/*"},
        {**deny("execute-api:/*/PUT/*"), "Principal": {"AWS": user.arn}},
    )

    # When the user and another user call
    got = call_as(user.credentials, "GET", f"{url}/iam")
    put = call_as(user.credentials, "PUT", f"{url}/iam", b"{}")
    other_put = call_as(other.credentials, "PUT", f"{url}/iam", b"{}")

    # Then only the denied principal's PUT is refused, with an explicit deny
    assert got.status == 200, got.data
    assert put.status == 403
    assert json.loads(put.data) == denied(user.arn, url, "PUT", "iam", explicit=True)
    assert other_put.status == 200, other_put.data


def test_in_the_apis_account_a_resource_policy_allow_is_enough(
    api_with_policy: Callable[..., str], make_user: Callable[..., User]
) -> None:
    # Given a user with no policy, named by the API's resource policy (same account: either the
    # identity policy or the resource policy may allow), and a user it does not name
    named, unnamed = make_user(), make_user()
    url = api_with_policy({**allow("execute-api:/v1/GET/*"), "Principal": {"AWS": [named.arn]}})

    # When both read
    allowed = call_as(named.credentials, "GET", f"{url}/iam")
    refused = call_as(unnamed.credentials, "GET", f"{url}/iam")

    # Then the resource policy allows the one it names
    assert allowed.status == 200, allowed.data
    assert refused.status == 403
    assert json.loads(refused.data) == denied(unnamed.arn, url, "GET", "iam")


def test_root_and_plain_test_keys_stay_unrestricted(api_with_policy: Callable[..., str]) -> None:
    # Given an API whose resource policy names nobody in particular
    url = api_with_policy({**allow("execute-api:/*"), "Principal": {"AWS": "arn:aws:iam::111111111111:root"}})

    # When the plain key "test" (the account's root on the local cloud) calls
    reply = call("GET", f"{url}/iam", signed_headers("GET", f"{url}/iam"))

    # Then it is not restricted, as before
    assert reply.status == 200, reply.data
    assert json.loads(reply.data)["userArn"] == f"arn:aws:iam::{ACCOUNT}:root"
