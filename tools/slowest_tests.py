"""Print the slowest tests of a test command's pytest runs, from their JUnit XML reports.

    python tools/slowest_tests.py [--top 15] REPORT.xml...

Each report is named after its phase (``integration-fast.xml``); a test's time is pytest's
total for it (setup, call and teardown: ``junit_duration_report = total``).
"""

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def slowest(reports: list[Path], top: int) -> list[tuple[float, str, str]]:
    """(seconds, phase, test id), slowest first."""
    found: list[tuple[float, str, str]] = []
    for report in reports:
        try:
            root = ET.parse(report).getroot()  # noqa: S314 - our own pytest's reports, not untrusted input
        except (OSError, ET.ParseError) as e:
            print(f"{report}: not read ({e})", file=sys.stderr)
            continue
        for case in root.iter("testcase"):
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            found.append((float(case.get("time") or 0), report.stem, test))
    return sorted(found, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("reports", nargs="*", type=Path)
    args = parser.parse_args()
    for seconds, phase, test in slowest(args.reports, args.top):
        print(f"{seconds:8.1f} s  {phase:<22} {test}")


if __name__ == "__main__":
    main()
