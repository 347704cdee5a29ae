"""The deployed arrays API authorizes every signed call with ``execute-api:Invoke``, as API Gateway's
IAM authorization does: a SigV4 signature that verifies is not enough.

AWS ("Control access for invoking an API", API Gateway developer guide,
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-control-access-using-iam-policies-to-invoke-api.html):
the caller's IAM policies must allow ``execute-api:Invoke`` on
``arn:aws:execute-api:<region>:<account>:<api-id>/<stage>/<METHOD>/<resource-path>``; otherwise API
Gateway answers 403 ``AccessDeniedException`` before the integration runs, with the body
``{"Message":"User: <caller ARN> is not authorized to perform: execute-api:Invoke on resource:
<ARN>"}``, the account in that ARN masked but its last four digits (the knowledge-center article
"How do I troubleshoot HTTP 403 errors from API Gateway?"). The callers here are IAM users with
their own access keys, signing as vsactl signs (botocore's SigV4Auth).
"""

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.credentials import Credentials

from tests.integration.conftest import Api

REGION = "us-east-1"


class SignedAs(Api):
    """The deployed API called with another principal's credentials."""

    def __init__(self, endpoint: str, api_id: str, credentials: Credentials) -> None:
        super().__init__(endpoint, api_id)
        self._credentials = credentials


@pytest.fixture
def user_api(
    stack_outputs: dict[str, str], local_env: dict[str, str]
) -> Iterator[Callable[..., tuple[str, Api]]]:
    """``user_api(*statements)``: an IAM user whose inline policy has those statements (none: no
    policy at all), with an access key; answers its ARN and the API signed with its key."""
    iam = boto3.client("iam")
    users: list[tuple[str, str]] = []

    def make(*statements: dict[str, Any]) -> tuple[str, Api]:
        name = f"api-caller-{uuid.uuid4().hex[:8]}"
        arn = iam.create_user(UserName=name)["User"]["Arn"]
        key = iam.create_access_key(UserName=name)["AccessKey"]
        users.append((name, key["AccessKeyId"]))
        if statements:
            document = {"Version": "2012-10-17", "Statement": list(statements)}
            iam.put_user_policy(UserName=name, PolicyName="arrays-api", PolicyDocument=json.dumps(document))
        credentials = Credentials(key["AccessKeyId"], key["SecretAccessKey"])
        return arn, SignedAs(local_env["AWS_ENDPOINT_URL"], stack_outputs["ApiId"], credentials)

    yield make
    for name, key_id in users:
        for policy in iam.list_user_policies(UserName=name)["PolicyNames"]:
            iam.delete_user_policy(UserName=name, PolicyName=policy)
        iam.delete_access_key(UserName=name, AccessKeyId=key_id)
        iam.delete_user(UserName=name)


@pytest.fixture(scope="module")
def account() -> str:
    return str(boto3.client("sts").get_caller_identity()["Account"])


def refusal(user_arn: str, account: str, api_id: str, method: str, path: str) -> dict[str, str]:
    """API Gateway's body for a caller no policy allows ``method path`` (stage v1)."""
    resource = f"arn:aws:execute-api:{REGION}:********{account[-4:]}:{api_id}/v1/{method}/{path}"
    message = f"User: {user_arn} is not authorized to perform: execute-api:Invoke on resource: {resource}"
    return {"Message": message}


def test_a_user_with_no_right_to_the_api_is_refused(
    user_api: Callable[..., tuple[str, Api]],
    api: Api,
    stack_outputs: dict[str, str],
    account: str,
    array_id: str,
) -> None:
    # Given an IAM user with a valid access key and no policy
    user_arn, as_user = user_api()
    api_id = stack_outputs["ApiId"]

    # When it declares an array and lists the arrays, correctly signed
    put_status, put_reply = as_user.call("PUT", f"/arrays/{array_id}", {"arrayId": array_id})
    list_status, list_reply = as_user.call("GET", "/arrays")

    # Then API Gateway refuses both before any Lambda runs: nothing was declared
    assert (put_status, put_reply) == (403, refusal(user_arn, account, api_id, "PUT", f"arrays/{array_id}"))
    assert (list_status, list_reply) == (403, refusal(user_arn, account, api_id, "GET", "arrays"))
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404


def test_a_user_allowed_only_get_can_read_but_not_declare_or_delete(
    user_api: Callable[..., tuple[str, Api]],
    api: Api,
    stack_outputs: dict[str, str],
    account: str,
    array_id: str,
) -> None:
    # Given an IAM user allowed execute-api:Invoke on every GET of the API's stage v1
    api_id = stack_outputs["ApiId"]
    reads = f"arn:aws:execute-api:{REGION}:{account}:{api_id}/v1/GET/*"
    user_arn, as_user = user_api({"Effect": "Allow", "Action": "execute-api:Invoke", "Resource": reads})

    # When it lists, reads an array that does not exist, declares one and deletes one
    list_status, listed = as_user.call("GET", "/arrays")
    get_status, _ = as_user.call("GET", f"/arrays/{array_id}")
    put_status, put_reply = as_user.call("PUT", f"/arrays/{array_id}", {"arrayId": array_id})
    delete_status, delete_reply = as_user.call("DELETE", f"/arrays/{array_id}")

    # Then the reads reach the API's functions (the list; the array's 404), the writes are refused
    assert list_status == 200, listed
    assert "arrays" in listed
    assert get_status == 404
    assert (put_status, put_reply) == (403, refusal(user_arn, account, api_id, "PUT", f"arrays/{array_id}"))
    assert (delete_status, delete_reply) == (
        403,
        refusal(user_arn, account, api_id, "DELETE", f"arrays/{array_id}"),
    )
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404
