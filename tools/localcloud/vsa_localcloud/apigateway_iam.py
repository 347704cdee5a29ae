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
the headers named in ``SignedHeaders`` and the SHA-256 of the body, with the secret of the
access key that signed it (``ApiCaller``):

- an IAM user's access key (``CreateAccessKey``; LocalStack's IAM store keeps each key with its
  ``SecretAccessKey`` and indexes it in ``ACCESS_KEY_INDEX``): that key's secret; a key made
  ``Inactive`` is refused;
- session credentials (``AssumeRole``, ``GetSessionToken``; LocalStack's STS store): their secret,
  and the request must carry their ``X-Amz-Security-Token``; expired ones are refused;
- any other key (``test``, the operator's and the test suites' plain keys): the account's root,
  with ``LOCAL_CLOUD_SECRET_KEY`` (``test``, the convention of the Makefile, tests and LocalStack).

**Authorization** ("Control access for invoking an API", API Gateway developer guide,
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-control-access-using-iam-policies-to-invoke-api.html):
a signature that verifies is not enough; the caller needs ``execute-api:Invoke`` on
``arn:aws:execute-api:<region>:<account>:<api-id>/<stage>/<METHOD>/<resource-path>``, the path
being the request's own (path parameters as the segments sent; the root resource is ``…/GET/``).
An IAM user is authorized by its identity-based policies (inline, attached managed, and those of
its groups), a role session by its role's; the root stays unrestricted. If the REST API has a
resource policy (``execute-api:/…`` resources expanded to the API's ARN, as API Gateway does when
it saves one: "API Gateway resource policy examples"), its statements whose ``Principal`` names
the caller take part as "How API Gateway resource policies affect authorization workflow"
(https://docs.aws.amazon.com/apigateway/latest/developerguide/apigateway-authorization-flow.html)
says for IAM authentication: in the API's own account the caller is allowed when the identity
policies *or* the resource policy allow it, from another account only when both do, and an
explicit deny in either refuses. A resource policy that names the caller's *account* (``<id>`` or
``arn:aws:iam::<id>:root``) delegates to the account ("AWS JSON policy elements: Principal", IAM
user guide): its denies apply to every principal of the account, its allows need the identity
policies' allow too.

A refusal is API Gateway's 403 ``AccessDeniedException`` (LocalStack's ``AccessDeniedError``,
whose body is ``{"Message": …}`` with a capital M, as AWS answers it):
``User: <caller ARN> is not authorized to perform: execute-api:Invoke on resource: <API ARN>``,
``… with an explicit deny`` when a statement denies (the knowledge-center article "How do I
troubleshoot HTTP 403 errors from API Gateway?"). API Gateway masks the account in the resource
ARN but its last four digits (``arn:aws:execute-api:us-west-2:********2543:…``), so it is masked
here too. Each decision is logged with the statement that decided it (``IAM allow``/``IAM DENY``,
as ``iam_enforcement``), and follows its mode (``VSA_LOCALCLOUD_IAM``): ``record`` logs but never
refuses, ``off`` evaluates nothing. Not evaluated: permission boundaries, session policies, SCPs.
Federated-user sessions (``GetFederationToken``) have no identity policy here, so are refused.
LocalStack records every ``GetSessionToken`` session as the account's root (whoever asked for it),
so such a session is unrestricted here, where AWS would hold it to the requesting user's policies.

On success the method's ``$context.identity`` carries the caller as on AWS (``accessKey``,
``accountId``, ``caller``, ``user``, ``userArn``): the user's id and ARN, the role session's
``<role id>:<session>`` and ``assumed-role`` ARN, or the root of the access key's account.

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
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from localstack.aws.accounts import get_account_id_from_access_key_id
from localstack.aws.api.apigateway import GatewayResponseType
from localstack.services.apigateway.next_gen.execute_api import handlers
from localstack.services.apigateway.next_gen.execute_api.gateway_response import (
    AccessDeniedError,
    BaseGatewayException,
    ExpiredTokenError,
    InvalidSignatureError,
    MissingAuthTokenError,
)
from rolo.request import restore_payload

from vsa_localcloud import iam_enforcement, iam_policy

LOG = logging.getLogger(__name__)

LOCAL_CLOUD_SECRET_KEY = "test"  # noqa: S105 (a public convention, not a secret)
"""The secret access key of every access key on the local cloud (there is no IAM to hold secrets)."""
SIGNATURE_SKEW = datetime.timedelta(minutes=5)
"""How far the request's timestamp may be from the gateway's clock (API Gateway: 5 minutes)."""
SERVICE = "execute-api"
ACTION = "execute-api:Invoke"
AMZ_DATE = "%Y%m%dT%H%M%SZ"

_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)
_PARAM = re.compile(r"(\w+)=([^,\s]*)")


class IncompleteSignatureError(BaseGatewayException):
    type = GatewayResponseType.INVALID_SIGNATURE
    code = "IncompleteSignatureException"


class InvalidSecurityTokenError(BaseGatewayException):
    """An inactive access key, or session credentials without their session token (the
    knowledge-center table of API Gateway 403s: ``AccessDeniedException``, "The security token
    included in the request is invalid.")."""

    type = GatewayResponseType.ACCESS_DENIED
    code = "AccessDeniedException"


# --- who signed the request ----------------------------------------------------------------------


@dataclass(frozen=True)
class ApiCaller:
    """The principal behind an access key: the secret its signature verifies with and, unless it
    is the account's root, the identity-based policies that authorize it."""

    access_key: str
    account: str
    arn: str
    kind: str  # "Root" | "User" | "AssumedRole" | "FederatedUser"
    name: str  # the user's or the role's name; the account id for the root
    user_id: str
    secret: str
    session_token: str | None = None
    active: bool = True
    expired: bool = False
    role_arn: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    statements: tuple[iam_policy.Statement, ...] = ()

    @property
    def restricted(self) -> bool:
        return self.kind != "Root"

    def principal_arns(self) -> set[str]:
        """The ARNs a resource policy's ``Principal`` may name this caller by."""
        return {self.arn} | ({self.role_arn} if self.role_arn else set())


def _root(access_key: str, account: str, secret: str = LOCAL_CLOUD_SECRET_KEY, **kw: Any) -> ApiCaller:
    return ApiCaller(
        access_key, account, f"arn:aws:iam::{account}:root", "Root", account, account, secret, **kw
    )


def _statements(owner: str, entity: Any, store: Any) -> list[iam_policy.Statement]:
    """The inline and attached managed policies of a user, group or role entity of LocalStack's
    IAM store, labelled ``<owner>/<policy name>``."""
    statements: list[iam_policy.Statement] = []
    for name, raw in entity.inline_policies.items():
        statements += iam_policy.parse_policy(iam_enforcement._document(raw), f"{owner}/{name}")
    for arn in entity.attached_policy_arns:
        document = iam_enforcement._managed_policy(store, arn)
        if document is not None:
            statements += iam_policy.parse_policy(document, f"{owner}/{arn.rsplit('/', 1)[-1]}")
    return statements


def _user_caller(access_key: str) -> ApiCaller | None:
    """An IAM user's access key: the user's policies and those of its groups."""
    from localstack.services.iam.models import iam_stores

    account = get_account_id_from_access_key_id(access_key)
    store = iam_stores[account]["us-east-1"]
    user_name = store.ACCESS_KEY_INDEX.get(access_key)
    entity = store.USERS.get(user_name) if user_name else None
    key = entity.access_keys.get(access_key) if entity is not None else None
    if entity is None or key is None:
        return None
    statements = _statements(user_name, entity, store)
    for group in store.GROUPS.values():
        if user_name in group.member_user_names:
            statements += _statements(f"group {group.group['GroupName']}", group, store)
    user = entity.user
    return ApiCaller(
        access_key=access_key,
        account=account,
        arn=user["Arn"],
        kind="User",
        name=user_name,
        user_id=user["UserId"],
        secret=key.access_key["SecretAccessKey"],
        active=key.access_key.get("Status", "Active") == "Active",
        tags={t["Key"]: t["Value"] for t in user.get("Tags") or []},
        statements=tuple(statements),
    )


def _session_caller(access_key: str, request: Any) -> ApiCaller | None:
    """Session credentials (LocalStack's STS store): an assumed role is held to its role's policies
    (``iam_enforcement.identify``)."""
    from localstack.aws.accounts import DEFAULT_AWS_ACCOUNT_ID
    from localstack.services.sts.models import sts_stores

    creds = sts_stores[DEFAULT_AWS_ACCOUNT_ID]["us-east-1"].credentials.get(access_key)
    if creds is None:
        return None
    session = {
        "secret": creds.secret_access_key,
        "session_token": creds.session_token,
        "expired": bool(creds.is_expired()),
    }
    if ":assumed-role/" in creds.arn:
        role = iam_enforcement.identify(creds.account_id, request)
        return ApiCaller(
            access_key=access_key,
            account=creds.account_id,
            arn=creds.arn,
            kind="AssumedRole",
            name=role.role_name if role else creds.arn.split("/")[1],
            user_id=creds.user_id,
            role_arn=role.role_arn if role else None,
            tags=role.tags if role else {},
            statements=role.statements if role else (),
            **session,
        )
    if ":federated-user/" in creds.arn:
        name = creds.arn.rsplit("/", 1)[-1]
        return ApiCaller(
            access_key, creds.account_id, creds.arn, "FederatedUser", name, creds.user_id, **session
        )
    return _root(access_key, creds.account_id, **session)


def caller_for(access_key: str, request: Any) -> ApiCaller:
    """The principal behind ``access_key``: an IAM user, a session, or (any other key) the root of
    the account the key names."""
    return (
        _user_caller(access_key)
        or _session_caller(access_key, request)
        or _root(access_key, get_account_id_from_access_key_id(access_key))
    )


# --- what is asked, and the decision --------------------------------------------------------------


def invoke_arn(context: Any) -> str:
    """``arn:aws:execute-api:<region>:<account>:<api-id>/<stage>/<METHOD>/<resource-path>`` of the
    request: the path below the stage as sent (the root resource is ``…/GET/``)."""
    invocation = context.invocation_request or {}
    path = str(invocation.get("path") or "/")
    method = invocation.get("http_method") or context.request.method
    return (
        f"arn:aws:execute-api:{context.region}:{context.account_id}:{context.api_id}/"
        f"{context.stage}/{method}/{path.lstrip('/')}"
    )


def masked(arn: str) -> str:
    """The ARN with its account masked but the last four digits, as API Gateway's messages show it."""
    parts = arn.split(":", 5)
    if len(parts) == 6 and len(parts[4]) == 12:
        parts[4] = "********" + parts[4][-4:]
    return ":".join(parts)


def request_context(caller: ApiCaller, request: Any, region: str) -> dict[str, list[str]]:
    """The global condition keys of the request ("AWS global condition context keys"; the
    Region requested is the API's)."""
    now = datetime.datetime.now(datetime.UTC)
    context = {
        "aws:requestedregion": [region],
        "aws:principalarn": [caller.role_arn or caller.arn],
        "aws:principalaccount": [caller.account],
        "aws:principaltype": [caller.kind],
        "aws:userid": [caller.user_id],
        "aws:sourceip": [request.remote_addr or "127.0.0.1"],
        "aws:securetransport": [str(request.scheme == "https").lower()],
        "aws:currenttime": [now.strftime("%Y-%m-%dT%H:%M:%SZ")],
        "aws:epochtime": [str(int(now.timestamp()))],
    }
    if caller.kind == "User":
        context["aws:username"] = [caller.name]
    for key, value in caller.tags.items():
        context[f"aws:principaltag/{key.lower()}"] = [value]
    return context


def _policy_document(raw: str) -> Any:
    """A REST API's ``policy`` as GetRestApi returns it: JSON escaped as a JSON string's content
    (``{\\"Version\\":…}``); plain JSON is taken as well."""
    try:
        return json.loads(raw)
    except ValueError:
        return json.loads(json.loads(f'"{raw}"'))


def _expand(resources: Any, api_arn: str) -> Any:
    """``execute-api:/<stage>/<METHOD>/<path>`` → ``<API ARN>/<stage>/<METHOD>/<path>``."""
    if isinstance(resources, str):
        return (
            api_arn + resources.removeprefix("execute-api:")
            if resources.startswith("execute-api:/")
            else resources
        )
    if isinstance(resources, list):
        return [_expand(r, api_arn) for r in resources]
    return resources


def _account_principal(value: str) -> str | None:
    match = re.fullmatch(r"(\d{12})|arn:aws[\w-]*:iam::(\d{12}):root", value)
    return (match.group(1) or match.group(2)) if match else None


def principal_match(statement: Mapping[str, Any], caller: ApiCaller) -> str | None:
    """How a resource-policy statement's ``Principal``/``NotPrincipal`` names the caller:
    ``"direct"`` (``*``, or the caller's own ARN), ``"account"`` (the caller's account), or None."""
    negated = "NotPrincipal" in statement
    principal = statement.get("NotPrincipal" if negated else "Principal")
    if principal == "*":
        names: list[str] = ["*"]
    elif isinstance(principal, Mapping):
        raw = principal.get("AWS", [])
        names = [raw] if isinstance(raw, str) else list(raw)
    else:
        names = []
    if any(n == "*" or n in caller.principal_arns() for n in names):
        match: str | None = "direct"
    elif any(_account_principal(n) == caller.account for n in names):
        match = "account"
    else:
        match = None
    if negated:
        return None if match else "direct"
    return match


@dataclass(frozen=True)
class ResourcePolicy:
    """The statements of a REST API's resource policy that name the caller, by how they name it."""

    direct: tuple[iam_policy.Statement, ...]
    account: tuple[iam_policy.Statement, ...]

    @classmethod
    def of(cls, rest_api: Mapping[str, Any], caller: ApiCaller, api_arn: str) -> ResourcePolicy | None:
        raw = rest_api.get("policy")
        if not raw:
            return None
        document = _policy_document(raw) if isinstance(raw, str) else raw
        items = document.get("Statement", [])
        items = [items] if isinstance(items, Mapping) else list(items)
        expanded = [
            {
                **item,
                **{k: _expand(item[k], api_arn) for k in ("Resource", "NotResource") if k in item},
            }
            for item in items
        ]
        parsed = iam_policy.parse_policy({"Statement": expanded}, "resource policy")
        matches = [(principal_match(item, caller), st) for item, st in zip(expanded, parsed, strict=True)]
        return cls(
            tuple(st for match, st in matches if match == "direct"),
            tuple(st for match, st in matches if match == "account"),
        )


@dataclass(frozen=True)
class InvokeDecision:
    allowed: bool
    explicit_deny: bool
    decided_by: str


def decide(
    caller: ApiCaller,
    arn: str,
    keys: Mapping[str, list[str]],
    policy: ResourcePolicy | None,
    api_account: str,
) -> InvokeDecision:
    """``execute-api:Invoke`` for an IAM-authorized method, as "How API Gateway resource policies
    affect authorization workflow" (IAM authentication and resource policy) decides it."""
    resources = [(arn, keys)]
    identity = iam_policy.evaluate(caller.statements, ACTION, resources)
    if identity.reason == "explicit deny":
        return InvokeDecision(False, True, f"identity policy: {identity.describe()}")
    if policy is None:
        return InvokeDecision(identity.allowed, False, f"identity policy: {identity.describe()}")
    naming = iam_policy.evaluate(policy.direct + policy.account, ACTION, resources)
    if naming.reason == "explicit deny":
        return InvokeDecision(False, True, f"resource policy: {naming.describe()}")
    if caller.account != api_account:  # table B: both must allow
        allowed = identity.allowed and naming.allowed
        return InvokeDecision(
            allowed,
            False,
            f"identity policy: {identity.describe()}; resource policy: "
            f"{naming.describe()} (another account: both must allow)",
        )
    if identity.allowed:
        return InvokeDecision(True, False, f"identity policy: {identity.describe()}")
    direct = iam_policy.evaluate(policy.direct, ACTION, resources)
    return InvokeDecision(
        direct.allowed,
        False,
        f"resource policy: {direct.describe()}"
        if direct.allowed
        else "no identity-based or resource-based policy allows",
    )


class IamAuthorizationHandler:
    """Refuses, as API Gateway does, a request to an ``AWS_IAM`` method that is not SigV4-signed
    for ``execute-api`` with a signature that verifies, or whose caller no policy allows
    ``execute-api:Invoke`` on the method."""

    def __call__(self, chain: Any, context: Any, response: Any) -> None:
        method = context.resource_method or {}
        if method.get("authorizationType") != "AWS_IAM":
            return
        request = context.request
        authorization = request.headers.get("Authorization", "")
        if not authorization:
            raise MissingAuthTokenError("Missing Authentication Token")
        caller = self._verify(context, request, authorization)
        self._authorize(context, caller)
        self._set_identity(context, caller)

    @staticmethod
    def _authorize(context: Any, caller: ApiCaller) -> None:
        """Refuse, as API Gateway does, a caller no policy allows ``execute-api:Invoke`` on the
        method's ARN (the root is not restricted)."""
        mode = iam_enforcement.STATE["mode"]
        if not caller.restricted or mode == "off":
            return
        arn = invoke_arn(context)
        policy = ResourcePolicy.of(context.deployment.rest_api.rest_api, caller, arn.split("/", 1)[0])
        region = arn.split(":")[3]
        decision = decide(
            caller, arn, request_context(caller, context.request, region), policy, context.account_id
        )
        if decision.allowed:
            LOG.info("IAM allow %s %s on %s: %s", caller.arn, ACTION, arn, decision.decided_by)
            return
        LOG.warning(
            "IAM DENY %s %s on %s: %s%s",
            caller.arn,
            ACTION,
            arn,
            decision.decided_by,
            " (record mode: not refused)" if mode == "record" else "",
        )
        if mode == "record":
            return
        message = f"User: {caller.arn} is not authorized to perform: {ACTION} on resource: {masked(arn)}"
        raise AccessDeniedError(message + (" with an explicit deny" if decision.explicit_deny else ""))

    def _verify(self, context: Any, request: Any, authorization: str) -> ApiCaller:
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
        caller = caller_for(access_key, request)
        token = request.headers.get("X-Amz-Security-Token")
        if not caller.active or (caller.session_token is not None and token != caller.session_token):
            LOG.info("execute-api: invalid security token for access key %s", access_key)
            raise InvalidSecurityTokenError("The security token included in the request is invalid.")
        if caller.expired:
            raise ExpiredTokenError("The security token included in the request is expired")
        signer = SigV4Auth(Credentials(access_key, caller.secret), service, region)
        canonical_request = signer.canonical_request(signed_request)
        string_to_sign = signer.string_to_sign(signed_request, canonical_request)
        if date != amz_date[:8] or signer.signature(string_to_sign, signed_request) != params["Signature"]:
            LOG.info("execute-api: signature mismatch for %s %s", request.method, request.path)
            raise InvalidSignatureError(
                f"{_SIGNATURE_MISMATCH}\n\nThe Canonical String for this request should have been\n"
                f"'{canonical_request}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n"
            )
        return caller

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
    def _set_identity(context: Any, caller: ApiCaller) -> None:
        identity = (context.context_variables or {}).get("identity")
        if identity is None:
            return
        identity["accessKey"] = caller.access_key
        identity["accountId"] = caller.account
        identity["caller"] = caller.user_id
        identity["user"] = caller.user_id
        identity["userArn"] = caller.arn


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
        part: str = resource.path_part
        return ("" if parent_path == "/" else parent_path) + "/" + part

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
