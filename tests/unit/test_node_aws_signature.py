"""The local cloud nodes' ``aws`` signs its request as AWS's own SDK does (vsa_localcloud/node_aws.py).

The stand-in signs with the standard library (Signature Version 4, "Create a signed AWS API
request" in the IAM User Guide); botocore's ``SigV4Auth`` is the reference: for the same
request, credentials and instant both must give the same Authorization header.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from vsa_localcloud import node_aws

INSTANT = datetime.datetime(2026, 11, 30, 6, 40, 12, tzinfo=datetime.UTC)
HEADERS = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "secretsmanager.GetSecretValue"}
BODY = b'{"SecretId": "vsa/it-1/node/i-0123456789abcdef0"}'


class FrozenDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz: Any = None) -> FrozenDatetime:
        return cls.fromtimestamp(INSTANT.timestamp(), tz)

    @classmethod
    def utcnow(cls) -> FrozenDatetime:
        return cls.fromtimestamp(INSTANT.timestamp(), datetime.UTC).replace(tzinfo=None)


def botocore_authorization(host: str, token: str | None) -> str:
    request = AWSRequest(method="POST", url=f"http://{host}/", data=BODY, headers=dict(HEADERS))
    SigV4Auth(
        Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token),
        "secretsmanager",
        "us-east-1",
    ).add_auth(request)
    return str(request.headers["Authorization"])


@pytest.mark.parametrize("token", [None, "session-token-of-the-instance-role"])
def test_the_signature_is_the_sdks_for_the_same_request(
    monkeypatch: pytest.MonkeyPatch, token: str | None
) -> None:
    monkeypatch.setattr(node_aws.datetime, "datetime", FrozenDatetime)
    monkeypatch.setattr("botocore.auth.datetime.datetime", FrozenDatetime)
    credentials = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    ours = node_aws.sigv4_headers("127.0.0.1:4566", "us-east-1", "secretsmanager", credentials, HEADERS, BODY)
    assert ours["X-Amz-Date"] == "20261130T064012Z"
    assert ours.get("X-Amz-Security-Token") == token
    assert ours["Authorization"] == botocore_authorization("127.0.0.1:4566", token)


def test_another_body_or_key_signs_differently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_aws.datetime, "datetime", FrozenDatetime)
    credentials = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)
    signature = node_aws.sigv4_headers("h", "us-east-1", "secretsmanager", credentials, HEADERS, BODY)
    other_body = node_aws.sigv4_headers("h", "us-east-1", "secretsmanager", credentials, HEADERS, BODY + b" ")
    other_key = node_aws.sigv4_headers(
        "h", "us-east-1", "secretsmanager", (*credentials[:1], "x", None), HEADERS, BODY
    )
    assert len({signature["Authorization"], other_body["Authorization"], other_key["Authorization"]}) == 3
