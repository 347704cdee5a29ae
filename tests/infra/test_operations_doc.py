"""docs/operations.md names every alarm the deployment has: an operator paged by one finds what
it means and what to do (a new alarm without its row fails here)."""

import re
from pathlib import Path

from tests.infra.test_statemachine_definitions import load_template

ROOT = Path(__file__).resolve().parents[2]


def alarm_suffixes() -> set[str]:
    """The part after ``${AWS::StackName}-`` of every alarm name the template declares."""
    found = set()
    for resource in load_template()["Resources"].values():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        name = resource["Properties"]["AlarmName"]
        text = name if isinstance(name, str) else name.get("Fn::Sub", name.get("Sub", ""))
        match = re.fullmatch(r"\$\{AWS::StackName\}-([a-z0-9-]+)", text)
        assert match, f"alarm name {name!r}: expected ${{AWS::StackName}}-<name>"
        found.add(match.group(1))
    return found


def test_every_alarm_has_a_row_in_operations():
    table = {
        m.group(1)
        for m in re.finditer(r"^\| `([a-z0-9-]+)` \|", (ROOT / "docs" / "operations.md").read_text(), re.M)
    }
    suffixes = alarm_suffixes()
    assert len(suffixes) >= 10
    assert not suffixes - table, f"alarms without a row in docs/operations.md: {sorted(suffixes - table)}"


def test_operations_covers_upgrades_key_rotation_and_deleting():
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "operations.md").read_text(), re.M)
    assert {"Upgrades", "Key rotation", "Deleting safely"} <= set(headings), headings
