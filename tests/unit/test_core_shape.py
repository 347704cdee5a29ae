"""The core's shape holds (issue #16): one sub-package per capability, pure rules in modules that
import no boto3/botocore (not directly, not through another module of the core), the AWS side in
modules whose name says so, no class over 250 lines, every handler under 80 lines, and nothing in
production imports the simulator. Read from the source with ``ast``: nothing is imported."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "layers" / "core" / "vsa_core"
AWS_LIBRARIES = ("boto3", "botocore")
BASE_ADAPTERS = {"vsa_core.clients", "vsa_core.waiters"}
"""The shared base's AWS side: the client factory, Step Functions waiters."""
CAPABILITIES = ("api", "arrays", "backups", "controllers", "health", "reconcile", "scaling")
BASE = [
    "alarm_tuning",
    "clients",
    "errors",
    "instances",
    "naming",
    "nvme",
    "observability",
    "settings",
    "steps",
    "waiters",
]
"""The shared base: the modules directly under vsa_core, the bottom layer of pyproject.toml's
layers contract. Growing it is a decision: a module belongs here only if no capability owns it
and every layer needs it."""
MAX_CLASS_LINES = 250
MAX_HANDLER_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def is_aws(name: str) -> bool:
    return name in BASE_ADAPTERS or name.rsplit(".", 1)[-1].startswith("aws_")


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a import b`` counts ``a`` and ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def core_imports(name: str) -> set[str]:
    return {m for m in imports(MODULES[name]) if m in MODULES and m != name}


def aws_reach(name: str) -> list[str]:
    """The chain from ``name`` to boto3/botocore or an AWS module of the core, if any."""
    seen: set[str] = set()
    stack: list[list[str]] = [[name]]
    while stack:
        chain = stack.pop()
        current = chain[-1]
        if current in seen:
            continue
        seen.add(current)
        if current != name and is_aws(current):
            return chain
        direct = [m for m in imports(MODULES[current]) if m.split(".")[0] in AWS_LIBRARIES]
        if direct:
            return [*chain, direct[0]]
        stack.extend([*chain, m] for m in sorted(core_imports(current)))
    return []


PURE = [n for n in MODULES if not is_aws(n)]


def test_the_core_is_one_sub_package_per_capability_on_a_thin_base() -> None:
    packages = sorted(p.name for p in CORE.iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(CAPABILITIES)
    base = sorted(n for n in MODULES if n.count(".") == 1 and n.split(".")[1] not in CAPABILITIES)
    assert base == sorted(f"vsa_core.{name}" for name in BASE), f"the shared base changes: {base}"


@pytest.mark.parametrize("name", PURE)
def test_a_pure_module_reaches_no_aws_library_and_no_aws_module(name: str) -> None:
    chain = aws_reach(name)
    assert not chain, f"{name} is pure by its name but reaches AWS: {' -> '.join(chain)}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_that_imports_boto3_or_botocore_says_so_in_its_name(name: str) -> None:
    direct = {m.split(".")[0] for m in imports(MODULES[name])} & set(AWS_LIBRARIES)
    assert not direct or is_aws(name), f"{name} imports {sorted(direct)}: name it aws_*.py"


def test_the_rules_see_what_reaches_aws() -> None:
    # Given modules that import botocore directly, or only through another module of the core
    # Then each is found, with the chain that reaches it
    assert aws_reach("vsa_core.arrays.aws_observe")[-1].startswith("botocore")
    assert aws_reach("vsa_core.backups.aws_service")[1].startswith("vsa_core.")
    assert is_aws("vsa_core.clients")
    assert not is_aws("vsa_core.arrays.plan")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_class_in_the_core_exceeds_250_lines(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text())
    sizes = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }
    big = {cls: lines for cls, lines in sizes.items() if lines > MAX_CLASS_LINES}
    assert not big, f"{name}: classes over {MAX_CLASS_LINES} lines: {big}"


@pytest.mark.parametrize(
    "handler", sorted((ROOT / "functions").glob("*/handler.py")), ids=lambda p: p.parent.name
)
def test_every_handler_is_a_thin_adapter_under_80_lines(handler: Path) -> None:
    lines = len(handler.read_text().splitlines())
    assert lines < MAX_HANDLER_LINES, (
        f"{handler.parent.name}/handler.py has {lines} lines: move the work into the core"
    )


def test_production_code_never_imports_the_simulator() -> None:
    simulator = "vsa_core.scaling.simulator"
    production = {n: p for n, p in MODULES.items() if n != simulator}
    production |= {f"{p.parent.name}.handler": p for p in (ROOT / "functions").glob("*/handler.py")}
    importers = sorted(n for n, p in production.items() if simulator in imports(p))
    assert not importers, f"the simulator is for vsactl and the benchmark, not production: {importers}"
