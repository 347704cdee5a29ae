"""``AWS_IAM`` authorization of REST API methods (SigV4), which community LocalStack does not enforce.

On AWS, a method whose ``authorizationType`` is ``AWS_IAM`` only runs its integration for a request
signed with Signature Version 4 for the ``execute-api`` service; otherwise API Gateway answers 403:

- no signature: ``{"message":"Missing Authentication Token"}`` (``MissingAuthenticationTokenException``);
- a signature that does not verify: ``{"message":"The request signature we calculated does not
  match the signature you provided. Check your AWS Secret Access Key and signing method. Consult
  the service documentation for details.\\n\\nThe Canonical String for this request should have
  been\\n'…'\\n\\nThe String-to-Sign should have been\\n'…'\\n"}`` (``InvalidSignatureException``);
- a timestamp more than 5 minutes away: ``Signature expired: <date> is now earlier than <now - 5
  min> (<now> - 5 min.)`` (``InvalidSignatureException``);
- a credential scoped to another service or region, or an ``Authorization`` header without its
  parts (``IncompleteSignatureException``).

Community LocalStack (2026.3) routes the request straight to the integration, so an unsigned call
reaches the Lambda. Its next-gen REST API invocation chain
(``localstack.services.apigateway.next_gen.execute_api``) has an extension point for exactly this:
``handlers.preprocess_request``, a ``CompositeHandler`` the ``RestApiGateway`` calls right after
routing (``context.resource_method`` is known) and before API-key validation, the integration
request and the integration. We append one handler to it at start (``on_infra_start``, see
``patches.py``); nothing of LocalStack is replaced.

The signature is recomputed with botocore's own ``SigV4Auth`` (the code every AWS SDK for Python
signs with) over the request as it arrived: method, raw path (LocalStack's path-style
``/restapis/<id>/<stage>/_user_request_/…`` included: the client signed that path), query string,
the headers named in ``SignedHeaders`` and the SHA-256 of the body. The local cloud has no IAM
secrets: every access key's secret is ``LOCAL_CLOUD_SECRET_KEY`` (``test``, the convention of the
Makefile, tests and LocalStack itself). IAM *policies* (``execute-api:Invoke``) are not evaluated.

On success the method's ``$context.identity`` carries the caller as on AWS (``accessKey``,
``accountId``, ``caller``, ``user``, ``userArn``), as the root of the access key's account.

A second gap feeds the first: importing an OpenAPI definition (``PutRestApi``/``ImportRestApi``,
which is how CloudFormation creates an ``AWS::ApiGateway::RestApi`` with a ``Body`` and so every
SAM ``AWS::Serverless::Api``) leaves ``authorizationType`` ``NONE`` on operations secured by a
``x-amazon-apigateway-authtype: awsSigv4`` scheme: LocalStack only maps schemes that carry an
``x-amazon-apigateway-authorizer``. On AWS such operations import as ``AWS_IAM`` (it is what SAM's
``Auth: DefaultAuthorizer: AWS_IAM`` generates). ``sigv4_security_imports_as_aws_iam`` wraps the
import to set it.

Pinned by tests/localcloud/test_apigateway_iam.py.
"""

from __future__ import annotations

import datetime
import logging
import re
from typing import Any
from urllib.parse import quote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from localstack.aws.accounts import get_account_id_from_access_key_id
from localstack.aws.api.apigateway import GatewayResponseType
from localstack.services.apigateway.next_gen.execute_api import handlers
from localstack.services.apigateway.next_gen.execute_api.gateway_response import (
    BaseGatewayException,
    InvalidSignatureError,
    MissingAuthTokenError,
)
from rolo.request import restore_payload

LOG = logging.getLogger(__name__)

LOCAL_CLOUD_SECRET_KEY = "test"  # noqa: S105 (a public convention, not a secret)
"""The secret access key of every access key on the local cloud (there is no IAM to hold secrets)."""
SIGNATURE_SKEW = datetime.timedelta(minutes=5)
"""How far the request's timestamp may be from the gateway's clock (API Gateway: 5 minutes)."""
SERVICE = "execute-api"
AMZ_DATE = "%Y%m%dT%H%M%SZ"

_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)
_PARAM = re.compile(r"(\w+)=([^,\s]*)")


class IncompleteSignatureError(BaseGatewayException):
    type = GatewayResponseType.INVALID_SIGNATURE
    code = "IncompleteSignatureException"


class IamAuthorizationHandler:
    """Refuses, as API Gateway does, a request to an ``AWS_IAM`` method that is not SigV4-signed
    for ``execute-api`` with a signature that verifies."""

    def __call__(self, chain: Any, context: Any, response: Any) -> None:
        method = context.resource_method or {}
        if method.get("authorizationType") != "AWS_IAM":
            return
        request = context.request
        authorization = request.headers.get("Authorization", "")
        if not authorization:
            raise MissingAuthTokenError("Missing Authentication Token")
        access_key = self._verify(context, request, authorization)
        self._set_identity(context, access_key)

    def _verify(self, context: Any, request: Any, authorization: str) -> str:
        algorithm, _, rest = authorization.strip().partition(" ")
        params = dict(_PARAM.findall(rest))
        missing = [
            f"Authorization header requires '{name}' parameter."
            for name in ("Credential", "Signature", "SignedHeaders")
            if name not in params
        ]
        amz_date = request.headers.get("X-Amz-Date", "")
        if not amz_date:
            missing.append(
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
            )
        if algorithm != "AWS4-HMAC-SHA256" or missing:
            missing.append(f"Authorization={authorization}")
            raise IncompleteSignatureError(" ".join(missing))

        scope = params["Credential"].split("/")
        if len(scope) != 5 or scope[4] != "aws4_request":
            raise IncompleteSignatureError(
                f"Credential should be scoped to a valid region. Credential={params['Credential']}"
            )
        access_key, date, region, service, _ = scope
        if service != SERVICE:
            raise IncompleteSignatureError(f"Credential should be scoped to correct service: '{SERVICE}'. ")
        if region != context.region:
            raise IncompleteSignatureError("Credential should be scoped to a valid region. ")

        try:
            timestamp = datetime.datetime.strptime(amz_date, AMZ_DATE).replace(tzinfo=datetime.UTC)
        except ValueError:
            raise IncompleteSignatureError(
                f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See "
                "http://en.wikipedia.org/wiki/ISO_8601"
            ) from None
        now = datetime.datetime.now(datetime.UTC)
        if timestamp < now - SIGNATURE_SKEW:
            raise InvalidSignatureError(
                f"Signature expired: {amz_date} is now earlier than "
                f"{(now - SIGNATURE_SKEW).strftime(AMZ_DATE)} ({now.strftime(AMZ_DATE)} - 5 min.)"
            )
        if timestamp > now + SIGNATURE_SKEW:
            raise InvalidSignatureError(
                f"Signature not yet current: {amz_date} is still later than "
                f"{(now + SIGNATURE_SKEW).strftime(AMZ_DATE)} ({now.strftime(AMZ_DATE)} + 5 min.)"
            )

        signed_headers = params["SignedHeaders"].split(";")
        signed_request = AWSRequest(
            method=request.method,
            url=self._url_as_sent(request),
            headers={name: ",".join(request.headers.getlist(name)) for name in signed_headers},
            data=restore_payload(request),
        )
        signed_request.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(access_key, LOCAL_CLOUD_SECRET_KEY), service, region)
        canonical_request = signer.canonical_request(signed_request)
        string_to_sign = signer.string_to_sign(signed_request, canonical_request)
        if date != amz_date[:8] or signer.signature(string_to_sign, signed_request) != params["Signature"]:
            LOG.info("execute-api: signature mismatch for %s %s", request.method, request.path)
            raise InvalidSignatureError(
                f"{_SIGNATURE_MISMATCH}\n\nThe Canonical String for this request should have been\n"
                f"'{canonical_request}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n"
            )
        return access_key

    @staticmethod
    def _url_as_sent(request: Any) -> str:
        """The URL as the client sent it: the raw (still percent-encoded) path and query string."""
        raw_uri = request.environ.get("RAW_URI") or quote(request.path)
        path, _, query = raw_uri.partition("?")
        if "://" in path:  # a proxied request's RAW_URI can be an absolute URI
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        query = query or request.environ.get("QUERY_STRING", "")
        host = request.headers.get("Host", "localhost")
        return f"http://{host}{path}" + (f"?{query}" if query else "")

    @staticmethod
    def _set_identity(context: Any, access_key: str) -> None:
        identity = (context.context_variables or {}).get("identity")
        if identity is None:
            return
        account_id = get_account_id_from_access_key_id(access_key)
        identity["accessKey"] = access_key
        identity["accountId"] = account_id
        identity["caller"] = account_id
        identity["user"] = account_id
        identity["userArn"] = f"arn:aws:iam::{account_id}:root"


iam_authorization_handler = IamAuthorizationHandler()


def enforce_iam_authorization() -> None:
    """Append the handler to the REST API invocation chain's ``preprocess_request`` and make
    OpenAPI ``awsSigv4`` security import as ``AWS_IAM`` (both idempotent)."""
    if iam_authorization_handler not in handlers.preprocess_request.handlers:
        handlers.preprocess_request.append(iam_authorization_handler)
    sigv4_security_imports_as_aws_iam()


def _sigv4_scheme_names(spec: dict[str, Any]) -> set[str]:
    schemes = spec.get("securityDefinitions") or spec.get("components", {}).get("securitySchemes", {}) or {}
    return {
        name
        for name, scheme in schemes.items()
        if isinstance(scheme, dict)
        and str(scheme.get("x-amazon-apigateway-authtype", "")).lower() == "awssigv4"
        and "x-amazon-apigateway-authorizer" not in scheme
    }


def _resource_paths(rest_api: Any) -> dict[str, Any]:
    """Each moto resource of the API by its full path (computed here: no backend lookups)."""
    resources = dict(rest_api.resources)

    def path(resource: Any) -> str:
        parent = resources.get(resource.parent_id) if resource.parent_id else None
        if parent is None:
            return "/"
        parent_path = path(parent)
        return ("" if parent_path == "/" else parent_path) + "/" + resource.path_part

    return {path(r): r for r in resources.values()}


def mark_sigv4_operations_aws_iam(rest_api: Any, spec: dict[str, Any]) -> None:
    """Set ``AWS_IAM`` on the imported methods whose OpenAPI operation (or the document's default
    ``security``) requires a ``awsSigv4`` scheme."""
    sigv4 = _sigv4_scheme_names(spec)
    if not sigv4:
        return
    paths: dict[str, Any] = spec.get("paths") or {}
    base_path = str(spec.get("basePath") or "").rstrip("/")
    for resource_path, resource in _resource_paths(rest_api).items():
        operations = paths.get(resource_path) or paths.get(resource_path.removeprefix(base_path) or "/") or {}
        for method_name, method in (resource.resource_methods or {}).items():
            key = "x-amazon-apigateway-any-method" if method_name == "ANY" else method_name.lower()
            operation = operations.get(key)
            if not isinstance(operation, dict):
                continue
            security = operation.get("security", spec.get("security")) or []
            if method.authorization_type in (None, "NONE") and any(
                name in sigv4 for requirement in security for name in requirement
            ):
                method.authorization_type = "AWS_IAM"


def sigv4_security_imports_as_aws_iam() -> None:
    from localstack.services.apigateway.legacy import provider

    original = provider.import_api_from_openapi_spec
    if getattr(original, "_vsa_sigv4", False):
        return

    def import_api_from_openapi_spec(
        rest_api: Any, context: Any, open_api_spec: dict[str, Any], mode: Any
    ) -> Any:
        result = original(rest_api, context=context, open_api_spec=open_api_spec, mode=mode)
        mark_sigv4_operations_aws_iam(result[0], open_api_spec)
        return result

    import_api_from_openapi_spec._vsa_sigv4 = True  # type: ignore[attr-defined]
    provider.import_api_from_openapi_spec = import_api_from_openapi_spec
