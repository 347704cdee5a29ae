"""Every function is built by ``functions/Makefile``: its own package only, with bytecode.

Why (issue #16, "Handlers that start fast"): ``/var/task`` is read-only on Lambda, so a handler
shipped without ``.pyc`` files is compiled from source on every cold start; ``sam build``'s
``BuildMethod: python3.13`` writes none (and copied all of ``functions/`` into every function).
``functions/Makefile`` (``BuildMethod: makefile``) copies the one package the function's
``Handler`` names and compiles it to unchecked-hash ``.pyc`` (PEP 552), as the core layer's
Makefile does (tests/infra/test_core_layer.py).

The checks, without network: the template builds every function with the Makefile, and each
function's logical id names its package the way the Makefile derives it; the build target, run
for real on this checkout, ships that package only, with Python 3.13 unchecked-hash bytecode for
every module; a logical id with no package fails the build.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.test_statemachine_definitions import load_template

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = ROOT / "functions"
PYC_FLAGS_UNCHECKED_HASH = 0b01  # PEP 552: bit 0 hash-based, bit 1 check_source (clear)


def functions() -> dict[str, dict]:
    template = load_template()
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def package_of(logical_id: str) -> str:
    """What functions/Makefile derives: OnIopsAlarmFunction -> on_iops_alarm."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", logical_id.removesuffix("Function")).lower()


def test_every_function_is_built_by_the_makefile_from_its_own_package() -> None:
    # Given the template's functions (code from the Globals' CodeUri, functions/)
    template = load_template()
    assert template["Globals"]["Function"]["CodeUri"].rstrip("/") == "functions"
    assert functions(), "no functions in the template"
    for name, resource in functions().items():
        # Then sam build runs functions/Makefile for each
        assert resource.get("Metadata", {}).get("BuildMethod") == "makefile", name
        assert "CodeUri" not in resource["Properties"], f"{name}: the Makefile builds from functions/"
        # and its logical id names the package its handler lives in
        assert name.endswith("Function"), name
        package = package_of(name)
        assert resource["Properties"]["Handler"] == f"{package}.handler.lambda_handler", name
        assert (FUNCTIONS_DIR / package / "handler.py").is_file(), name


@pytest.mark.skipif(sys.version_info[:2] != (3, 13), reason="the bytecode step refuses any Python but 3.13")
def test_build_ships_the_package_only_with_unchecked_hash_bytecode(tmp_path: Path) -> None:
    # When the Makefile builds one function as sam build does (ARTIFACTS_DIR set)
    subprocess.run(
        [
            "make",
            "--no-print-directory",
            "build-OnIopsAlarmFunction",
            f"ARTIFACTS_DIR={tmp_path}",
            f"PYTHON={sys.executable}",
        ],
        cwd=FUNCTIONS_DIR,
        capture_output=True,
        check=True,
    )
    # Then the artifact holds that function's package and nothing else
    assert sorted(p.name for p in tmp_path.iterdir()) == ["on_iops_alarm"]
    sources = sorted((tmp_path / "on_iops_alarm").glob("*.py"))
    assert [p.name for p in sources] == sorted(p.name for p in (FUNCTIONS_DIR / "on_iops_alarm").glob("*.py"))
    # and every module has bytecode where Python 3.13 looks for it, with its magic number, hash
    # based and never checked against the source (valid whatever the zip does to timestamps)
    for source in sources:
        header = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
        assert header[:4] == importlib.util.MAGIC_NUMBER, source.name
        assert int.from_bytes(header[4:8], "little") == PYC_FLAGS_UNCHECKED_HASH, source.name


def test_build_of_a_function_without_a_package_fails(tmp_path: Path) -> None:
    # When the Makefile is asked for a function whose package does not exist
    done = subprocess.run(
        ["make", "--no-print-directory", "build-NoSuchThingFunction", f"ARTIFACTS_DIR={tmp_path}"],
        cwd=FUNCTIONS_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    # Then the build fails, naming the package it looked for, and ships nothing
    assert done.returncode != 0
    assert "no_such_thing" in done.stderr
    assert list(tmp_path.iterdir()) == []
