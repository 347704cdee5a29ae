"""The committed OpenAPI document is exactly what the API's code generates."""

import importlib.util
import json
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


def test_every_operation_is_declared_sigv4_only() -> None:
    # the API accepts only SigV4-signed requests (AWS_IAM): a client generated from the document
    # must know to sign, and no operation may declare itself open
    document = json.loads((ROOT / "openapi.json").read_text())
    scheme = document["components"]["securitySchemes"]["sigv4"]
    assert scheme["x-amazon-apigateway-authtype"] == "awsSigv4"
    assert document["security"] == [{"sigv4": []}]
    operations = [op for path in document["paths"].values() for op in path.values()]
    assert operations
    assert all(op.get("security", [{"sigv4": []}]) == [{"sigv4": []}] for op in operations)
