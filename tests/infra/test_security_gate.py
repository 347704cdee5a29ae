"""The security gate (tools/security_gate.py) with the real linters: checkov, parliament and
cloudsplaining from the security venv (tools/install.sh; under CI a missing one fails).

The template as committed passes with the committed baseline; a planted privilege escalation
fails it as new findings, and the baseline stays honest: an entry no longer found (stale) and an
entry without a reason (TODO) each fail it too.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.prerequisites import require

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "tools" / "security_gate.py"
BASELINE = ROOT / "tools" / "security-baseline.yaml"

# A role any reviewer would refuse: pass any role to any service, tag anything.
PLANTED = """
  PlantedRole:
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Effect: Allow
            Principal: {Service: lambda.amazonaws.com}
            Action: sts:AssumeRole
      Policies:
        - PolicyName: planted
          PolicyDocument:
            Version: "2012-10-17"
            Statement:
              - Effect: Allow
                Action: [iam:PassRole, ec2:CreateTags]
                Resource: "*"
"""


def _venv() -> Path:
    state = Path(os.environ.get("VSA_STATE", ROOT / ".localcloud"))
    return Path(os.environ.get("VSA_SECURITY_VENV", state / "security-venv"))


@pytest.fixture(autouse=True)
def _linters() -> None:
    missing = [n for n in ("checkov", "python") if not (_venv() / "bin" / n).exists()]
    require(f"the security venv lacks {', '.join(missing)} ({_venv()})" if missing else None)


def run_gate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GATE), *args], capture_output=True, text=True, check=False, timeout=300
    )


def test_the_template_passes_with_its_baseline() -> None:
    # Given the template and the baseline as committed / When the gate runs
    done = run_gate()
    # Then every finding is accepted with a reason and no entry is stale
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 new, 0 without a reason, 0 stale" in done.stdout


def test_a_planted_escalation_a_stale_entry_and_a_todo_each_fail(tmp_path: Path) -> None:
    # Given the template with a role that passes any role and tags anything
    template = (ROOT / "template.yaml").read_text()
    assert "\nResources:\n" in template
    planted = tmp_path / "template.yaml"
    planted.write_text(template.replace("\nResources:\n", "\nResources:\n" + PLANTED, 1))
    # and the baseline with an entry for a role that does not exist and one whose reason is TODO
    baseline = yaml.safe_load(BASELINE.read_text())
    ghost = {"tool": "parliament", "check": "RESOURCE_STAR", "where": "ec2:DeleteVolume"}
    baseline["accepted"].append({**ghost, "resources": ["GhostRole/policy"], "reason": "gone"})
    todo = baseline["accepted"][0]
    todo["reason"] = "TODO"
    baseline_path = tmp_path / "baseline.yaml"
    baseline_path.write_text(yaml.safe_dump(baseline, sort_keys=False))

    # When the gate runs
    done = run_gate("--template", str(planted), "--baseline", str(baseline_path))

    # Then it fails, naming the planted role's findings from both IAM linters as new
    assert done.returncode == 1, done.stdout + done.stderr
    new = [
        line for line in done.stdout.splitlines() if line.startswith("NEW ") and "PlantedRole/planted" in line
    ]
    assert any(" parliament " in line and "iam:passrole" in line.lower() for line in new), done.stdout
    assert any(" cloudsplaining " in line and "[iam:PassRole]" in line for line in new), done.stdout
    assert any(" cloudsplaining " in line and "[ec2:CreateTags]" in line for line in new), done.stdout
    # and the entry no longer found as stale, and the entry without a reason as TODO
    assert "STALE    parliament RESOURCE_STAR GhostRole/policy [ec2:DeleteVolume]" in done.stdout
    assert any(line.startswith("TODO ") and todo["check"] in line for line in done.stdout.splitlines())
