"""What a test needs from the machine, and what happens when it is missing.

On a developer's machine a missing tool (shellcheck, mkfs.xfs, loop devices, root) skips the
test and says why. Under CI (``CI`` set, as ``.ci/run`` sets it) the install provides every one
of them (``tools/install.sh``), so a missing one is a broken install: the test fails, naming
what is missing, instead of passing silently as a skip.
"""

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def require(missing: str | None) -> None:
    """Skip (or, under CI, fail) with ``missing`` when it names what is missing; else nothing."""
    if not missing:
        return
    if in_ci():
        pytest.fail(f"{missing} (under CI the install provides it: tools/install.sh)", pytrace=False)
    pytest.skip(missing)
