"""The IAM linters, run inside the security venv (tools/security_gate.py starts this file there).

Reads ``{"policies": [{"id": ..., "document": {...}}]}`` on stdin (every policy document of the
template, intrinsics already resolved to plausible ARNs) and prints one JSON list of findings,
each ``{tool, check, title, severity, policy, where, detail}``:

* parliament (with its community auditors) on each whole document. A finding that points at a
  line is mapped back to its statement: the document is laid out one statement per line. A
  statement is named by its ``Sid``, else by its sorted actions; a finding about actions
  (``location.actions``) is named by those actions.
* cloudsplaining on each document: one finding per risky action per category (privilege
  escalation, resource exposure, data exfiltration, credentials exposure, unconstrained
  infrastructure modification). cloudsplaining counts a statement with a ``Condition`` as
  constrained, as IAM would scope it.

Only the standard library and the two linters: this file never runs in the dev venv.
"""

import json
import sys
import warnings
from typing import Any

warnings.filterwarnings("ignore", message="pkg_resources is deprecated")

from cloudsplaining.output.policy_finding import PolicyFinding  # noqa: E402
from cloudsplaining.scan.policy_document import PolicyDocument  # noqa: E402
from parliament import analyze_policy_string  # type: ignore[import-untyped]  # noqa: E402

CLOUDSPLAINING_CHECKS = (
    "PrivilegeEscalation",
    "ResourceExposure",
    "DataExfiltration",
    "CredentialsExposure",
    "InfrastructureModification",
)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statement_name(statement: dict[str, Any]) -> str:
    """A statement's stable name: its Sid, else its sorted (Not)Actions."""
    if statement.get("Sid"):
        return str(statement["Sid"])
    actions = _list(statement.get("Action", statement.get("NotAction", [])))
    return ",".join(sorted(str(a) for a in actions))


def one_statement_per_line(document: dict[str, Any]) -> str:
    """The document as text whose line ``i + 2`` holds statement ``i`` (parliament reports lines)."""
    head = {k: v for k, v in document.items() if k != "Statement"}
    lines = [json.dumps({**head, "Statement": []})[:-2]]  # ends in the list's opening bracket
    statements = _list(document.get("Statement", []))
    lines += [json.dumps(s) + ("," if i < len(statements) - 1 else "") for i, s in enumerate(statements)]
    lines.append("]}")
    return "\n".join(lines)


def parliament_findings(policy_id: str, document: dict[str, Any]) -> list[dict[str, Any]]:
    statements = _list(document.get("Statement", []))
    analysed = analyze_policy_string(one_statement_per_line(document), include_community_auditors=True)
    found = []
    for finding in analysed.findings:
        location = finding.location or {}
        line = location.get("line")
        if isinstance(line, int) and 2 <= line < len(statements) + 2:
            where = statement_name(statements[line - 2])
        elif location.get("actions"):
            where = ",".join(sorted(location["actions"]))
        else:
            where = ""
        found.append(
            {
                "tool": "parliament",
                "check": finding.issue,
                "title": finding.title,
                "severity": str(finding.severity).upper(),
                "policy": policy_id,
                "where": where,
                "detail": json.dumps(finding.detail, default=str)[:300],
            }
        )
    return found


def _actions_of(entry: Any) -> list[str]:
    """A cloudsplaining finding entry: an action, or a privilege-escalation method with its actions."""
    if isinstance(entry, dict):
        return [f"{entry.get('type')}:{'+'.join(sorted(entry.get('actions', [])))}"]
    return [str(entry)]


def cloudsplaining_findings(policy_id: str, document: dict[str, Any]) -> list[dict[str, Any]]:
    results = PolicyFinding(PolicyDocument(document)).results
    found = []
    for check in CLOUDSPLAINING_CHECKS:
        result = results[check]
        for entry in result["findings"]:
            for where in _actions_of(entry):
                found.append(
                    {
                        "tool": "cloudsplaining",
                        "check": check,
                        "title": check,
                        "severity": str(result["severity"]).upper(),
                        "policy": policy_id,
                        "where": where,
                        "detail": "",
                    }
                )
    return found


def main() -> None:
    request = json.load(sys.stdin)
    found: list[dict[str, Any]] = []
    for policy in request["policies"]:
        found += parliament_findings(policy["id"], policy["document"])
        found += cloudsplaining_findings(policy["id"], policy["document"])
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()
