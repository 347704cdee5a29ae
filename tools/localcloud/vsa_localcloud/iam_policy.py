"""IAM identity-policy evaluation as AWS documents it, pure (no LocalStack, no I/O).

Used by ``iam_enforcement`` to authorize every role-signed request of the local cloud. What it
implements, with the AWS page each rule comes from:

* "Policy evaluation logic" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
  an explicit ``Deny`` in any statement wins; otherwise an ``Allow`` is needed; otherwise the
  request is implicitly denied. A request with several resources (AttachVolume: the instance and
  the volume) is allowed only when *every* resource is allowed.
* ``Action``/``NotAction`` (case-insensitive, ``*`` and ``?``), ``Resource``/``NotResource``
  (case-sensitive, ``*`` and ``?``), policy variables ``${aws:...}`` with defaults
  (``${aws:PrincipalTag/team, 'none'}``) and the special ``${*}``, ``${?}``, ``${$}``
  ("IAM policy elements: Variables and tags"); a variable that has no value makes its element
  not match.
* "IAM JSON policy elements: Condition operators": String*, Numeric*, Date*, Bool, BinaryEquals,
  IpAddress/NotIpAddress, Arn*, ``Null``, the ``...IfExists`` suffix, and the set operators
  ``ForAnyValue:``/``ForAllValues:``. Operators in one block are ANDed, keys within an operator are
  ANDed, the values of one key are ORed (and for a negated operator, NORed). A key absent from the
  request context makes a positive operator false and a negated one true; ``IfExists`` makes it
  true; ``ForAllValues`` over an absent key is true, ``ForAnyValue`` false.
  Condition *keys* are case-insensitive, values are not (except the ``IgnoreCase`` operators).

Context values are lists of strings (a single-valued key is a one-element list).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Context = Mapping[str, list[str]]
"""Condition keys (lower-cased) → values."""


class PolicyError(ValueError):
    """A policy AWS would refuse to store (unknown operator, bad shape)."""


@dataclass(frozen=True)
class Statement:
    policy: str  # where it comes from: "<role>/<policy name>"
    index: int
    sid: str | None
    effect: str
    actions: tuple[str, ...] | None
    not_actions: tuple[str, ...] | None
    resources: tuple[str, ...] | None
    not_resources: tuple[str, ...] | None
    condition: Mapping[str, Mapping[str, Any]]

    def describe(self) -> str:
        label = self.sid or f"#{self.index}"
        return f"{self.policy} statement {label} ({self.effect})"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # "allowed" | "explicit deny" | "no identity-based policy allows"
    statement: Statement | None = None
    per_resource: tuple[tuple[str, bool, str], ...] = field(default=())

    def describe(self) -> str:
        by = f" by {self.statement.describe()}" if self.statement else ""
        return f"{self.reason}{by}"


def _as_tuple(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PolicyError(f"expected a string or a list of strings, got {value!r}")


def parse_policy(document: str | Mapping[str, Any], name: str) -> list[Statement]:
    """The statements of one policy document (JSON text or a dict)."""
    doc = json.loads(document) if isinstance(document, str) else document
    raw = doc.get("Statement", [])
    if isinstance(raw, dict):
        raw = [raw]
    statements = []
    for index, item in enumerate(raw):
        effect = item.get("Effect")
        if effect not in ("Allow", "Deny"):
            raise PolicyError(f"{name} statement #{index}: Effect must be Allow or Deny, not {effect!r}")
        condition = item.get("Condition") or {}
        for operator in condition:
            _parse_operator(operator)  # refuses unknown operators at load, as IAM does
        statements.append(
            Statement(
                policy=name,
                index=index,
                sid=item.get("Sid"),
                effect=effect,
                actions=_as_tuple(item.get("Action")),
                not_actions=_as_tuple(item.get("NotAction")),
                resources=_as_tuple(item.get("Resource")),
                not_resources=_as_tuple(item.get("NotResource")),
                condition=condition,
            )
        )
    return statements


# --- wildcards and variables -------------------------------------------------------------------

_WILDCARD_CACHE: dict[tuple[str, bool], re.Pattern[str]] = {}


def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    key = (pattern, ignore_case)
    if key not in _WILDCARD_CACHE:
        flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
        _WILDCARD_CACHE[key] = re.compile(_wildcard_regex(pattern) + r"\Z", flags)
    return _WILDCARD_CACHE[key]


def wildcard_match(pattern: str, value: str, ignore_case: bool = False) -> bool:
    return _wildcard(pattern, ignore_case).match(value) is not None


_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_LITERAL = {"*": "*", "?": "?", "$": "$"}


def _variable_value(inner: str, context: Context) -> str | None:
    inner = inner.strip()
    if inner in _LITERAL:
        return _LITERAL[inner]
    key, _, default = inner.partition(",")
    values = context.get(key.strip().lower())
    if values:
        return values[0]
    default = default.strip()
    if len(default) >= 2 and default[0] == default[-1] == "'":
        return default[1:-1]
    return None


def substitute(text: str, context: Context) -> str | None:
    """Replace ``${...}`` policy variables; None when one has no value and no default."""
    pieces = []
    last = 0
    for match in _VARIABLE.finditer(text):
        value = _variable_value(match.group(1), context)
        if value is None:
            return None
        pieces.append(text[last : match.start()] + value)
        last = match.end()
    return "".join(pieces) + text[last:]


def _pattern_regex(pattern: str, context: Context) -> str | None:
    """A wildcard pattern with policy variables as a regex: the pattern's own ``*``/``?`` are
    wildcards, a variable's value (``${*}`` included) is literal."""
    parts = []
    last = 0
    for match in _VARIABLE.finditer(pattern):
        value = _variable_value(match.group(1), context)
        if value is None:
            return None
        parts.append(_wildcard_regex(pattern[last : match.start()]))
        parts.append(re.escape(value))
        last = match.end()
    parts.append(_wildcard_regex(pattern[last:]))
    return "".join(parts)


def _wildcard_regex(text: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)


def _pattern_match(pattern: str, value: str, context: Context, ignore_case: bool = False) -> bool:
    if "${" not in pattern:
        return wildcard_match(pattern, value, ignore_case)
    regex = _pattern_regex(pattern, context)
    if regex is None:
        return False
    return re.match(regex + r"\Z", value, re.DOTALL | (re.IGNORECASE if ignore_case else 0)) is not None


# --- conditions -----------------------------------------------------------------------------------

_STRING = {"StringEquals", "StringNotEquals", "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"}
_STRING_LIKE = {"StringLike", "StringNotLike"}
_NUMERIC = {
    "NumericEquals",
    "NumericNotEquals",
    "NumericLessThan",
    "NumericLessThanEquals",
    "NumericGreaterThan",
    "NumericGreaterThanEquals",
}
_DATE = {n.replace("Numeric", "Date") for n in _NUMERIC}
_ARN = {"ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike"}
_OTHER = {"Bool", "BinaryEquals", "IpAddress", "NotIpAddress", "Null"}
OPERATORS = _STRING | _STRING_LIKE | _NUMERIC | _DATE | _ARN | _OTHER
NEGATED = {
    "StringNotEquals",
    "StringNotEqualsIgnoreCase",
    "StringNotLike",
    "NumericNotEquals",
    "DateNotEquals",
    "ArnNotEquals",
    "ArnNotLike",
    "NotIpAddress",
}


@dataclass(frozen=True)
class Operator:
    base: str
    if_exists: bool
    set_operator: str | None  # "ForAnyValue" | "ForAllValues" | None


def _parse_operator(name: str) -> Operator:
    set_operator = None
    for prefix in ("ForAnyValue:", "ForAllValues:"):
        if name.startswith(prefix):
            set_operator, name = prefix[:-1], name[len(prefix) :]
    if_exists = name.endswith("IfExists") and name != "Null"
    base = name[: -len("IfExists")] if if_exists else name
    if base not in OPERATORS:
        raise PolicyError(f"unknown condition operator {name!r}")
    return Operator(base, if_exists, set_operator)


def _number(text: str) -> float:
    return float(text)


def _date(text: str) -> float:
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        return float(text)
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def _compare(kind: str, op: str, actual: float, wanted: float) -> bool:
    suffix = op[len(kind) :]
    return {
        "Equals": actual == wanted,
        "NotEquals": actual == wanted,  # the negation is applied by the caller
        "LessThan": actual < wanted,
        "LessThanEquals": actual <= wanted,
        "GreaterThan": actual > wanted,
        "GreaterThanEquals": actual >= wanted,
    }[suffix]


def _positive_match(base: str, actual: str, wanted: str, context: Context) -> bool:
    """Whether one context value matches one policy value under the operator's positive form."""
    try:
        if base in ("StringEquals", "StringNotEquals"):
            resolved = substitute(wanted, context)
            return resolved is not None and actual == resolved
        if base in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
            resolved = substitute(wanted, context)
            return resolved is not None and actual.lower() == resolved.lower()
        if base in _STRING_LIKE or base in ("ArnLike", "ArnNotLike", "ArnEquals", "ArnNotEquals"):
            return _pattern_match(wanted, actual, context)
        if base in _NUMERIC:
            return _compare("Numeric", base, _number(actual), _number(wanted))
        if base in _DATE:
            return _compare("Date", base, _date(actual), _date(wanted))
        if base == "Bool":
            return actual.lower() == str(wanted).lower()
        if base == "BinaryEquals":
            return actual == wanted
        if base in ("IpAddress", "NotIpAddress"):
            return ipaddress.ip_address(actual) in ipaddress.ip_network(wanted, strict=False)
    except (ValueError, TypeError):
        return False
    raise PolicyError(f"unsupported operator {base}")


def _value_matches(op: Operator, actual: str, wanted: list[str], context: Context) -> bool:
    hit = any(_positive_match(op.base, actual, w, context) for w in wanted)
    return not hit if op.base in NEGATED else hit


def condition_matches(operator_name: str, key: str, wanted_raw: Any, context: Context) -> bool:
    op = _parse_operator(operator_name)
    wanted = [
        str(v).lower() if isinstance(v, bool) else str(v)
        for v in (wanted_raw if isinstance(wanted_raw, list) else [wanted_raw])
    ]
    values = context.get(key.lower())
    present = values is not None and len(values) > 0
    if op.base == "Null":
        # "Null": true means the key must be absent; false, present.
        return any((w.lower() == "true") == (not present) for w in wanted)
    if not present:
        if op.if_exists or op.set_operator == "ForAllValues":
            return True
        if op.set_operator == "ForAnyValue":
            return False
        return op.base in NEGATED
    assert values is not None
    if op.set_operator == "ForAllValues":
        return all(_value_matches(op, v, wanted, context) for v in values)
    if op.set_operator == "ForAnyValue":
        return any(_value_matches(op, v, wanted, context) for v in values)
    # A single-valued operator on a (rarely) multi-valued key: any value may satisfy it.
    return any(_value_matches(op, v, wanted, context) for v in values)


def conditions_match(block: Mapping[str, Mapping[str, Any]], context: Context) -> bool:
    return all(
        condition_matches(operator, key, wanted, context)
        for operator, keys in block.items()
        for key, wanted in keys.items()
    )


# --- statements and decisions -------------------------------------------------------------------


def _action_matches(statement: Statement, action: str) -> bool:
    if statement.actions is not None:
        return any(wildcard_match(p, action, ignore_case=True) for p in statement.actions)
    if statement.not_actions is not None:
        return not any(wildcard_match(p, action, ignore_case=True) for p in statement.not_actions)
    return False


def _resource_matches(statement: Statement, resource: str, context: Context) -> bool:
    if statement.resources is not None:
        return any(_pattern_match(p, resource, context) for p in statement.resources)
    if statement.not_resources is not None:
        return not any(_pattern_match(p, resource, context) for p in statement.not_resources)
    return False


def applies(statement: Statement, action: str, resource: str, context: Context) -> bool:
    return (
        _action_matches(statement, action)
        and _resource_matches(statement, resource, context)
        and conditions_match(statement.condition, context)
    )


def evaluate(
    statements: Iterable[Statement],
    action: str,
    resources: Iterable[tuple[str, Context]],
) -> Decision:
    """Authorize ``action`` on every (resource ARN, its request context) pair."""
    statements = list(statements)
    per_resource: list[tuple[str, bool, str]] = []
    deciding: Statement | None = None
    for resource, context in resources:
        allow: Statement | None = None
        for statement in statements:
            if not applies(statement, action, resource, context):
                continue
            if statement.effect == "Deny":
                per_resource.append((resource, False, "explicit deny"))
                return Decision(False, "explicit deny", statement, tuple(per_resource))
            allow = allow or statement
        if allow is None:
            per_resource.append((resource, False, "no identity-based policy allows"))
            return Decision(False, "no identity-based policy allows", None, tuple(per_resource))
        per_resource.append((resource, True, allow.describe()))
        deciding = deciding or allow
    return Decision(True, "allowed", deciding, tuple(per_resource))
