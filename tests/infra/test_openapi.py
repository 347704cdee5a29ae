"""The committed OpenAPI document is exactly what the API's code generates."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_openapi_document_is_current() -> None:
    spec = importlib.util.spec_from_file_location("openapi_tool", ROOT / "tools" / "openapi.py")
    assert spec is not None
    assert spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    committed = (ROOT / "openapi.json").read_text()
    assert committed == tool.generate(), "openapi.json is out of date: run `python tools/openapi.py`"
    assert '"/arrays/{array_id}"' in committed
