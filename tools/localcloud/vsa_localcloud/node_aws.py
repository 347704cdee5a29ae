"""The AWS CLI of the local cloud's managed nodes, for what the documents ask of it:

    aws secretsmanager get-secret-value --secret-id ID --query SecretString --output text

(``documents/lib/dhchap.sh``, run as the documents' ``AwsCommand``). It calls the local cloud
with the node's environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``, the instance role's
credentials that ``ssm_commands`` hands to each invocation) and answers as the AWS CLI v2 does:

* the secret's ``SecretString`` and a newline on stdout, exit 0 (``None`` for a secret that has
  only a ``SecretBinary``, as ``--query SecretString --output text`` prints it);
* a service error: ``\\nAn error occurred (<Code>) when calling the GetSecretValue operation:
  <Message>\\n`` on stderr, exit 254;
* no credentials: ``\\nUnable to locate credentials. You can configure credentials by running
  "aws configure".\\n``, exit 253 (no region likewise: ``You must specify a region. …``);
* anything it does not answer (another command, option, query or output): a usage error, exit
  252; the endpoint unreachable or another client-side failure: exit 255.

(Return codes: "Command line return codes in the AWS CLI",
https://docs.aws.amazon.com/cli/latest/userguide/cli-usage-returncodes.html.) The same contract as
the document tests' stand-in, tests/fakes/aws. The local cloud has no instance metadata service:
the SDK is told not to look for one (``AWS_EC2_METADATA_DISABLED``), so a node without
credentials fails at once instead of calling 169.254.169.254. Run through the wrapper the local
cloud writes at start (``instance_roles.write_node_cli``). Imports no LocalStack module.

The request is Secrets Manager's JSON protocol signed with Signature Version 4 by the standard
library (``sigv4_headers``), not made with boto3: every configure-target and connect-path of an
array with DH-HMAC-CHAP (the default) runs this once or twice, and importing boto3 and building a
client took ten times the CPU of the rest of the call, on a machine the integration tier keeps
busy. The credentials come from the environment only (a node has no profile files); retries
follow the CLI's standard mode (3 attempts on a throttle, a 5xx or a failed connection).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import random
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

USAGE = 252
CONFIGURATION_ERROR = 253  # no credentials, no region
SERVICE_ERROR = 254
CLIENT_ERROR = 255
OPTIONS = ("--secret-id", "--query", "--output")
USAGE_TEXT = (
    "usage: aws [options] <command> <subcommand> [<subcommand> ...] [parameters]\n"
    "To see help text, you can run:\n\n"
    "  aws help\n  aws <command> help\n  aws <command> <subcommand> help\n\n"
)
NO_CREDENTIALS_TEXT = (
    'Unable to locate credentials. You can configure credentials by running "aws configure".'
)
NO_REGION_TEXT = 'You must specify a region. You can also configure your region by running "aws configure".'


def _options(argv: list[str]) -> dict[str, str] | str:
    """``--name value`` or ``--name=value`` pairs; an error text when they are not."""
    options: dict[str, str] = {}
    rest = list(argv)
    while rest:
        word = rest.pop(0)
        name, equals, value = word.partition("=")
        if name not in OPTIONS:
            return f"Unknown options: {word}"
        if not equals:
            if not rest:
                return f"argument {name}: expected one argument"
            value = rest.pop(0)
        options[name] = value
    return options


def get_secret_value(argv: list[str]) -> tuple[int, str, str]:
    options = _options(argv)
    if isinstance(options, str):
        return USAGE, "", f"{USAGE_TEXT}aws: error: {options}\n"
    if "--secret-id" not in options:
        return USAGE, "", f"{USAGE_TEXT}aws: error: the following arguments are required: --secret-id\n"
    if (options.get("--query"), options.get("--output")) != ("SecretString", "text"):
        return USAGE, "", "the local cloud's node aws answers --query SecretString --output text only\n"

    access_key, secret_key = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access_key or not secret_key:
        return CONFIGURATION_ERROR, "", f"\n{NO_CREDENTIALS_TEXT}\n"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        return CONFIGURATION_ERROR, "", f"\n{NO_REGION_TEXT}\n"
    endpoint = (
        os.environ.get("AWS_ENDPOINT_URL_SECRETS_MANAGER")
        or os.environ.get("AWS_ENDPOINT_URL")
        or f"https://secretsmanager.{region}.amazonaws.com"
    )
    body = json.dumps({"SecretId": options["--secret-id"]}).encode()
    credentials = (access_key, secret_key, os.environ.get("AWS_SESSION_TOKEN") or None)
    for attempt in range(RETRY_ATTEMPTS):
        status, reply = _post(endpoint, region, credentials, body)
        if status == 200:
            return 0, f"{reply.get('SecretString')}\n", ""
        if not _retryable(status, reply) or attempt == RETRY_ATTEMPTS - 1:
            break
        time.sleep(random.uniform(0, 2**attempt))  # noqa: S311 (the standard mode's backoff jitter)
    if status == 0:
        return CLIENT_ERROR, "", f'\nCould not connect to the endpoint URL: "{endpoint}/"\n'
    code = str(reply.get("__type", "Unknown")).rsplit("#", 1)[-1]
    message = reply.get("message") or reply.get("Message", "")
    return (
        SERVICE_ERROR,
        "",
        f"\nAn error occurred ({code}) when calling the GetSecretValue operation: {message}\n",
    )


RETRY_ATTEMPTS = 3
THROTTLES = {"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded"}


def _retryable(status: int, reply: dict[str, Any]) -> bool:
    code = str(reply.get("__type", "")).rsplit("#", 1)[-1]
    return status == 0 or status >= 500 or code in THROTTLES


def _post(
    endpoint: str, region: str, credentials: tuple[str, str, str | None], body: bytes
) -> tuple[int, dict[str, Any]]:
    """POST one GetSecretValue: (HTTP status, the JSON reply), (0, {}) when no connection."""
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme not in ("http", "https"):
        return 0, {}
    headers = {
        "Content-Type": "application/x-amz-json-1.1",
        "X-Amz-Target": "secretsmanager.GetSecretValue",
    }
    headers |= sigv4_headers(url.netloc, region, "secretsmanager", credentials, headers, body)
    request = urllib.request.Request(  # noqa: S310 (http or https only, checked above)
        f"{url.scheme}://{url.netloc}/", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (http or https only)
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        try:
            reply = json.loads(error.read() or b"{}")
        except ValueError:
            reply = {}
        header = error.headers.get("x-amzn-ErrorType", "")
        if header and "__type" not in reply:
            reply["__type"] = header.split(":", 1)[0]
        return error.code, reply
    except (urllib.error.URLError, OSError):
        return 0, {}


def sigv4_headers(
    host: str,
    region: str,
    service: str,
    credentials: tuple[str, str, str | None],
    headers: dict[str, str],
    body: bytes,
) -> dict[str, str]:
    """The headers that sign a POST to ``/`` with AWS Signature Version 4 ("Create a signed AWS
    API request", IAM User Guide): Host, X-Amz-Date, X-Amz-Security-Token, Authorization."""
    access_key, secret_key, token = credentials
    now = datetime.datetime.now(datetime.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    signed = {"host": host, "x-amz-date": stamp} | {k.lower(): v for k, v in headers.items()}
    if token:
        signed["x-amz-security-token"] = token
    names = ";".join(sorted(signed))
    canonical = "\n".join(
        ["POST", "/", "", *(f"{k}:{signed[k].strip()}" for k in sorted(signed)), "", names, _sha256(body)]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{_sha256(canonical.encode())}"
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    extra = {"Host": host, "X-Amz-Date": stamp}
    if token:
        extra["X-Amz-Security-Token"] = token
    extra["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={names}, Signature={signature}"
    )
    return extra


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str]) -> int:
    if argv[:2] == ["secretsmanager", "get-secret-value"]:
        code, out, err = get_secret_value(argv[2:])
    else:
        code, out, err = (
            USAGE,
            "",
            f"{USAGE_TEXT}the local cloud's node aws answers secretsmanager get-secret-value only: {argv}\n",
        )
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
