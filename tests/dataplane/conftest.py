"""The data-plane tier: the product's SSM documents on real Linux kernels (QEMU guests).

One lab per session (``lab.py``): three controllers c0-c2 and one host, each controller on its
own emulated link to the host, all controllers attached to one shared volume image. The
scenarios (``test_dataplane.py``) run in order on it, each asserting kernel state and IO.

Figures (boot time per guest, IOPS per path, stalls with the timeouts in effect, freeze
windows) are printed at the end of the run and written to ``.dataplane/figures.json``; they are
reported, never asserted, except the functional bounds the scenarios name.

Without the prerequisites (``tools/dataplane-install.sh``: root + apt) the tier skips, naming
what is missing; under ``CI=true`` it fails instead, so CI cannot pass without running it.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dataplane.lab import STATE, Lab, kernel_package, missing_prerequisites, qemu_version
from tests.prerequisites import require

# tools/test.sh stops the tier with SIGINT when the command ends early (pytest then closes its
# labs, their QEMU guests with them). A shell started in the background (as CI may start the
# command) hands every command below it SIGINT ignored, and Python then installs no handler:
# the interrupt was lost and the tier ran on to its end. Its handler is installed here whatever
# the tier was started with.
signal.signal(signal.SIGINT, signal.default_int_handler)

VOLUME = "vol-0a1b2c3d4e5f60718"
SPARE = "vol-0a1b2c3d4e5f60719"
"""Attached to every controller, added to the array by the last scenario."""
CONTROLLERS = 3
FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    """test_dataplane.py's lab (the other modules each boot their own as ``lab``): closed with
    its module, since its four idle guests took about half a core from whatever ran after it."""
    missing = missing_prerequisites()
    if missing:
        message = f"tests/dataplane needs {', '.join(missing)} (bash tools/dataplane-install.sh, as root)"
        require(message)
    root = STATE / "run"
    shutil.rmtree(root, ignore_errors=True)
    lab = Lab(root, CONTROLLERS, VOLUME, SPARE)
    started = time.monotonic()
    try:
        FIGURES["kernel"] = kernel_package()
        FIGURES["qemu"] = qemu_version()
        FIGURES["bootSeconds"] = lab.boot_all()
        FIGURES["allReadySeconds"] = round(time.monotonic() - started, 1)
        yield lab
    finally:
        lab.close()


def pytest_sessionstart(session: pytest.Session) -> None:
    FIGURES.clear()
    FIGURES["startedAt"] = time.time()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if len(FIGURES) <= 1:
        return  # the tier did not run
    FIGURES["tierSeconds"] = round(time.time() - FIGURES.pop("startedAt"), 1)
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "figures.json").write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if len(FIGURES) <= 1:
        return
    terminalreporter.section("data plane figures (.dataplane/figures.json)")
    for key, value in FIGURES.items():
        if key != "startedAt":
            terminalreporter.write_line(f"{key}: {json.dumps(value, sort_keys=True)}")


def record(key: str, value: Any) -> None:
    FIGURES[key] = value
    print(f"\nfigure {key}: {json.dumps(value, sort_keys=True)}")


@pytest.fixture
def figures() -> Any:
    return record


def log_path(lab: Lab, name: str) -> Path:
    return Path(lab.host.dir) / name
