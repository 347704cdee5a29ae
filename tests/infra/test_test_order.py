"""How the test command spreads its tests over pytest-xdist's workers (tests/conftest.py,
tests/integration/conftest.py, tools/slowest_tests.py)."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.conftest import scope_of
from tests.integration.conftest import longest_first

ROOT = Path(__file__).resolve().parents[2]


def test_a_group_runs_as_one_scope_and_a_clock_bound_test_outside_it() -> None:
    # Given tests of the localcloud group, of the documents group, and free ones
    fidelity = "tests/localcloud/test_ssm.py::test_offline_nodes_get_the_command_when_back_online"
    run_command = "tests/documents/test_run_command.py::test_disconnect_path_removes_exactly_one_path"
    cadence = (
        "tests/localcloud/test_cloudwatch.py::"
        "test_an_alarm_put_again_every_few_seconds_is_still_evaluated_every_minute"
    )
    unit = "tests/unit/test_nvme.py::test_something[case-1]"
    # Then the group's tests share a scope (one worker, in order), the rest are each their own
    assert scope_of(fidelity) == scope_of(run_command) == "localcloud"
    assert scope_of("tests/documents/test_freeze_thaw.py::test_x") == "documents"
    assert scope_of(cadence) == cadence
    assert scope_of(unit) == unit


def test_the_longest_tests_start_first_and_an_unknown_one_before_them() -> None:
    items: list[Any] = [SimpleNamespace(nodeid=n) for n in ("a", "b", "c", "new", "d")]
    longest_first(items, {"a": 10.0, "b": 90.0, "c": 10.0, "d": 30.0})
    assert [i.nodeid for i in items] == ["new", "b", "d", "a", "c"]


def test_durations_are_written_by_node_id_from_junit_reports(tmp_path: Path) -> None:
    report = tmp_path / "integration-fast.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_roll" name="test_a" time="88.7"/>'
        '<testcase classname="tests.integration.test_scaling" name="test_b[x]" time="3.04"/>'
        "</testsuite></testsuites>"
    )
    out = tmp_path / "durations.json"
    subprocess.run(
        [sys.executable, "tools/slowest_tests.py", "--durations", str(out), str(report)], cwd=ROOT, check=True
    )
    assert json.loads(out.read_text()) == {
        "tests/integration/test_roll.py::test_a": 88.7,
        "tests/integration/test_scaling.py::test_b[x]": 3.0,
    }


def test_the_failures_own_words_end_the_output_last_lines_of_each(tmp_path: Path) -> None:
    # Given a report with a failed test (pytest's E lines inside its traceback), an erred one and
    # a passed one
    report = tmp_path / "dataplane.xml"
    traceback = "\n".join(
        ["    def test_x():", ">       fio.result()", "E       AssertionError: fio failed (1):"]
        + [f"E       line {i}" for i in range(1, 6)]
        + ["", "tests/dataplane/test_dataplane.py:230: AssertionError"]
    )
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        f'<testcase classname="tests.dataplane.test_dataplane" name="test_x"><failure message="m">{traceback}'
        "</failure></testcase>"
        '<testcase classname="tests.dataplane.test_dataplane" name="test_y">'
        '<error message="fixture lab failed">setup went wrong</error></testcase>'
        '<testcase classname="tests.dataplane.test_dataplane" name="test_z"/>'
        "</testsuite></testsuites>"
    )
    # When the tool prints the last 3 lines of each
    out = subprocess.run(
        [sys.executable, "tools/slowest_tests.py", "--failures", "3", str(report)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    # Then each failed or erred test is named, with its last E lines (its whole text if none)
    assert out == [
        "[dataplane] tests/dataplane/test_dataplane.py::test_x",
        "    line 3",
        "    line 4",
        "    line 5",
        "[dataplane] tests/dataplane/test_dataplane.py::test_y",
        "    setup went wrong",
    ]
