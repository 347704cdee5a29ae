"""The security gate: checkov, parliament and cloudsplaining on the template, against a baseline.

Usage: ``.venv/bin/python tools/security_gate.py [--write-baseline] [--template T] [--baseline B]``
(``make security``). The linters live in their own venv (``$VSA_STATE/security-venv``, pinned in
requirements/security.txt, made by tools/install.sh): checkov's pins clash with the SAM CLI's.

What is scanned: the template *after* the SAM transform (aws-sam-translator, offline, with a
fake region): that is what CloudFormation deploys. It holds every role, permission, event rule
and API stage SAM generates, which the raw template does not show, and checkov's
``AWS::Serverless::*`` checks are the same checks as on the ``AWS::Lambda::*`` and
``AWS::ApiGateway::*`` resources they become, so scanning both would only list each finding
twice.

* checkov (framework cloudformation, ``--skip-download``: no call to Prisma Cloud) on the
  transformed template. Offline, checkov reports no severity: the gate rates the checks it has
  met (``CHECKOV_SEVERITY``) and treats any other as MEDIUM until rated.
* parliament and cloudsplaining (tools/security_linters.py, in the security venv) on every IAM
  policy document in the transformed template: role and managed policies, trust policies, and
  resource policies (queue, topic, bus, key, API ...), found as any property holding a
  ``Statement``. ``!Sub``/``!Ref``/``!GetAtt`` are resolved to plausible ARNs in a fake account
  and region (``Resolver``) so the linters can match resources to actions.

Each finding is keyed by (tool, check, resource or ``Resource/Policy``, where): where is a
statement's Sid, else its sorted actions, else the action a finding names; never a line number.
tools/security-baseline.yaml accepts findings, each with a reason. The gate fails (exit 1) on a
finding not in the baseline, on a baseline entry whose reason is ``TODO`` and on a baseline
entry no longer found (stale). ``--write-baseline`` rewrites the baseline from what the tools
find now, keeping every reason it already has and giving new findings ``reason: TODO``.
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml
from samtranslator.parser.parser import Parser  # type: ignore[import-untyped]
from samtranslator.translator.translator import Translator  # type: ignore[import-untyped]
from samtranslator.yaml_helper import yaml_parse  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"
BASELINE = ROOT / "tools" / "security-baseline.yaml"
LINTERS = ROOT / "tools" / "security_linters.py"
TODO = "TODO"
# Trust policies go to checkov only (CKV_AWS_60/61: who may assume the role): parliament and
# cloudsplaining read identity policies, and call a statement without Resource malformed.
TRUST = "/AssumeRolePolicyDocument"
SEVERITIES = ("CRITICAL", "HIGH", "MEDIUM", "LOW", "INFO")

PARTITION, REGION, ACCOUNT, STACK = "aws", "us-east-1", "123456789012", "vsa"
PSEUDO = {
    "AWS::Partition": PARTITION,
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::StackName": STACK,
    "AWS::StackId": f"arn:{PARTITION}:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK}/0",
    "AWS::URLSuffix": "amazonaws.com",
}
# (Ref, Fn::GetAtt Arn) per resource type, ``{n}`` the resource's name: the return values in
# the CloudFormation resource reference ("Return values" of each type).
_A = f"arn:{PARTITION}:{{svc}}:{REGION}:{ACCOUNT}:"
ARNS: dict[str, tuple[str, str]] = {
    "AWS::IAM::Role": ("{n}", f"arn:{PARTITION}:iam::{ACCOUNT}:role/{{n}}"),
    "AWS::IAM::ManagedPolicy": (f"arn:{PARTITION}:iam::{ACCOUNT}:policy/{{n}}", ""),
    "AWS::Lambda::Function": ("{n}", _A.format(svc="lambda") + "function:{n}"),
    "AWS::StepFunctions::StateMachine": (_A.format(svc="states") + "stateMachine:{n}", ""),
    "AWS::DynamoDB::Table": ("{n}", _A.format(svc="dynamodb") + "table/{n}"),
    "AWS::SQS::Queue": (f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{{n}}", _A.format(svc="sqs") + "{n}"),
    "AWS::SNS::Topic": (_A.format(svc="sns") + "{n}", ""),
    "AWS::KMS::Key": ("{n}", _A.format(svc="kms") + "key/{n}"),
    "AWS::Events::EventBus": ("{n}", _A.format(svc="events") + "event-bus/{n}"),
    "AWS::Events::Rule": ("{n}", _A.format(svc="events") + "rule/{n}"),
    "AWS::Logs::LogGroup": ("{n}", _A.format(svc="logs") + "log-group:{n}:*"),
    "AWS::S3::Bucket": ("{n}", f"arn:{PARTITION}:s3:::{{n}}"),
    "AWS::SecretsManager::Secret": (_A.format(svc="secretsmanager") + "secret:{n}", ""),
    "AWS::CloudWatch::Alarm": ("{n}", _A.format(svc="cloudwatch") + "alarm:{n}"),
    "AWS::Scheduler::ScheduleGroup": ("{n}", _A.format(svc="scheduler") + "schedule-group/{n}"),
    "AWS::Scheduler::Schedule": ("{n}", _A.format(svc="scheduler") + "schedule/default/{n}"),
}
# checkov's own ratings come from Prisma Cloud, which the gate does not call: these are ours,
# for the checks met on this template; an unlisted check counts as MEDIUM until rated here.
CHECKOV_SEVERITY = {
    "CKV_AWS_107": "HIGH",  # IAM: credentials exposure
    "CKV_AWS_108": "HIGH",  # IAM: data exfiltration
    "CKV_AWS_109": "HIGH",  # IAM: permissions management without constraints
    "CKV_AWS_110": "HIGH",  # IAM: privilege escalation
    "CKV_AWS_111": "MEDIUM",  # IAM: write access without constraints
    "CKV_AWS_26": "MEDIUM",  # SNS topic encryption
    "CKV_AWS_27": "MEDIUM",  # SQS queue encryption
    "CKV_AWS_28": "MEDIUM",  # DynamoDB point-in-time recovery
    "CKV_AWS_76": "MEDIUM",  # API Gateway access logging
    "CKV_AWS_119": "LOW",  # DynamoDB encrypted with a customer managed key (AWS owned key otherwise)
    "CKV_AWS_115": "LOW",  # Lambda reserved concurrency
    "CKV_AWS_116": "LOW",  # Lambda dead-letter queue
    "CKV_AWS_117": "LOW",  # Lambda in a VPC
    "CKV_AWS_173": "LOW",  # Lambda environment variables encrypted with a customer managed key
    "CKV_AWS_120": "LOW",  # API Gateway caching
    "CKV_AWS_158": "LOW",  # CloudWatch log group encrypted with a customer managed key
}


class GateError(Exception):
    """A tool is missing or failed to run: the gate cannot judge (exit 2)."""


@dataclass(frozen=True, order=True)
class Finding:
    tool: str
    check: str
    resource: str
    where: str
    severity: str = "MEDIUM"
    title: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.tool, self.check, self.resource, self.where)

    def line(self) -> str:
        where = f" [{self.where}]" if self.where else ""
        return f"{self.severity:<6} {self.tool} {self.check} {self.resource}{where}: {self.title}"


# ----------------------------------------------------------------------------- the template


def transformed(template: Path) -> dict[str, Any]:
    """The template after the SAM transform, offline: local code paths become a placeholder S3
    location (as ``sam package`` would make them), the region and account are fake."""
    parsed: dict[str, Any] = yaml_parse(template.read_text())
    placeholder = "s3://vsa-security-gate/code.zip"
    function_globals = parsed.get("Globals", {}).get("Function", {})
    if isinstance(function_globals.get("CodeUri"), str):
        function_globals["CodeUri"] = placeholder
    for resource in parsed.get("Resources", {}).values():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "DefinitionUri", "ContentUri"):
            if isinstance(properties.get(key), str) and not properties[key].startswith("s3://"):
                properties[key] = placeholder
    session = boto3.session.Session(region_name=REGION)
    translator = Translator(None, Parser(), boto_session=session)
    result: dict[str, Any] = translator.translate(
        parsed, parameter_values={}, get_managed_policy_map=lambda: {}
    )
    return result


_NO_VALUE = object()


class Resolver:
    """CloudFormation intrinsics resolved to plausible values: a resource's name is its logical
    id, its ARN the documented ARN format of its type in a fake account and region."""

    def __init__(self, template: dict[str, Any]) -> None:
        self.resources: dict[str, Any] = template.get("Resources", {})
        self.parameters: dict[str, Any] = template.get("Parameters", {})

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self.parameters:
            return str(self.parameters[name].get("Default", f"{name}-value"))
        kind = self.resources.get(name, {}).get("Type", "")
        return ARNS.get(kind, ("{n}", ""))[0].format(n=name)

    def get_att(self, name: str, attribute: str) -> str:
        kind = self.resources.get(name, {}).get("Type", "")
        ref, arn = ARNS.get(kind, ("{n}", ""))
        if attribute == "Arn":
            return (arn or ref).format(n=name) if (arn or ref.startswith("arn:")) else self._arn(kind, name)
        if attribute == "StreamArn":
            return f"{self.get_att(name, 'Arn')}/stream/2020-01-01T00:00:00.000"
        if attribute == "Name":
            return name
        return f"{name}-{attribute}"

    @staticmethod
    def _arn(kind: str, name: str) -> str:
        service = kind.split("::")[1].lower() if kind.count("::") == 2 else "unknown"
        return f"arn:{PARTITION}:{service}:{REGION}:{ACCOUNT}:{name}"

    def sub(self, text: str, variables: dict[str, Any]) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):  # ${!Literal}: an IAM policy variable, kept as ${Literal}
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.resolve(variables[name]))
            if "." in name:
                resource, attribute = name.split(".", 1)
                return self.get_att(resource, attribute)
            return str(self.ref(name))

        return re.sub(r"\$\{([^}]+)\}", one, text)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [v for v in (self.resolve(x) for x in value) if v is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key in INTRINSICS:
                return INTRINSICS[key](self, argument)
        resolved = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}


def _sub(r: Resolver, a: Any) -> str:
    return r.sub(a, {}) if isinstance(a, str) else r.sub(a[0], a[1])


def _get_att(r: Resolver, a: Any) -> str:
    name, attribute = a.split(".", 1) if isinstance(a, str) else a
    return r.get_att(name, attribute)


def _if(r: Resolver, a: Any) -> Any:
    chosen = r.resolve(a[1])  # the condition's true branch, else its false one
    return r.resolve(a[2]) if chosen is _NO_VALUE else chosen


INTRINSICS: dict[str, Any] = {
    "Ref": lambda r, a: r.ref(a),
    "Fn::Sub": _sub,
    "Fn::GetAtt": _get_att,
    "Fn::Join": lambda r, a: str(a[0]).join(str(x) for x in r.resolve(a[1])),
    "Fn::Select": lambda r, a: r.resolve(a[1])[int(r.resolve(a[0]))],
    "Fn::Split": lambda r, a: str(r.resolve(a[1])).split(a[0]),
    "Fn::If": _if,
    "Fn::ImportValue": lambda r, a: f"imported-{r.resolve(a)}",
}


def _statement_holders(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if isinstance(value, dict):
        if "Statement" in value:
            yield path, value
            return
        for key, child in value.items():
            yield from _statement_holders(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            name = child.get("PolicyName") if isinstance(child, dict) else None
            yield from _statement_holders(child, (*path, str(name or index)))


def policy_documents(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every IAM policy document in the template as ``(Resource/Where, resolved document)``:
    a role's inline policy is ``Role/<PolicyName>``, its trust policy
    ``Role/AssumeRolePolicyDocument``, a managed or resource policy ``Resource/<Property>``."""
    resolver = Resolver(template)
    found = []
    for name, resource in template.get("Resources", {}).items():
        for path, document in _statement_holders(resource.get("Properties", {}), ()):
            parts = list(path)
            if len(parts) > 1 and parts[-1] == "PolicyDocument":
                parts.pop()
            if len(parts) > 1 and parts[0] == "Policies":
                parts.pop(0)
            # only the policy's own keys: an EventBusPolicy holds its Statement beside its bus name
            policy = {"Version": "2012-10-17"}  # a bus policy's statement comes without one
            policy |= {k: v for k, v in document.items() if k in ("Version", "Id", "Statement")}
            found.append((f"{name}/{'/'.join(parts) or 'Statement'}", resolver.resolve(policy)))
    return found


# ----------------------------------------------------------------------------- the tools


def security_venv() -> Path:
    if os.environ.get("VSA_SECURITY_VENV"):
        return Path(os.environ["VSA_SECURITY_VENV"])
    return Path(os.environ.get("VSA_STATE", ROOT / ".localcloud")) / "security-venv"


def _tool(name: str) -> Path:
    path = security_venv() / "bin" / name
    if not path.exists():
        raise GateError(f"{path} is missing: run tools/install.sh (make install)")
    return path


def run_checkov(template: dict[str, Any]) -> list[Finding]:
    with tempfile.TemporaryDirectory(prefix="security-gate-") as scratch:
        path = Path(scratch) / "template.json"
        path.write_text(json.dumps(template))
        command = [str(_tool("checkov")), "--file", str(path), "--framework", "cloudformation"]
        command += ["--output", "json", "--skip-download", "--quiet", "--compact"]
        # the security venv's own tools with fixed arguments
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=_quiet_env())  # noqa: S603
    try:
        reports = json.loads(done.stdout)
    except json.JSONDecodeError as error:
        raise GateError(f"checkov gave no report (exit {done.returncode}): {done.stderr[-2000:]}") from error
    found = []
    for report in reports if isinstance(reports, list) else [reports]:
        for result in report.get("results", {}).get("failed_checks", []):
            check = result["check_id"]
            found.append(
                Finding(
                    tool="checkov",
                    check=check,
                    resource=result["resource"].split(".", 1)[1],
                    where="",
                    severity=CHECKOV_SEVERITY.get(check, "MEDIUM"),
                    title=result["check_name"],
                )
            )
    return found


def _quiet_env() -> dict[str, str]:
    """The tools' environment: no endpoint override, no update or telemetry calls."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env.update(CHECKOV_RUN_SCA_PACKAGE_SCAN_V2="false", BC_SKIP_MAPPING="TRUE", LOG_LEVEL="ERROR")
    return env


def run_iam_linters(policies: list[tuple[str, dict[str, Any]]]) -> list[Finding]:
    request = json.dumps({"policies": [{"id": i, "document": d} for i, d in policies]})
    command = [str(_tool("python")), str(LINTERS)]
    done = subprocess.run(  # noqa: S603 (the security venv's python on our own file)
        command, input=request, capture_output=True, text=True, check=False, env=_quiet_env()
    )
    if done.returncode != 0:
        raise GateError(f"the IAM linters failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return [
        Finding(
            tool=f["tool"],
            check=f["check"],
            resource=f["policy"],
            where=f["where"],
            severity=f["severity"] if f["severity"] in SEVERITIES else "MEDIUM",
            title=f["title"],
        )
        for f in json.loads(done.stdout)
    ]


def findings(template_path: Path) -> list[Finding]:
    template = transformed(template_path)
    policies = [(i, d) for i, d in policy_documents(copy.deepcopy(template)) if not i.endswith(TRUST)]
    found = run_checkov(template) + run_iam_linters(policies)
    return sorted(set(found))


# ----------------------------------------------------------------------------- the baseline


def load_baseline(path: Path) -> dict[tuple[str, str, str, str], str]:
    """The accepted findings, key -> reason. An entry lists its resources and its wheres, and
    accepts each pair: one reason covers the same check on many resources or actions, each
    still named (a new one fails, one no longer found is stale)."""
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    accepted: dict[tuple[str, str, str, str], str] = {}
    for entry in data.get("accepted", []):
        wheres = entry.get("where", [""])
        for where in [wheres] if isinstance(wheres, str) else wheres:
            for resource in entry["resources"]:
                key = (entry["tool"], entry["check"], resource, where)
                accepted[key] = str(entry.get("reason", TODO)).strip() or TODO
    return accepted


def write_baseline(path: Path, found: list[Finding], old: dict[tuple[str, str, str, str], str]) -> None:
    """The baseline for ``found``: reasons kept by key, new findings with ``reason: TODO``;
    findings of one tool and check with the same reason share an entry when their wheres
    apply to the same resources."""
    by_where: dict[tuple[str, str, str, str], list[Finding]] = {}
    for finding in sorted(found, key=lambda f: (SEVERITIES.index(f.severity), f.key)):
        reason = old.get(finding.key, TODO)
        by_where.setdefault((finding.tool, finding.check, finding.where, reason), []).append(finding)
    groups: dict[tuple[str, str, str, tuple[str, ...]], list[Finding]] = {}
    for (tool, check, _, reason), members in by_where.items():
        resources = tuple(sorted(f.resource for f in members))
        groups.setdefault((tool, check, reason, resources), []).extend(members)
    entries = []
    for (tool, check, reason, resources), members in groups.items():
        entry: dict[str, Any] = {"tool": tool, "check": check, "severity": members[0].severity}
        entry["title"] = members[0].title
        wheres = sorted({f.where for f in members})
        if wheres != [""]:
            entry["where"] = wheres[0] if len(wheres) == 1 else wheres
        entry["resources"] = list(resources)
        entry["reason"] = reason
        entries.append(entry)
    header = (
        "# Findings of tools/security_gate.py accepted, each with its reason (docs/security.md).\n"
        "# Regenerate with: .venv/bin/python tools/security_gate.py --write-baseline\n"
        "# (reasons are kept by key; a new finding gets reason: TODO, which fails the gate).\n"
    )
    body = yaml.safe_dump({"accepted": entries}, sort_keys=False, width=100, allow_unicode=True)
    path.write_text(header + body)


@dataclass
class Verdict:
    new: list[Finding]
    unreasoned: list[Finding]
    stale: list[tuple[str, str, str, str]]
    accepted: int

    @property
    def ok(self) -> bool:
        return not (self.new or self.unreasoned or self.stale)


def judge(found: list[Finding], baseline: dict[tuple[str, str, str, str], str]) -> Verdict:
    keys = {f.key for f in found}
    new = [f for f in found if f.key not in baseline]
    unreasoned = [f for f in found if baseline.get(f.key) == TODO]
    stale = sorted(k for k in baseline if k not in keys)
    return Verdict(new, unreasoned, stale, accepted=len(found) - len(new) - len(unreasoned))


def report(verdict: Verdict, baseline_path: Path) -> None:
    for finding in verdict.new:
        print(f"NEW      {finding.line()}")
    for finding in verdict.unreasoned:
        print(f"TODO     {finding.line()}")
    for tool, check, resource, where in verdict.stale:
        print(f"STALE    {tool} {check} {resource}" + (f" [{where}]" if where else ""))
    print(
        f"security gate: {verdict.accepted} accepted, {len(verdict.new)} new, "
        f"{len(verdict.unreasoned)} without a reason, {len(verdict.stale)} stale ({baseline_path})"
    )
    if verdict.new or verdict.unreasoned:
        print(
            "  new/TODO: fix the template, or accept the finding with a reason a reviewer would "
            "accept: .venv/bin/python tools/security_gate.py --write-baseline adds it with "
            "reason: TODO; replace the TODO (docs/security.md)"
        )
    if verdict.stale:
        print("  stale: the finding is gone; drop the entry (--write-baseline does)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--template", type=Path, default=TEMPLATE)
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--write-baseline", action="store_true", help="rewrite the baseline, keeping reasons")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        found = findings(args.template)
    except GateError as error:
        print(f"security gate: {error}", file=sys.stderr)
        return 2
    baseline = load_baseline(args.baseline)
    if args.write_baseline:
        write_baseline(args.baseline, found, baseline)
        baseline = load_baseline(args.baseline)
    verdict = judge(found, baseline)
    report(verdict, args.baseline)
    print(f"  ({len(found)} findings in {time.monotonic() - started:.1f} s)")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
