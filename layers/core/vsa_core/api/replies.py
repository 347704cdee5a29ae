"""What both REST APIs (arrays, backups) answer the same way, in one place (pure: no boto3).

- A body that cannot be JSON the API takes is refused before any route sees it: sent as other
  than application/json 415 (powertools would parse form and multipart bodies: multipart without
  a boundary raised, 502, found by the fuzz), not UTF-8 (or not base64 when API Gateway says it
  is) 400, larger than ``MAX_BODY_BYTES`` 413, nested deeper than ``MAX_JSON_DEPTH`` 400 (``json.loads``
  of a 100,000-deep body raises RecursionError, a non-UTF-8 one UnicodeDecodeError: the Lambda
  would fail and API Gateway answer 502), an object giving one key twice 400 naming the key and
  where it is (``json.loads`` keeps the last value silently, so what was stored could differ
  from what the caller read in its own body).
- A request that does not validate answers 422 ``{message, detail}``: ``message`` names each
  failing field and why, ``detail`` lists them (``loc``, ``msg``, ``type``). Powertools' own 422
  drops ``msg`` (it holds only ``loc`` and ``type``), so a caller never learned what to fix.
- Named domain errors answer ``{message}`` with their status (each API gives its mapping).
- ``responses`` gives each route's OpenAPI ``responses``: every status it can answer, with its
  body's schema.
"""

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

MAX_BODY_BYTES = 262_144
"""The largest body either API reads (413 beyond). An array spec is stored as one DynamoDB item,
which holds at most 400 KB (DynamoDB developer guide, "Service, account, and table quotas"):
256 KiB of JSON leaves room for the item's other attributes."""
MAX_JSON_DEPTH = 32
"""No request of either API nests deeper than 4 levels; 32 leaves room and stops a body nested
100,000 deep before ``json.loads`` recurses into it."""


class ErrorReply(BaseModel):
    """Every refusal: what is wrong and what to do about it."""

    message: str = Field(description="what is wrong and what to fix")


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="where: body, path, query or header, then the field's path")
    msg: str = Field(description="why the value is refused")
    type: str = Field(description="the kind of error (pydantic's error type)")


class ValidationReply(BaseModel):
    """422: the request does not validate; ``message`` joins every field's reason."""

    message: str = Field(description="every failing field and why, in one line")
    detail: list[FieldError]


_DESCRIPTIONS = {
    200: "done",
    201: "created",
    202: "accepted: a workflow does the rest",
    400: "the request cannot be done as given: the message says what to fix",
    404: "unknown array or backup set",
    409: "conflicts with the array's current state: the message says why and when to retry",
    413: f"the body is larger than {MAX_BODY_BYTES} bytes",
    415: "the body is not sent as application/json",
    422: "the request does not validate: every failing field and why",
    502: "AWS refused a step: the message gives its cause and whether anything was kept",
}


def responses(*statuses: int, ok: tuple[int, ...] = (200,)) -> dict[int, OpenAPIResponse]:
    """The OpenAPI ``responses`` of a route: its successes ``ok``, 400 (an unreadable body),
    413, 422 and the error ``statuses`` it maps, each with its body's schema (the success body's
    is the route's own return annotation, which powertools fills in)."""
    errors = sorted({400, 413, 415, 422, *statuses})
    answers: dict[int, OpenAPIResponse] = {status: {"description": _DESCRIPTIONS[status]} for status in ok}
    for status in errors:
        model = ValidationReply if status == 422 else ErrorReply
        answers[status] = {
            "description": _DESCRIPTIONS[status],
            "content": {content_types.APPLICATION_JSON: {"model": model}},
        }
    return answers


def _reply(status: int, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": json.dumps({"message": message, **extra}),
        "isBase64Encoded": False,
    }


def json_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest (brackets inside strings do not count),
    without parsing it: linear, no recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


class _Object(dict[str, Any]):
    """A JSON object as ``json.loads`` builds it with ``_pairs``: its keys given more than once
    kept aside (``json.loads`` gives an object's pairs only, not where the object is)."""

    twice: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    found = _Object(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        twice: list[str] = []
        for key, _ in pairs:
            if key in seen and key not in twice:
                twice.append(key)
            seen.add(key)
        found.twice = tuple(twice)
    return found


def _first_twice(value: Any, path: str) -> tuple[str, str] | None:
    """A key given twice in ``value`` and the path of the object holding it (``$``, ``$.backup``,
    ``$.volumes[1]``), or None: an object's own before those inside it, then in document order."""
    if isinstance(value, _Object):
        if value.twice:
            return value.twice[0], path
        items: Iterable[tuple[str, Any]] = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for inner_path, inner in items:
        found = _first_twice(inner, inner_path)
        if found is not None:
            return found
    return None


def duplicate_key(text: str) -> tuple[str, str] | None:
    """The first key some object of the JSON document ``text`` gives more than once, and the
    JSON path of that object; None when no key repeats or ``text`` is not JSON (the route's own
    parse then answers). Nests no deeper than the document, which ``screen`` has bounded."""
    try:
        document = json.loads(text, object_pairs_hook=_pairs)
    except ValueError:
        return None
    return _first_twice(document, "$")


def screen(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """A ready 400/413/415 answer for a body no route could read, or should not (a key given
    twice), else None."""
    body = event.get("body")
    if not body:
        return None
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type and media_type != "application/json":
        return _reply(
            415, f"the body is sent as {media_type[:100]!r}: send JSON with Content-Type: application/json"
        )
    raw: bytes
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(str(body), validate=True)
        except (binascii.Error, ValueError):
            return _reply(400, "the body is marked base64 but is not: send the JSON as UTF-8 text")
    else:
        raw = str(body).encode("utf-8", errors="surrogatepass")
    if len(raw) > MAX_BODY_BYTES:
        return _reply(413, f"the body is {len(raw)} bytes: the API reads at most {MAX_BODY_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return _reply(
            400, f"the body is not UTF-8 (byte {error.start} is not): send the JSON document as UTF-8 text"
        )
    if json_depth(text) > MAX_JSON_DEPTH:
        return _reply(
            400, f"the body's JSON nests deeper than {MAX_JSON_DEPTH} levels: no request of this API does"
        )
    twice = duplicate_key(text)
    if twice is not None:
        key, where = twice
        return _reply(
            400,
            f"the body gives key {key[:100]!r} more than once in the object at {where[:200]}: give each "
            "key once (JSON parsers disagree on which value counts, so none is taken)",
        )
    return None


def field_errors(error: RequestValidationError) -> list[dict[str, Any]]:
    """Each failing field: where (``loc``), why (``msg``, pydantic's "Value error, " prefix
    dropped: our validators' messages already say what to fix) and the error's type. The value
    itself is not echoed (it may be large, or be what an attacker wants reflected). A default
    that could not be worked out because another field failed (``perControllerIops`` from an
    invalid ``controllers``) is left out: that other field's error says what to fix."""
    found = []
    for item in error.errors():
        if item.get("type") == "default_factory_not_called":
            continue
        message = str(item.get("msg", ""))
        found.append(
            {
                "loc": [p if isinstance(p, int) else str(p) for p in item.get("loc", ())],
                "msg": message.removeprefix("Value error, "),
                "type": str(item.get("type", "")),
            }
        )
    return found


def _invalid(error: RequestValidationError) -> Response[dict[str, Any]]:
    detail = field_errors(error)
    reasons = "; ".join(f"{'.'.join(str(p) for p in d['loc'])}: {d['msg']}" for d in detail)
    return Response(
        status_code=HTTPStatus.UNPROCESSABLE_ENTITY,
        content_type=content_types.APPLICATION_JSON,
        body={"message": f"the request does not validate: {reasons}", "detail": detail},
    )


def install(app: APIGatewayRestResolver, errors: Iterable[tuple[type[Exception], int]]) -> None:
    """Register the 422 with messages and each named domain error's status on ``app`` (powertools'
    ``exception_handler`` is untyped, so it is called rather than used as a decorator)."""
    app.exception_handler(RequestValidationError)(_invalid)
    for error_type, status in errors:
        app.exception_handler(error_type)(
            lambda error, status=status: Response(
                status_code=status, content_type=content_types.APPLICATION_JSON, body={"message": str(error)}
            )
        )


def resolve(app: APIGatewayRestResolver, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """``app.resolve``, behind ``screen``."""
    refused = screen(event)
    if refused is not None:
        return refused
    return app.resolve(event, context)
