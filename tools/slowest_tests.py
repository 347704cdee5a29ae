"""Print the slowest tests of a test command's pytest runs, from their JUnit XML reports.

    python tools/slowest_tests.py [--top 15] REPORT.xml...
    python tools/slowest_tests.py --durations tests/integration/durations.json .test-reports/integration-*.xml
    python tools/slowest_tests.py --failures 12 .test-reports/*.xml

Each report is named after its phase (``integration-fast.xml``); a test's time is pytest's
total for it (setup, call and teardown: ``junit_duration_report = total``). ``--durations``
writes every test's time as ``{node id: seconds}``: the integration runs start their longest
tests first from it (tests/integration/conftest.py). ``--failures N`` prints each failed test's
last N lines of pytest's ``E`` lines (the assertion's own words): tools/test.sh ends with them,
since a CI run shows only the end of its output. tools/test.sh keeps the reports of its last run
in ``.test-reports/``.
"""

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def node_id(classname: str, name: str) -> str:
    """pytest's node id of a JUnit test case: ``tests.x.test_y[.Class]`` → ``tests/x/test_y.py[::Class]``."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        module = "/".join(parts[:end]) + ".py"
        if (ROOT / module).is_file():
            return "::".join([module, *parts[end:], name])
    return f"{classname}::{name}"


def slowest(reports: list[Path], top: int | None = None) -> list[tuple[float, str, str]]:
    """(seconds, phase, test id), slowest first; the ``top`` slowest, or all."""
    found: list[tuple[float, str, str]] = []
    for report in reports:
        try:
            root = ET.parse(report).getroot()  # noqa: S314 - our own pytest's reports, not untrusted input
        except (OSError, ET.ParseError) as e:
            print(f"{report}: not read ({e})", file=sys.stderr)
            continue
        for case in root.iter("testcase"):
            test = node_id(case.get("classname", ""), case.get("name", ""))
            found.append((float(case.get("time") or 0), report.stem, test))
    return sorted(found, reverse=True)[:top]


def failures(reports: list[Path], lines: int) -> list[str]:
    """Each failed or erred test's id, then the last ``lines`` of its failure's ``E`` lines."""
    out: list[str] = []
    for report in reports:
        try:
            root = ET.parse(report).getroot()  # noqa: S314 - our own pytest's reports, not untrusted input
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            for bad in [*case.iter("failure"), *case.iter("error")]:
                text = (bad.text or bad.get("message") or "").splitlines()
                said = [line[1:].strip() for line in text if line.startswith("E ")] or text
                out.append(f"[{report.stem}] {node_id(case.get('classname', ''), case.get('name', ''))}")
                out.extend(f"    {line}" for line in said[-lines:])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--durations", type=Path, help="write every test's seconds here as JSON")
    parser.add_argument("--failures", type=int, metavar="LINES", help="print each failure's last LINES")
    parser.add_argument("reports", nargs="*", type=Path)
    args = parser.parse_args()
    if args.failures is not None:
        print("\n".join(failures(args.reports, args.failures)))
        return
    if args.durations:
        found = {test: round(seconds, 1) for seconds, _, test in slowest(args.reports)}
        args.durations.write_text(json.dumps(dict(sorted(found.items())), indent=1) + "\n")
        print(f"{args.durations}: {len(found)} tests")
        return
    for seconds, phase, test in slowest(args.reports, args.top):
        print(f"{seconds:8.1f} s  {phase:<22} {test}")


if __name__ == "__main__":
    main()
