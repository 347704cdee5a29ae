"""Which tests may run side by side (pytest-xdist, ``-n N --dist loadgroup``; tools/test.sh).

A test belongs to a group when it shares state it cannot share with a test running beside it,
and each group runs on one worker, in order:

* ``localcloud``: the local-cloud fidelity tests switch its global controls (the latency profile,
  the lifecycle clock's time scale, SSM's configuration), and the documents' Run Command tests
  register nodes under that configuration;
* ``documents``: the host-document tests take loop devices, freeze real filesystems and print the
  freeze window, which a neighbour's load would distort;
* ``cli-package``: the clean-install tests share one module-scoped virtualenv (a pip install of
  the distribution, ~40 s of CPU), made once per worker that runs one of them: on one worker it
  is made once.

Everything else (unit, infra, integration: each integration test makes its own arrays, volumes
and hosts) spreads over the workers, one test at a time.

Not xdist's own ``loadgroup``: it groups by renaming each test's node id (``<id>@<group>``),
which pytest 9 no longer allows (``Node.nodeid`` is derived from ``Node._id``), so every test ran
wherever it landed. The scheduler here is xdist's ``LoadScopeScheduling`` with the scope of a
test taken from its path (``pytest_xdist_make_scheduler``, xdist's documented hook). Grouped
tests are collected first, so the long groups start at once instead of after the short tests.
"""

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# Hypothesis' timing checks (a per-example deadline, "data generation is too slow") fail a test
# when the machine is busy, not when the code is wrong: off for every property test here. The
# test command tries the same examples on every run (``derandomize``, no example database): a
# property test's verdict is then the code's, not the draw's, and a fresh clone runs what a
# working copy runs. ``make explore`` (``VSA_HYPOTHESIS=explore``) draws fresh examples, twenty
# times as many, and keeps those that fail in .hypothesis/ to replay: a counterexample it finds
# becomes an ``@example`` or a named test.
_TIMING = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}
hypothesis_settings.register_profile("vsa", derandomize=True, database=None, **_TIMING)
hypothesis_settings.register_profile("explore", max_examples=2000, **_TIMING)
hypothesis_settings.load_profile(os.environ.get("VSA_HYPOTHESIS", "vsa"))

TESTS = Path(__file__).resolve().parent
GROUPS = {
    "localcloud": "localcloud",
    "documents/test_run_command.py": "localcloud",
    "documents": "documents",
    "infra/test_cli_package.py": "cli-package",
}
UNGROUPED = (
    # They wait on CloudWatch's own clock (a minute of puts, two 10 s evaluations) and switch
    # no global control (an alarm held by its own prefix): outside the group, their waits pass
    # beside other tests instead of holding up the group's worker
    "localcloud/test_cloudwatch.py::test_an_alarm_put_again_every_few_seconds_is_still_evaluated_every_minute",
    "localcloud/test_cloudwatch.py::test_a_held_alarm_is_left_out_of_the_periodic_evaluation_until_released",
)


def group_of(nodeid: str) -> str | None:
    """The group of a test, from its node id (``tests/<path>::<name>``), or None."""
    path = (TESTS.parent / nodeid.split("::", 1)[0]).resolve()
    relative = path.relative_to(TESTS).as_posix()
    test = nodeid.split("::", 1)[1].split("[", 1)[0] if "::" in nodeid else ""
    if f"{relative}::{test}" in UNGROUPED:
        return None
    for prefix, group in GROUPS.items():  # the first match: files before their directories
        if relative == prefix or relative.startswith(f"{prefix}/"):
            return group
    return None


def scope_of(nodeid: str) -> str:
    """A test's scheduling scope: its group, or the test itself."""
    return group_of(nodeid) or nodeid


@pytest.hookimpl(tryfirst=True)  # before xdist's DSession makes its own
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PathGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return PathGroups(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: the same order
        items.sort(key=lambda item: group_of(item.nodeid) is None)
