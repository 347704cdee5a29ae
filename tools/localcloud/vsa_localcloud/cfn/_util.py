"""Helpers shared by the resource providers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from localstack.services.cloudformation.provider_utils import generate_default_name
from localstack.services.cloudformation.resource_provider import (
    OperationStatus,
    ProgressEvent,
    ResourceRequest,
)

Model = dict[str, Any]


def physical_name(request: ResourceRequest[Model], given: str | None, max_length: int = 63) -> str:
    """The name a resource gets when the template names none: CloudFormation's
    ``<stack>-<logical id>-<random>`` form."""
    if given:
        return given
    name: str = generate_default_name(request.stack_name, request.logical_resource_id)
    return name[:max_length]


def success(model: Model, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
    return ProgressEvent(
        status=OperationStatus.SUCCESS, resource_model=model, custom_context=request.custom_context
    )


def in_progress(model: Model, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
    return ProgressEvent(
        status=OperationStatus.IN_PROGRESS, resource_model=model, custom_context=request.custom_context
    )


def failed(message: str, code: str = "InvalidRequest") -> ProgressEvent[Model]:
    return ProgressEvent(status=OperationStatus.FAILED, resource_model={}, message=message, error_code=code)


def not_found(resource_type: str, identifier: str) -> ProgressEvent[Model]:
    return failed(
        f"Resource of type '{resource_type}' with identifier '{identifier}' was not found.", "NotFound"
    )


def unsupported_properties(
    resource_type: str, model: Mapping[str, Any], supported: Iterable[str]
) -> str | None:
    """A failure message naming the template properties this provider does not implement.

    A property silently dropped would make the local cloud differ from AWS without anyone
    noticing; failing the resource names the gap instead."""
    extra = sorted(set(model) - set(supported))
    if not extra:
        return None
    return f"{resource_type}: the local cloud does not implement the properties {', '.join(extra)}"


def present(model: Mapping[str, Any], keys: Iterable[str]) -> Model:
    """The entries of ``model`` named in ``keys`` whose values are set."""
    return {k: model[k] for k in keys if model.get(k) is not None}


def changed(before: Mapping[str, Any] | None, after: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    before = before or {}
    return [k for k in keys if before.get(k) != after.get(k)]


def tag_list(tags: Iterable[Mapping[str, Any]] | None) -> list[dict[str, str]]:
    return [{"Key": str(t["Key"]), "Value": str(t["Value"])} for t in tags or []]


def tag_diff(
    before: Iterable[Mapping[str, Any]] | None, after: Iterable[Mapping[str, Any]] | None
) -> tuple[dict[str, str], list[str]]:
    """(tags to set, keys to remove) turning ``before`` into ``after``."""
    old = {t["Key"]: t["Value"] for t in tag_list(before)}
    new = {t["Key"]: t["Value"] for t in tag_list(after)}
    to_set = {k: v for k, v in new.items() if old.get(k) != v}
    return to_set, [k for k in old if k not in new]


def is_true(value: Any) -> bool:
    """CloudFormation passes booleans from parameters and ``Fn::If`` as strings."""
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)
