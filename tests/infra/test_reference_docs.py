"""The generated reference pages (docs/configuration.md, docs/api.md) are what the tool writes
from template.yaml, the spec model and openapi.json, and they name everything they describe.

The second check does not trust the generator: it finds the template's parameters with the
template loader the other infra tests use, and the spec's fields by walking the pydantic models'
own fields (not the JSON schema the generator walks), so a generator that drops a field fails.
"""

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from tests.infra.test_statemachine_definitions import load_template
from vsa_core.arrays.spec import ArraySpec

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
API = ROOT / "docs" / "api.md"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "configuration_doc", ROOT / "tools" / "configuration_doc.py"
    )
    assert spec is not None
    assert spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def _models_in(annotation: Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models an annotation holds, each with ``[]`` per list or tuple it sits in."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, suffix
        return
    inner = "[]" if get_origin(annotation) in (tuple, list) else ""
    for arg in get_args(annotation):
        yield from _models_in(arg, suffix + inner)


def field_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every field of ``model`` and its nested models as an operator writes it: ``backup.mode``,
    ``volumes[].volumeId``."""
    for name, field in model.model_fields.items():
        path = prefix + (field.alias or name)
        yield path
        for inner, suffix in _models_in(field.annotation):
            yield from field_paths(inner, f"{path}{suffix}.")


def undocumented(page: str) -> list[str]:
    """The template's parameters and the spec's field paths ``page`` does not name (in code)."""
    names = list(load_template()["Parameters"]) + sorted(set(field_paths(ArraySpec)))
    return [name for name in names if f"`{name}`" not in page]


@pytest.mark.parametrize(
    ("page", "generate"),
    [(CONFIGURATION, "configuration_page"), (API, "api_page")],
    ids=["configuration", "api"],
)
def test_committed_reference_page_is_current(page: Path, generate: str) -> None:
    # Given the committed page / When the tool generates it again / Then they are the same
    expected = getattr(_tool(), generate)()
    committed = page.read_text() if page.exists() else ""
    assert committed == expected, f"{page.relative_to(ROOT)} is out of date: run `make docs` and commit it"


def test_configuration_names_every_parameter_and_spec_field() -> None:
    # Given the template's parameters and the spec model's fields, found without the generator
    assert {"DeploymentName", "backup.schedule", "volumes[].volumeId", "hosts[].mountpoints"} <= {
        *load_template()["Parameters"],
        *field_paths(ArraySpec),
    }
    # Then the page names every one of them
    assert undocumented(CONFIGURATION.read_text()) == [], (
        "run `make docs` (or fix tools/configuration_doc.py)"
    )


def test_a_page_missing_a_field_is_caught() -> None:
    # Given the page with one spec field's row dropped / Then the check names that field
    page = "\n".join(
        line for line in CONFIGURATION.read_text().splitlines() if not line.startswith("| `backup.mode`")
    )
    assert undocumented(page) == ["backup.mode"]


def test_api_page_names_every_operation() -> None:
    # Given openapi.json's operations / Then the API page has a section for each
    document = json.loads((ROOT / "openapi.json").read_text())
    page = API.read_text()
    operations = [(m.upper(), p) for p, methods in document["paths"].items() for m in methods]
    assert operations
    assert [op for op in operations if f"### {op[0]} {op[1]}\n" not in page] == []
