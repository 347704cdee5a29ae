"""The host documents' scripts, built exactly as tools/documents.py renders them into template.yaml.

A document is ``documents/<name>.yaml`` (description, SSM schema 2.2 ``parameters``, optionally
the command's ``timeoutSeconds`` and test ``examples``) plus ``documents/<name>.sh`` (the bash
body). The rendered script is ``#!/bin/bash``, then a prologue of one ``NAME='{{ Name }}'`` line
per parameter (NAME is the parameter's name in upper snake case), in the order the YAML declares
them, then the body (without a shebang of its own). SSM substitutes the values after checking
each against its ``allowedPattern``; ``render_script`` does both, so tests run the very text a
host would run.
"""

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.documents_tool import documents as tool

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ROOT / "documents"
shell_name = tool.variable
"""``TimeoutSeconds`` -> ``TIMEOUT_SECONDS``, ``BackupId`` -> ``BACKUP_ID``."""


def load_document(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DOCUMENTS / f"{name}.yaml").read_text())
    return document


def render_script(name: str, values: Mapping[str, str], *, check_patterns: bool = True) -> str:
    """The script SSM would run for ``values`` (defaults for the parameters not given), rendered by
    tools/documents.py itself (includes expanded).

    With ``check_patterns`` (the default) a value its ``allowedPattern`` refuses raises
    ``ValueError``, as SSM refuses the command; without, the script's own checks are exercised.
    """
    if check_patterns:
        return str(tool.render_script(name, dict(values)))
    document = tool.load(name)
    resolved = {k: values.get(k, spec.get("default", "")) for k, spec in document.parameters.items()}
    lines = tool.run_command(document)
    return "\n".join(tool.PLACEHOLDER.sub(lambda m: resolved[m[1]], line) for line in lines) + "\n"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any]


def parse_report(stdout: str) -> dict[str, Any]:
    """The JSON report: the last stdout line."""
    lines = stdout.strip().splitlines()
    assert lines, "no output on stdout"
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def write_script(name: str, values: Mapping[str, str], directory: Path, **kwargs: bool) -> Path:
    fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".sh", dir=directory)
    with os.fdopen(fd, "w") as handle:
        handle.write(render_script(name, values, **kwargs))
    return Path(path)


def run_document(
    name: str,
    values: Mapping[str, str],
    directory: Path,
    *,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    **kwargs: bool,
) -> Run:
    """Run the rendered script as the SSM agent runs ``aws:runShellScript``: ``sh <file>`` (dash on
    Debian), in its own process group. A script that leaves a child holding stdout open hangs
    here and fails by ``timeout``: the watchdog must not keep the command's output open.
    ``env`` replaces the environment (e.g. a PATH with a stand-in tool first)."""
    script = write_script(name, values, directory, **kwargs)
    done = subprocess.run(
        ["sh", str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
        check=False,
        env=None if env is None else dict(env),
    )
    return Run(done.returncode, done.stdout, done.stderr, parse_report(done.stdout))
