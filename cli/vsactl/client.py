"""The REST API client: endpoint resolution, SigV4 signing (botocore), HTTP (requests), errors.

The API is an API Gateway REST API with ``AWS_IAM`` authorization, so every request is signed
for the ``execute-api`` service with the caller's credentials, exactly as the AWS CLI would sign
them (botocore's ``SigV4Auth``; nothing hand-rolled).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import boto3
import botocore.exceptions
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config

STACK_NAME = "vsa-control-plane"
"""The CloudFormation stack whose outputs ``ApiUrl`` / ``ApiId`` locate the API."""
DEFAULT_STAGE = "v1"
SIGNING_SERVICE = "execute-api"
TIMEOUT_SECONDS = 60.0
READ_ATTEMPTS = 3
"""A GET, or an array's DELETE, answered 429, 502, 503 or 504 is asked again, up to this many
times in all, after ``RETRY_DELAYS``: a read changes nothing and a second DELETE of an array
answers the deletion under way, so repeating them is safe, and API Gateway's 504 (a cold function
past its 29 s on a busy account, say) or a throttle is often gone on the next try. A PUT is never
repeated here: after a 504 docs/operations.md says what to do (apply the same spec again); a
backup set's DELETE is done when it answers, so a repeat after a lost answer would say 404."""
_ARRAY_PATH = re.compile(r"^/arrays/[^/]+$")
RETRY_DELAYS = (1.0, 2.0)
RETRIED = frozenset({429, 502, 503, 504})
KEYED_DELAYS = (2.0, 4.0, 8.0, 16.0)
"""A POST carrying an ``Idempotency-Key`` is done once per key by the API, so it is asked again
(the same key, the same body) after each of these. They add up to more than an API function's
own timeout (at most API Gateway's 29 s, tests/infra/test_api_timeouts.py): a first request the
504 cut off has then ended, and its key is either answered or free again."""
IN_PROGRESS = 409
"""The API's answer, with ``Retry-After``, while the first request with the same key still runs;
repeated only for a keyed POST (any other 409 is a conflict the caller must resolve)."""
# One quick retry: an unreachable endpoint should be reported in seconds, not after backoffs.
_LOOKUP_CONFIG = Config(retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=5)
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
_EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class ExitCode(IntEnum):
    """vsactl's exit codes (docs/cli.md): a script can tell these apart."""

    OK = 0
    FAILED = 1
    """the API could not be reached, it failed (5xx), or a followed workflow failed"""
    BAD_INPUT = 2
    """the command line or its input file is wrong, or the API answered 400/422 (the message says what)"""
    REFUSED = 3
    """the API understood and refused: 401/403 (credentials, IAM), 409/412 (a conflict, a stale version),
    429 (throttled)"""
    NOT_FOUND = 4
    """the array, backup set or path does not exist (404)"""
    TIMED_OUT = 5
    """--wait gave up at its --timeout, the API did not answer in time, or API Gateway answered 504"""


def exit_code_for(status: int) -> ExitCode:
    """The exit code of an HTTP error status."""
    if status in (400, 422):
        return ExitCode.BAD_INPUT
    if status == 404:
        return ExitCode.NOT_FOUND
    if status == 504:
        return ExitCode.TIMED_OUT
    if 400 <= status < 500:
        return ExitCode.REFUSED
    return ExitCode.FAILED


class CliError(Exception):
    """An error shown to the user as is, with the process exit code."""

    def __init__(self, message: str, exit_code: int = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class ApiError(CliError):
    """The API answered with an HTTP error; ``message`` is what the API says to fix."""

    def __init__(
        self,
        status: int,
        message: str,
        body: Any,
        method: str = "",
        attempts: int = 1,
        key: str | None = None,
    ) -> None:
        super().__init__(message, exit_code=exit_code_for(status))
        self.status = status
        self.body = body
        self.method = method
        self.attempts = attempts
        self.key = key
        """the request's Idempotency-Key, if it carried one"""


def retry_delays(method: str, path: str, headers: dict[str, str]) -> tuple[float, ...]:
    """The pauses before each repeat of a request answered ``RETRIED`` (or, for a keyed POST,
    ``IN_PROGRESS`` with ``Retry-After``): empty for a request that may not be sent again as is."""
    if method == "GET" or (method == "DELETE" and _ARRAY_PATH.match(path) is not None):
        return tuple(RETRY_DELAYS[min(i, len(RETRY_DELAYS) - 1)] for i in range(READ_ATTEMPTS - 1))
    if method == "POST" and any(k.lower() == "idempotency-key" for k in headers):
        return KEYED_DELAYS
    return ()


def worth_repeating(method: str, status: int, reply_headers: Mapping[str, str]) -> bool:
    """Whether an answer is one a repeatable request is asked again for."""
    if status in RETRIED:
        return True
    return method == "POST" and status == IN_PROGRESS and "retry-after" in {k.lower() for k in reply_headers}


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in _LOCAL_HOSTS


def _unreachable(endpoint: str, reason: object, what: str = "the API") -> CliError:
    if is_local(endpoint):
        return CliError(
            f"cannot reach {what} at {endpoint}: is the local cloud running (make localcloud-start)?"
        )
    return CliError(f"cannot reach {what} at {endpoint}: {reason}")


def _cfn_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_CLOUDFORMATION") or os.environ.get("AWS_ENDPOINT_URL")


@dataclass
class Settings:
    """The global options, as given on the command line (or from the environment)."""

    endpoint: str | None = None
    profile: str | None = None
    region: str | None = None
    stack: str = STACK_NAME


class ApiClient:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        try:
            self.session = boto3.Session(profile_name=settings.profile, region_name=settings.region)
        except botocore.exceptions.ProfileNotFound as e:
            raise CliError(
                f"{e}: pass an existing --profile (see ~/.aws/config)", exit_code=ExitCode.BAD_INPUT
            ) from e
        self._endpoint: str | None = settings.endpoint.rstrip("/") if settings.endpoint else None

    # -- endpoint ---------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        if self._endpoint is None:
            self._endpoint = self._endpoint_from_stack()
        return self._endpoint

    def stack_outputs(self) -> dict[str, str]:
        """The control plane stack's outputs (ApiUrl, ApiId, Version…), from CloudFormation."""
        stack = self.settings.stack
        try:
            cfn = self.aws_client("cloudformation", config=_LOOKUP_CONFIG)
            stacks = cfn.describe_stacks(StackName=stack)["Stacks"]
        except botocore.exceptions.EndpointConnectionError as e:
            where = _cfn_endpoint() or str(e.kwargs.get("endpoint_url", ""))
            raise _unreachable(where, e, what=f"CloudFormation (to find stack {stack})") from e
        except botocore.exceptions.NoCredentialsError as e:
            raise self._no_credentials() from e
        except botocore.exceptions.ClientError as e:
            message = e.response.get("Error", {}).get("Message", str(e))
            raise CliError(
                f"cannot find the API: stack {stack} ({message}); deploy it (make deploy-local) "
                "or pass --endpoint / set VSA_API_URL"
            ) from e
        return {o["OutputKey"]: o.get("OutputValue", "") for o in stacks[0].get("Outputs", [])}

    def aws_client(self, service: str, config: Config | None = None) -> Any:
        """A boto3 client of the caller's session and region (``AWS_ENDPOINT_URL`` honoured)."""
        return self.session.client(service, region_name=self._region(), config=config)  # type: ignore[call-overload]

    def _endpoint_from_stack(self) -> str:
        stack = self.settings.stack
        cfn_endpoint = _cfn_endpoint()
        outputs = self.stack_outputs()
        api_url = outputs.get("ApiUrl", "")
        if cfn_endpoint and is_local(cfn_endpoint):
            # The local cloud serves REST APIs at LocalStack's path-style invoke URL; the stack's
            # ApiUrl names the AWS host, which does not resolve here.
            api_id = outputs.get("ApiId")
            if not api_id:
                raise CliError(f"stack {stack} has no output ApiId: redeploy it, or pass --endpoint")
            stage = urlsplit(api_url).path.strip("/") or DEFAULT_STAGE
            return f"{cfn_endpoint.rstrip('/')}/restapis/{api_id}/{stage}/_user_request_"
        if not api_url:
            raise CliError(f"stack {stack} has no output ApiUrl: redeploy it, or pass --endpoint")
        return api_url.rstrip("/")

    # -- signing ----------------------------------------------------------------------------------

    def _region(self) -> str:
        region = self.settings.region or self.session.region_name
        if not region:
            raise CliError(
                "no AWS region: pass --region or set AWS_DEFAULT_REGION", exit_code=ExitCode.BAD_INPUT
            )
        return region

    def _signing_region(self) -> str:
        # An execute-api host names its region; a signature scoped to another one is refused.
        match = _EXECUTE_API_HOST.match(urlsplit(self.endpoint).hostname or "")
        return match.group(1) if match else self._region()

    def _no_credentials(self) -> CliError:
        return CliError(
            "no AWS credentials found: configure them (aws configure, AWS_PROFILE, or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
        )

    # -- requests ---------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send a signed request to ``<endpoint><path>`` and return the decoded JSON answer.

        Raises ``ApiError`` for an HTTP error and ``CliError`` when the API cannot be reached.
        """
        url = self.endpoint + quote(path, safe="/")
        if query:
            url += "?" + urlencode(query)
        data = json.dumps(body, default=str).encode() if body is not None else None
        request_headers = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            request_headers["Content-Type"] = "application/json"
        delays = retry_delays(method, path, request_headers)
        attempt = 1
        while True:
            status, payload, reply_headers = self._send(method, url, data, request_headers)
            if attempt > len(delays) or not worth_repeating(method, status, reply_headers):
                break
            time.sleep(delays[attempt - 1])
            attempt += 1
        if status >= 400:
            key = next((v for k, v in request_headers.items() if k.lower() == "idempotency-key"), None)
            raise ApiError(status, error_message(status, payload), payload, method, attempt, key)
        return payload

    def _send(
        self, method: str, url: str, data: bytes | None, request_headers: dict[str, str]
    ) -> tuple[int, Any, Mapping[str, str]]:
        """One signed request (signed anew: a signature holds its time): the status, the
        decoded answer and the answer's headers."""
        credentials = self.session.get_credentials()
        if credentials is None:
            raise self._no_credentials()
        aws_request = AWSRequest(method=method, url=url, data=data, headers=request_headers)
        SigV4Auth(credentials.get_frozen_credentials(), SIGNING_SERVICE, self._signing_region()).add_auth(
            aws_request
        )
        prepared = aws_request.prepare()
        try:
            response = requests.request(
                method,
                prepared.url,
                headers=dict(prepared.headers.items()),
                data=prepared.body,
                timeout=TIMEOUT_SECONDS,
            )
        except requests.ConnectionError as e:
            raise _unreachable(self.endpoint, e) from e
        except requests.Timeout as e:
            raise CliError(
                f"the API at {self.endpoint} did not answer within {TIMEOUT_SECONDS:.0f} s",
                ExitCode.TIMED_OUT,
            ) from e
        try:
            payload: Any = response.json() if response.content else None
        except ValueError:
            payload = response.text
        return response.status_code, payload, response.headers


def error_message(status: int, payload: Any) -> str:
    """What the API says to fix, from its error body (``message``, or a validation ``detail``)."""
    if isinstance(payload, dict):
        parts: list[str] = []
        message = payload.get("message") or payload.get("Message")
        if message:
            parts.append(str(message))
        detail = payload.get("detail")
        if isinstance(detail, list):
            parts.extend(_detail_line(d) for d in detail)
        elif detail:
            parts.append(str(detail))
        if parts:
            return "\n".join(parts)
    if isinstance(payload, str) and payload.strip():
        return payload.strip()
    return f"HTTP {status}"


def _detail_line(detail: Any) -> str:
    if not isinstance(detail, dict):
        return f"  - {detail}"
    loc = detail.get("loc") or []
    where = ".".join(str(p) for p in loc if p != "body") if isinstance(loc, list) else str(loc)
    what = detail.get("msg") or detail.get("type") or json.dumps(detail)
    return f"  - {where}: {what}" if where else f"  - {what}"
