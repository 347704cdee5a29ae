"""The core layer carries only what the python3.13 runtime lacks, and carries it compiled.

Why (issue #16, "Handlers that start fast"): a layer's ``/opt/python`` comes before the runtime's
own packages on ``sys.path``, so a botocore in the layer shadows the runtime's (20 MB, imported
by every handler); and ``/opt`` is read-only, so a layer shipped without ``.pyc`` files is
compiled from source on every cold start. ``sam build``'s ``BuildMethod: python3.13`` did both:
it resolves dependencies (aws-xray-sdk pulls botocore) and writes no bytecode. The layer is
built by ``layers/core/Makefile`` instead (``BuildMethod: makefile``): the pinned packages of
``layers/core/requirements.txt`` without dependency resolution, then ``compileall`` with
unchecked-hash ``.pyc`` (PEP 552: no source timestamps to go stale in the zip).

Nothing here is timed (``make bench-coldstart`` measures). The checks, without network:
the template builds the layer with the Makefile; the requirements pin every package, none the
runtime provides, and are closed under their dependencies (from the dev venv's metadata of the
same versions) less the runtime's; the Makefile's build installs with ``--no-deps`` and then
compiles; and its ``bytecode`` step, run for real on a sample tree, writes ``.pyc`` files with
Python 3.13's magic number that are unchecked-hash based.
"""

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.infra.test_statemachine_definitions import load_template

ROOT = Path(__file__).resolve().parents[2]
LAYER_DIR = ROOT / "layers" / "core"
# What the AWS Lambda python3.13 runtime holds (boto3 and its dependencies): the local cloud's
# runtime venv installs exactly this list.
RUNTIME_REQUIREMENTS = ROOT / "requirements" / "lambda-runtime.txt"
NEVER_IN_LAYER = {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "urllib3"}
# The extras the core uses: powertools' Tracer needs the X-Ray SDK.
EXTRAS = {"aws-lambda-powertools": {"tracer"}}
PYC_FLAGS_UNCHECKED_HASH = 0b01  # PEP 552: bit 0 hash-based, bit 1 check_source (clear)


def pins(path: Path) -> dict[str, str]:
    """name -> version of every requirement line of a requirements file (each must be ``==``)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        specifiers = list(requirement.specifier)
        assert [s.operator for s in specifiers] == ["=="], f"{path.name}: {line} is not pinned"
        found[canonicalize_name(requirement.name)] = specifiers[0].version
    return found


def layer_pins() -> dict[str, str]:
    return pins(LAYER_DIR / "requirements.txt")


def test_template_builds_the_layer_with_its_makefile() -> None:
    # Given the template's core layer
    layer = load_template()["Resources"]["CoreLayer"]
    # Then sam build runs layers/core/Makefile (build-CoreLayer), not its python builder
    assert layer["Properties"]["ContentUri"].rstrip("/") == "layers/core"
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert "build-CoreLayer:" in (LAYER_DIR / "Makefile").read_text()


def test_layer_ships_nothing_the_runtime_provides() -> None:
    # Given the layer's pins and what the python3.13 runtime holds
    runtime = set(pins(RUNTIME_REQUIREMENTS)) | NEVER_IN_LAYER
    # Then the layer pins none of them (a layer copy would shadow the runtime's)
    assert set(layer_pins()) & runtime == set()


def test_layer_requirements_are_closed_under_their_dependencies() -> None:
    # Given the layer's pins (installed with --no-deps) and the runtime's packages
    layer = layer_pins()
    available = pins(RUNTIME_REQUIREMENTS) | layer
    missing = []
    for name, version in layer.items():
        # (the dev venv holds the same versions: their metadata is what the layer ships)
        distribution = importlib.metadata.distribution(name)
        assert distribution.version == version, f"dev venv has {name} {distribution.version}, layer {version}"
        for line in distribution.requires or []:
            requirement = Requirement(line)
            wanted = EXTRAS.get(name, set()) | {""}
            if requirement.marker and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in wanted
            ):
                continue
            # Then every dependency is in the layer or the runtime, at a version it accepts
            dependency = canonicalize_name(requirement.name)
            if dependency not in available or available[dependency] not in requirement.specifier:
                missing.append(f"{name} needs {requirement} (have {available.get(dependency)})")
    assert missing == []


def test_build_installs_without_resolution_then_compiles(tmp_path: Path) -> None:
    # Given the layer's build as sam build runs it (dry run: nothing installed)
    dry = subprocess.run(
        ["make", "--dry-run", "--no-print-directory", "build-CoreLayer", f"ARTIFACTS_DIR={tmp_path}"],
        cwd=LAYER_DIR,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = " ".join(dry.replace("\\\n", " ").split()).split(" -m ")
    install = next(i for i, part in enumerate(lines) if part.startswith("pip install"))
    compile_all = next(i for i, part in enumerate(lines) if part.startswith("compileall"))
    # Then pip installs exactly the pinned requirements (no dependency of theirs: no botocore)
    assert "--no-deps" in lines[install].split()
    assert "--requirement requirements.txt" in lines[install]
    assert "--no-compile" in lines[install].split()  # timestamp .pyc would go stale in the zip
    # and the whole layer is compiled afterwards, unchecked-hash based
    assert compile_all > install
    assert "--invalidation-mode unchecked-hash" in lines[compile_all]
    assert str(tmp_path / "python") in lines[compile_all]


@pytest.mark.skipif(sys.version_info[:2] != (3, 13), reason="the bytecode step refuses any Python but 3.13")
def test_bytecode_step_writes_unchecked_hash_pyc_for_python_313(tmp_path: Path) -> None:
    # Given a layer tree with a package in source form
    package = tmp_path / "python" / "sample"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    # When the Makefile's bytecode step runs on it with this (3.13) interpreter
    subprocess.run(
        ["make", "--no-print-directory", "bytecode", f"ARTIFACTS_DIR={tmp_path}", f"PYTHON={sys.executable}"],
        cwd=LAYER_DIR,
        capture_output=True,
        check=True,
    )
    # Then the .pyc is where Python 3.13 looks for it, with its magic number, hash based and
    # never checked against the source (valid whatever the zip does to timestamps)
    pyc = Path(importlib.util.cache_from_source(str(package / "__init__.py")))
    header = pyc.read_bytes()[:16]
    assert header[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(header[4:8], "little") == PYC_FLAGS_UNCHECKED_HASH
