"""vsactl installs on its own, and the product has one version.

An operator installs vsactl with ``pipx install ./`` from a checkout (docs/cli.md): the test
builds the distribution from the tracked files alone into a clean virtualenv (no dev venv, no
``PYTHONPATH``; dependencies from the package index) and runs every kind of command there,
``simulate`` included, which needs the core package (vsa_core) the distribution carries.

The version is written once (``vsa_core.VERSION``); the distribution reads it, and the
stack's output ``Version`` must say the same.
"""

import json
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.infra.test_statemachine_definitions import load_template
from vsa_core import VERSION

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_stack_reports_the_one_version():
    assert load_template()["Outputs"]["Version"]["Value"] == VERSION


def test_the_distribution_reads_the_one_version():
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "vsa_core.VERSION"}


def test_the_distribution_pins_what_the_tests_run_with():
    dev = {
        canonicalize_name(Requirement(line).name): str(Requirement(line).specifier)
        for file in ("requirements/dev.txt", "layers/core/requirements.txt")
        for line in (ROOT / file).read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-"))
    }
    for line in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(line)
        assert str(requirement.specifier).startswith("=="), f"{line}: pin it"
        assert dev[canonicalize_name(requirement.name)] == str(requirement.specifier), line


def tracked_copy(destination: Path) -> Path:
    """The files ``git`` tracks, copied: what a clone has, nothing a local build left behind."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "pyproject.toml", "README.md", "LICENSE", "cli", "layers/core/vsa_core"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A clean virtualenv with the distribution installed from a copy of the tracked files."""
    work = tmp_path_factory.mktemp("vsactl-install")
    source = tracked_copy(work / "source")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run([*pip, str(source)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return env_dir / "bin"


def clean_env(bin_dir: Path) -> dict[str, str]:
    """An operator's shell: the virtualenv on PATH, no PYTHONPATH (the test command sets one)."""
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(bin_dir.parent)}


def vsactl(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "vsactl"), *args],
        capture_output=True,
        text=True,
        env=clean_env(bin_dir),
        timeout=120,
        check=False,
    )


def test_a_clean_install_reports_the_version(installed):
    assert sys.version_info >= (3, 13)
    result = vsactl(installed, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"vsactl {VERSION}"


def test_a_clean_install_runs_the_planner_offline(installed):
    result = vsactl(installed, "simulate", "--trace", str(ROOT / "traces" / "slow-ramp.csv"), "-o", "json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert len(figures["results"]) == 3  # the planner, the oracle, static for the peak
    assert all(r["controller_hours"] > 0 for r in figures["results"])
    where = subprocess.run(
        [str(installed / "python"), "-c", "import vsa_core; print(vsa_core.__file__)"],
        capture_output=True,
        text=True,
        env=clean_env(installed),
        check=True,
    ).stdout
    assert where.startswith(str(installed.parent)), where  # the installed copy, not the checkout's


def test_a_clean_install_has_every_command_and_completion(installed):
    for args in (["--help"], ["backup", "--help"], ["restore", "--help"], ["completion", "bash"]):
        result = vsactl(installed, *args)
        assert result.returncode == 0, (args, result.stderr)
    missing_stack = vsactl(installed, "--region", "us-east-1", "--endpoint", "http://127.0.0.1:9", "list")
    assert missing_stack.returncode == 1  # no credentials here: a clear message, not a traceback
    assert missing_stack.stderr.startswith("error: no AWS credentials found"), missing_stack.stderr
