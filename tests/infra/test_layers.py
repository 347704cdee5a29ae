"""The core's layering contract holds, and would catch a break (pyproject.toml's
``[tool.importlinter]``, checked by ``lint-imports`` in make check and make test).

``lint-imports`` runs as make runs it, in a fresh interpreter on the checkout's core; then on
copies of the core where one module imports against the layers (a domain the top layer, the
kernel a domain, a domain its sibling), with the same contract, and must fail naming the layers
contract and the import. The contract's list of handlers the core may not import is held to
``functions/``."""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "layers" / "core"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LAYERS_CONTRACT = next(c["name"] for c in CONFIG["contracts"] if c["type"] == "layers")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason=f"{LINT_IMPORTS} is not installed")


def lint_imports(core: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the checkout's contract, on the core package under ``core``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(core)
    env["COLUMNS"] = "200"  # one line per contract and per import in the report
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_core_keeps_every_contract() -> None:
    # When lint-imports checks the core of this checkout
    done = lint_imports(CORE)
    # Then every contract is kept
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(CONFIG['contracts'])} kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("scaling.rules", "health.aws_check"),  # a domain imports the top layer
        ("arrays.plan", "scaling.planner"),  # the kernel imports a domain
        ("reconcile.plan", "backups.sets"),  # a domain imports its sibling
    ],
)
def test_an_import_against_the_layers_breaks_the_contract(tmp_path: Path, module: str, imported: str) -> None:
    # Given a copy of the core where one module imports what its layer may not
    shutil.copytree(CORE / "vsa_core", tmp_path / "vsa_core", ignore=shutil.ignore_patterns("__pycache__"))
    path = (tmp_path / "vsa_core" / module.replace(".", "/")).with_suffix(".py")
    path.write_text(path.read_text() + f"\nimport vsa_core.{imported}  # noqa: E402, F401\n")
    # When lint-imports checks that copy with the same contract
    done = lint_imports(tmp_path)
    # Then it fails, naming the layers contract and the import that breaks it
    assert done.returncode != 0, done.stdout
    assert f"{LAYERS_CONTRACT} BROKEN" in " ".join(done.stdout.split())
    assert f"vsa_core.{module} -> vsa_core.{imported}" in done.stdout


def test_the_core_may_import_no_handler_of_functions() -> None:
    # Given the handlers' packages (functions/<name>/handler.py is <name>.handler)
    handlers = {p.parent.name for p in (ROOT / "functions").glob("*/handler.py")}
    # Then the contract forbids the core every one of them, and the CLI
    (forbidden,) = (c for c in CONFIG["contracts"] if c["type"] == "forbidden")
    assert forbidden["source_modules"] == ["vsa_core"]
    assert set(forbidden["forbidden_modules"]) == handlers | {"vsactl"}
