"""A handler's import loads only what its invocations need (issue #16, "Handlers that start fast").

What a Lambda cold start pays first is the import of the handler module (``make
bench-coldstart`` measures it). These tests pin what the cuts bought, so an eager import or an
eager model added back fails here rather than in the next benchmark: each handler is imported
in a fresh interpreter (``sys.modules`` empty of the core), as Lambda does, and then

* no handler has imported the X-Ray SDK (the tracer is created at its first use:
  ``vsa_core.observability.DeferredTracer``) nor the simulator;
* only the two REST APIs import powertools' event handler (which brings asyncio and every
  event data class) and idempotency;
* the two triggers that read no array (``on_iops_alarm``, ``on_controller_event``) import
  neither the registry nor the array spec (whose models are built at import);
* no handler has built a model that most of its invocations do not validate: the backup set's
  (only the backup handlers use them; the arrays API and the health check import them through
  the backup registry), the backups API's request bodies (one per route), the scaling payloads
  (each of their three handlers parses one) and the two lifecycle details (each event validates
  one). Those are ``defer_build`` models, built at their first use. The models a handler
  validates on every invocation (the array spec, the settings, the steps' requests) are built
  at import on purpose: deferring them would move the same work into the first invocation.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/handler.py"))
REST_APIS = {"api_arrays", "api_backups"}
NO_ARRAY_READ = {"on_iops_alarm", "on_controller_event"}

NEVER = {"aws_xray_sdk", "vsa_core.scaling.simulator"}
ONLY_REST_APIS = {
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.utilities.idempotency",
    "asyncio",
}
ARRAY_READS = {"vsa_core.arrays.aws_registry", "vsa_core.backups.aws_registry", "vsa_core.arrays.spec"}
DEFERRED_MODULES = ("vsa_core.backups.sets", "vsa_core.api.aws_backups", "vsa_core.scaling.events")
DEFERRED_MODELS = (
    "vsa_core.controllers.events.LifecycleDetail",
    "vsa_core.controllers.events.StateChangeDetail",
)

# Run in a fresh interpreter: import the handler, then answer which modules are loaded and, for
# every pydantic model the core and the handler define, whether it has been built.
PROBE = """
import importlib, json, sys
from pydantic import BaseModel
importlib.import_module(sys.argv[1] + ".handler")
models = {}
for name, module in list(sys.modules.items()):
    if not name.startswith(("vsa_core.", sys.argv[1] + ".")):
        continue
    for attribute, value in vars(module).items():
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == name:
            models[f"{name}.{attribute}"] = value.__pydantic_complete__
print(json.dumps({"modules": sorted(sys.modules), "models": models}))
"""


def imported_by(handler: str) -> tuple[list[str], dict[str, bool]]:
    """The modules loaded by importing the handler, and each model of the core: built or not."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "functions"), str(ROOT / "layers" / "core")])
    done = subprocess.run(
        [sys.executable, "-c", PROBE, handler], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    answer = json.loads(done.stdout)
    return answer["modules"], answer["models"]


def loaded(modules: list[str], wanted: set[str]) -> set[str]:
    """Which of ``wanted`` (packages count with their submodules) ``modules`` holds."""
    return {w for w in wanted if any(m == w or m.startswith(f"{w}.") for m in modules)}


def deferred(model: str) -> bool:
    return model in DEFERRED_MODELS or model.rsplit(".", 1)[0] in DEFERRED_MODULES


def test_every_handler_is_covered() -> None:
    # Given the functions' packages / Then every one has a handler and the sets above name real ones
    assert len(HANDLERS) >= 12
    assert set(HANDLERS) >= REST_APIS | NO_ARRAY_READ


@pytest.mark.parametrize("handler", HANDLERS)
def test_handler_import_loads_only_what_its_invocations_need(handler: str) -> None:
    # When the handler module is imported in a fresh interpreter, as a cold start does
    modules, models = imported_by(handler)
    # Then the X-Ray SDK and the simulator are not loaded
    assert loaded(modules, NEVER) == set()
    # and the event handler (asyncio with it) and idempotency only by the REST APIs
    if handler not in REST_APIS:
        assert loaded(modules, ONLY_REST_APIS) == set()
    # and a trigger that reads no array loads neither the registry nor the spec
    if handler in NO_ARRAY_READ:
        assert loaded(modules, ARRAY_READS) == set()
    # and no model that most invocations do not validate has been built
    assert [model for model, built in models.items() if built and deferred(model)] == []


def test_the_probe_tells_built_models_from_deferred_ones() -> None:
    # When a handler that loads deferred models (the backup sets, through the backup registry)
    # and validates its steps' request on every invocation is imported
    _, models = imported_by("task_backup")
    # Then the probe saw the deferred ones unbuilt and the request and the settings built (so
    # an empty list above means "not built", never "not seen")
    assert models["vsa_core.backups.sets.BackupSet"] is False
    assert models["vsa_core.backups.steps.Request"] is True
    assert models["task_backup.handler.Settings"] is True
