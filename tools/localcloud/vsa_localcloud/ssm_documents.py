"""SSM Command documents as the agent runs them: parameters validated and substituted, then the
``aws:runShellScript`` steps of schemaVersion 2.2 ``mainSteps`` (or 1.2 ``runtimeConfig``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml
from localstack.aws.api.ssm import InvalidDocument, InvalidParameters
from moto.ssm.models import ssm_backends

DEFAULT_EXECUTION_TIMEOUT = 3600
RUN_SHELL_SCRIPT = "aws:runShellScript"

# AWS-owned documents moto does not hold. The content is the public AWS-RunShellScript
# (schemaVersion 1.2: one aws:runShellScript plugin fed by the commands parameter).
AWS_RUN_SHELL_SCRIPT: dict[str, Any] = {
    "schemaVersion": "1.2",
    "description": "Run a shell script or specify the commands to run.",
    "parameters": {
        "commands": {"type": "StringList", "minItems": 1},
        "workingDirectory": {"type": "String", "default": "", "maxChars": 4096},
        "executionTimeout": {
            "type": "String",
            "default": "3600",
            "allowedPattern": (
                "([1-9][0-9]{0,4})|(1[0-6][0-9]{4})|(17[0-1][0-9]{3})|(172[0-7][0-9]{2})|(172800)"
            ),
        },
    },
    "runtimeConfig": {
        RUN_SHELL_SCRIPT: {
            "properties": [
                {
                    "id": "0.aws:runShellScript",
                    "runCommand": "{{ commands }}",
                    "workingDirectory": "{{ workingDirectory }}",
                    "timeoutSeconds": "{{ executionTimeout }}",
                }
            ]
        }
    },
}
BUILTIN = {"AWS-RunShellScript": AWS_RUN_SHELL_SCRIPT}
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}")


@dataclass(frozen=True)
class Step:
    """One plugin of a document: its name (the step name in 2.2, the action in 1.2)."""

    name: str
    action: str
    commands: list[str]
    working_directory: str
    timeout: int


@dataclass(frozen=True)
class Document:
    name: str
    version: str
    content: dict[str, Any]


def resolve(account_id: str, region: str, name: str, version: str | None) -> Document:
    """The document named in SendCommand (an ARN's last part is its name); InvalidDocument if unknown."""
    name = name.rsplit("/", 1)[-1] if name.startswith("arn:") else name
    if name in BUILTIN:
        return Document(name, "1", BUILTIN[name])
    try:
        documents = ssm_backends[account_id][region]._get_documents(name)
        # moto's find() knows $LATEST and numbers; $DEFAULT is its no-version default
        found = documents.find(None if version in (None, "", "$DEFAULT") else version)
    except Exception as error:
        raise InvalidDocument("The specified document does not exist.") from error
    if found.document_type != "Command":
        raise InvalidDocument(f"Document {name} is of type {found.document_type}, not Command.")
    content = found.content_json if isinstance(found.content_json, dict) else {}
    if not content:
        content = (
            json.loads(found.content) if found.document_format == "JSON" else yaml.safe_load(found.content)
        )
    return Document(name, str(found.document_version), content)


def parameters(document: Document, given: dict[str, list[str]] | None) -> dict[str, list[str]]:
    """Given parameters checked against the document's declarations, defaults filled in.
    InvalidParameters for an undeclared one, a missing required one, or a value that breaks
    the declaration (type, allowedValues, allowedPattern), as SendCommand checks them."""
    declared: dict[str, Any] = document.content.get("parameters") or {}
    given = dict(given or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise InvalidParameters(f"Parameters {unknown} are not defined in document {document.name}.")
    values: dict[str, list[str]] = {}
    for name, spec in declared.items():
        kind = spec.get("type", "String")
        if name in given:
            value = [str(item) for item in given[name]]
        elif "default" in spec:
            default = spec["default"]
            value = [str(item) for item in default] if isinstance(default, list) else [str(default)]
        else:
            raise InvalidParameters(
                f"Parameter {name} is required by document {document.name} but was not given."
            )
        if kind in ("String", "Integer", "Boolean") and len(value) != 1:
            raise InvalidParameters(f"Parameter {name} of type {kind} takes exactly one value.")
        if kind == "StringList" and len(value) < int(spec.get("minItems", 0)):
            raise InvalidParameters(f"Parameter {name} needs at least {spec['minItems']} items.")
        allowed = spec.get("allowedValues")
        pattern = spec.get("allowedPattern")
        for item in value:
            if allowed and item not in [str(a) for a in allowed]:
                raise InvalidParameters(f"Parameter {name} value {item!r} is not one of {allowed}.")
            if pattern and not re.fullmatch(pattern, item):
                raise InvalidParameters(f"Parameter {name} value {item!r} does not match {pattern}.")
        values[name] = value
    return values


def _substitute(text: str, values: dict[str, list[str]]) -> str:
    return PLACEHOLDER.sub(lambda m: "\n".join(values[m[1]]) if m[1] in values else m[0], text)


def _lines(raw: Any, values: dict[str, list[str]]) -> list[str]:
    """runCommand as script lines: an item that is only ``{{ list }}`` expands to the list's items
    (AWS-RunShellScript's ``"runCommand": "{{ commands }}"``); other placeholders are replaced
    by their value (list items joined by newlines)."""
    items = raw if isinstance(raw, list) else [raw]
    lines: list[str] = []
    for item in items:
        whole = PLACEHOLDER.fullmatch(str(item).strip())
        if whole and whole[1] in values:
            lines.extend(values[whole[1]])
        else:
            lines.append(_substitute(str(item), values))
    return lines


def _timeout(raw: Any, values: dict[str, list[str]]) -> int:
    text = _substitute(str(raw), values).strip() if raw not in (None, "") else ""
    return int(text) if text.isdigit() and int(text) > 0 else DEFAULT_EXECUTION_TIMEOUT


def steps(document: Document, values: dict[str, list[str]]) -> list[Step]:
    """The document's plugins in order, placeholders substituted."""
    content = document.content
    found: list[Step] = []
    if str(content.get("schemaVersion")) == "1.2":
        for action, block in (content.get("runtimeConfig") or {}).items():
            for props in block.get("properties") or []:
                found.append(
                    Step(
                        name=action,
                        action=action,
                        commands=_lines(props.get("runCommand", []), values),
                        working_directory=_substitute(str(props.get("workingDirectory", "")), values),
                        timeout=_timeout(props.get("timeoutSeconds"), values),
                    )
                )
        return found
    for step in content.get("mainSteps") or []:
        inputs = step.get("inputs") or {}
        found.append(
            Step(
                name=str(step.get("name", step.get("action"))),
                action=str(step.get("action")),
                commands=_lines(inputs.get("runCommand", []), values),
                working_directory=_substitute(str(inputs.get("workingDirectory", "")), values),
                timeout=_timeout(inputs.get("timeoutSeconds"), values),
            )
        )
    return found
