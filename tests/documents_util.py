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
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ROOT / "documents"


def shell_name(parameter: str) -> str:
    """``TimeoutSeconds`` -> ``TIMEOUT_SECONDS``, ``BackupId`` -> ``BACKUP_ID``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", parameter).upper()


def load_document(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DOCUMENTS / f"{name}.yaml").read_text())
    return document


def render_script(name: str, values: Mapping[str, str], *, check_patterns: bool = True) -> str:
    """The script SSM would run for ``values`` (defaults for the parameters not given).

    With ``check_patterns`` (the default) a value its ``allowedPattern`` refuses raises
    ``ValueError``, as SSM refuses the command; without, the script's own checks are exercised.
    """
    parameters: dict[str, dict[str, str]] = load_document(name)["parameters"]
    unknown = sorted(set(values) - set(parameters))
    if unknown:
        raise ValueError(f"{name} has no parameter {', '.join(unknown)}")
    prologue = ["#!/bin/bash"]
    for parameter, spec in parameters.items():
        value = values.get(parameter, spec["default"])
        if check_patterns and not re.fullmatch(spec["allowedPattern"], value):
            raise ValueError(f"{name}: {parameter}={value!r} does not match {spec['allowedPattern']}")
        prologue.append(f"{shell_name(parameter)}='{value}'")
    body = (DOCUMENTS / f"{name}.sh").read_text()
    if body.startswith("#!"):
        body = body.split("\n", 1)[1]
    return "\n".join(prologue) + "\n" + body


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
    name: str, values: Mapping[str, str], directory: Path, *, timeout: float = 60, **kwargs: bool
) -> Run:
    """Run the rendered script as the SSM agent runs ``aws:runShellScript``: ``sh <file>`` (dash on
    Debian), in its own process group. A script that leaves a child holding stdout open hangs
    here and fails by ``timeout``: the watchdog must not keep the command's output open."""
    script = write_script(name, values, directory, **kwargs)
    done = subprocess.run(
        ["sh", str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr, parse_report(done.stdout))
