"""Render the SSM Command documents of documents/ into template.yaml (or check that it is current).

python tools/documents.py           rewrite the marked SSM blocks of template.yaml
python tools/documents.py --check   exit 1 if template.yaml is not what documents/ renders

A document is two files:

* ``documents/<name>.yaml``: ``description``, ``parameters`` (SSM schema 2.2: every one a
  String with a ``description``, an ``allowedPattern`` and, if optional, a ``default``),
  optionally ``timeoutSeconds`` (default 600) and ``examples`` (a valid value per parameter
  that has no non-empty default; tests only, not rendered);
* ``documents/<name>.sh``: the bash script (a line ``# vsa:include lib/<file>.sh`` takes in a
  file of documents/lib/, shared by several documents; a line ``# vsa:python NAME lib/<file>.py``
  assigns the Python program of documents/lib/<file>.py, whole, to the shell variable NAME through
  a quoted here-document, which the script runs as ``python3 -c "$NAME" ...``: the node's system
  python3, standard library only, keeps stdin for the program's input, and the rendered document
  stays self-contained). It reads each parameter from a shell variable,
  upper snake case of the parameter's name (``ArrayId`` -> ``ARRAY_ID``), which the rendered
  document assigns first: ``ARRAY_ID='{{ ArrayId }}'``. SSM substitutes ``{{ Name }}`` textually,
  so the allowedPattern is what keeps a value inside its quotes: every pattern must refuse a
  quote, ``;``, ``$(``, a backtick and a newline (``tests/infra/test_documents.py``).

Each becomes an ``AWS::SSM::Document`` (``<Name>Document``, named ``<stack>-<name>``) between
the ``# BEGIN SSM DOCUMENTS`` / ``# END SSM DOCUMENTS`` lines of the Resources section, and an
output ``<Name>DocumentName`` between ``# BEGIN SSM DOCUMENT OUTPUTS`` / ``# END SSM DOCUMENT
OUTPUTS`` in the Outputs section. ``render_script(name, values)`` gives the script exactly as
the SSM agent would run it (for tests that run a document without Run Command).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ROOT / "documents"
TEMPLATE = ROOT / "template.yaml"
DEFAULT_TIMEOUT_SECONDS = 600
BLOCKS = {
    "resources": ("# BEGIN SSM DOCUMENTS", "# END SSM DOCUMENTS"),
    "outputs": ("# BEGIN SSM DOCUMENT OUTPUTS", "# END SSM DOCUMENT OUTPUTS"),
}
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}")
PARAMETER_KEYS = ("type", "description", "default", "allowedPattern")
INCLUDE = re.compile(r"^# vsa:include (\S+)$")
PYTHON = re.compile(r"^# vsa:python ([A-Z][A-Z0-9_]*) (lib/[a-z0-9_]+\.py)$")
PYTHON_END = "VSA_PY"  # the here-document's delimiter: no line of a Python file may be this


@dataclass(frozen=True)
class Document:
    name: str  # configure-target
    description: str
    parameters: dict[str, dict[str, str]]
    script: str
    timeout_seconds: int
    examples: dict[str, str]

    @property
    def camel(self) -> str:  # ConfigureTarget
        return "".join(part.capitalize() for part in self.name.split("-"))

    @property
    def resource(self) -> str:
        return f"{self.camel}Document"

    @property
    def output(self) -> str:
        return f"{self.camel}DocumentName"


def variable(parameter: str) -> str:
    """The shell variable of a parameter: ``HostNqns`` -> ``HOST_NQNS``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", parameter).upper()


def python_program(variable: str, path: str) -> list[str]:
    """The lines that assign the Python program documents/``path`` to the shell ``variable``
    (a quoted here-document: bash expands nothing inside; ``read`` is a builtin, and ends at the
    here-document's end with status 1, hence ``|| :``)."""
    program = (DOCUMENTS / path).read_text().splitlines()
    if PYTHON_END in program:
        raise ValueError(f"documents/{path} has a line {PYTHON_END}, which would end its here-document")
    return [
        f'# --- documents/{path} (run as python3 -c "${variable}")',
        f"IFS= read -r -d '' {variable} <<'{PYTHON_END}' || :",
        *program,
        PYTHON_END,
        f"# --- end of documents/{path}",
    ]


def expand(script: str) -> str:
    """The script with each ``# vsa:include lib/<file>.sh`` line replaced by that file of
    documents/ (without its interpreter line; its own directives expanded too) and each
    ``# vsa:python NAME lib/<file>.py`` line by the assignment of that program to NAME: what
    several documents share is written once, and each language in a file of its own."""
    lines: list[str] = []
    for line in script.splitlines():
        program = PYTHON.match(line)
        if program is not None:
            lines += python_program(program[1], program[2])
            continue
        match = INCLUDE.match(line)
        if match is None:
            lines.append(line)
            continue
        included = (DOCUMENTS / match[1]).read_text().splitlines()
        if included and included[0].startswith("#!"):
            included = included[1:]
        body = expand("\n".join(included)).splitlines() if included else []
        lines += [f"# --- documents/{match[1]}", *body, f"# --- end of documents/{match[1]}"]
    return "\n".join(lines) + "\n"


def names() -> list[str]:
    return sorted(path.stem for path in DOCUMENTS.glob("*.yaml"))


def load(name: str) -> Document:
    spec = yaml.safe_load((DOCUMENTS / f"{name}.yaml").read_text())
    script = expand((DOCUMENTS / f"{name}.sh").read_text())
    parameters: dict[str, dict[str, str]] = {}
    for key, declared in (spec.get("parameters") or {}).items():
        unknown = set(declared) - set(PARAMETER_KEYS)
        if unknown:
            raise ValueError(f"documents/{name}.yaml: {key} has keys {sorted(unknown)} SSM would refuse")
        loose = [k for k in PARAMETER_KEYS if k in declared and not isinstance(declared[k], str)]
        if loose:
            # an unquoted 4420 or false would reach SSM as a number or a boolean
            raise ValueError(f"documents/{name}.yaml: {key}: quote {', '.join(loose)} (SSM takes strings)")
        parameters[key] = {k: declared[k] for k in PARAMETER_KEYS if k in declared}
    return Document(
        name=name,
        description=" ".join(str(spec["description"]).split()),
        parameters=parameters,
        script=script,
        timeout_seconds=int(spec.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)),
        examples={k: str(v) for k, v in (spec.get("examples") or {}).items()},
    )


def run_command(document: Document) -> list[str]:
    """The step's runCommand: a shebang (the agent runs ``sh -c <script file>``, so the file's
    own interpreter line picks bash), the parameter prologue, then the script without its
    shebang."""
    body = document.script.splitlines()
    if body and body[0].startswith("#!"):
        body = body[1:]
    prologue = [f"{variable(p)}='{{{{ {p} }}}}'" for p in document.parameters]
    return [
        "#!/bin/bash",
        f"# {document.name}: rendered from documents/{document.name}.sh by tools/documents.py",
        *prologue,
        *body,
    ]


def content(document: Document) -> dict[str, Any]:
    """The document's content, as SSM stores it (schemaVersion 2.2, one runShellScript step)."""
    return {
        "schemaVersion": "2.2",
        "description": document.description,
        "parameters": document.parameters,
        "mainSteps": [
            {
                "action": "aws:runShellScript",
                "name": document.camel[0].lower() + document.camel[1:],
                "precondition": {"StringEquals": ["platformType", "Linux"]},
                "inputs": {
                    "timeoutSeconds": document.timeout_seconds,
                    "runCommand": run_command(document),
                },
            }
        ],
    }


def render_script(name: str, values: dict[str, str]) -> str:
    """The script the agent runs for ``values`` (defaults filled in), after checking each value
    against its allowedPattern as SendCommand does: ValueError for a missing or refused one."""
    document = load(name)
    given = dict(values)
    unknown = set(given) - set(document.parameters)
    if unknown:
        raise ValueError(f"{name}: unknown parameters {sorted(unknown)}")
    resolved: dict[str, str] = {}
    for key, declared in document.parameters.items():
        if key in given:
            value = given[key]
        elif "default" in declared:
            value = declared["default"]
        else:
            raise ValueError(f"{name}: parameter {key} is required")
        if not re.fullmatch(declared["allowedPattern"], value):
            raise ValueError(f"{name}: {key}={value!r} does not match {declared['allowedPattern']}")
        resolved[key] = value
    lines = run_command(document)
    return "\n".join(PLACEHOLDER.sub(lambda m: resolved[m[1]], line) for line in lines) + "\n"


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


def resources_block(documents: list[Document]) -> str:
    parts = []
    for document in documents:
        body = yaml.safe_dump(content(document), sort_keys=False, width=4096, allow_unicode=True)
        parts.append(
            f"  {document.resource}:\n"
            "    Type: AWS::SSM::Document\n"
            "    Properties:\n"
            "      DocumentType: Command\n"
            # a new version on a content change: a named document cannot be replaced in place
            "      UpdateMethod: NewVersion\n"
            f'      Name: !Sub "${{AWS::StackName}}-{document.name}"\n'
            "      Content:\n" + _indent(body, 8)
        )
    return "".join(parts)


def outputs_block(documents: list[Document]) -> str:
    return "".join(
        f"  {d.output}:\n"
        f"    Description: The {d.name} SSM document (documents/{d.name}.yaml)\n"
        f"    Value: !Ref {d.resource}\n"
        for d in documents
    )


def _replace_block(template: str, begin: str, end: str, block: str) -> str:
    lines = template.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(begin)]
    ends = [i for i, line in enumerate(lines) if line.startswith(end)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"template.yaml needs exactly one '{begin}' line followed by one '{end}' line")
    return "".join(lines[: starts[0] + 1]) + block + "".join(lines[ends[0] :])


def render(template: str) -> str:
    """``template`` with both SSM blocks rendered from documents/."""
    documents = [load(name) for name in names()]
    template = _replace_block(template, *BLOCKS["resources"], resources_block(documents))
    return _replace_block(template, *BLOCKS["outputs"], outputs_block(documents))


def main() -> int:
    current = TEMPLATE.read_text()
    text = render(current)
    if "--check" in sys.argv:
        if text != current:
            print(
                "template.yaml's SSM documents are out of date: run `python tools/documents.py`",
                file=sys.stderr,
            )
            return 1
        return 0
    TEMPLATE.write_text(text)
    print(f"rendered {len(names())} SSM documents into {TEMPLATE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
