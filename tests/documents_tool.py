"""tools/documents.py as a module for tests (tools/ is not a package): renders and checks the SSM
documents of documents/."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
_NAME = "vsa_documents_tool"


def _load() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, ROOT / "tools" / "documents.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


documents = _load()
