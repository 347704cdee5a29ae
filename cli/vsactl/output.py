"""What every command shares: ``-o table|json|yaml`` and the question a destructive command asks.

``-o json`` and ``-o yaml`` print the API's answer whole (``vsactl get ID -o yaml`` is a document
``vsactl apply -f`` takes back); ``table`` is for people and may change. A list whose rows have
more to say than a terminal holds also takes ``-o wide``, as kubectl's lists do.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from .client import CliError, ExitCode


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[
    Output,
    typer.Option("--output", "-o", help="table (default, for people), json or yaml (the API's answer)"),
]


class ListOutput(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


ListOutputOption = Annotated[
    ListOutput,
    typer.Option(
        "--output",
        "-o",
        help="table (default, for people), wide (more columns), json or yaml (the API's answer)",
    ),
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


def emit(console: Console, payload: Any, output: str) -> bool:
    """Print ``payload`` as JSON or YAML when asked (``output`` an ``Output`` or ``ListOutput``);
    False for ``table`` and ``wide`` (the caller draws them)."""
    if output == Output.json:
        console.print_json(json.dumps(payload, default=str))
        return True
    if output == Output.yaml:
        text = yaml.safe_dump(payload, sort_keys=False, default_flow_style=False, allow_unicode=True)
        console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
        return True
    return False


def confirm(question: str, yes: bool, *, stdin_taken: bool = False) -> None:
    """Ask ``question`` on the terminal unless ``--yes``; raise CliError unless answered yes.

    When stdin carries the input (``-f -``) nothing can be asked: the command is refused and
    told to pass --yes, as terraform refuses an apply without -auto-approve when it cannot ask."""
    if yes:
        return
    if stdin_taken:
        raise CliError(f"{question} Cannot ask: stdin carries the spec; pass --yes", ExitCode.BAD_INPUT)
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except typer.Abort as e:  # no answer (stdin closed)
        raise CliError(f"{question} Not answered: pass --yes to go on without asking", ExitCode.FAILED) from e
    if not agreed:
        raise CliError("nothing done (not confirmed)", ExitCode.FAILED)
