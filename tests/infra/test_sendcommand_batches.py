"""Every SSM SendCommand the product sends names at most 50 instances.

AWS Systems Manager API Reference, SendCommand
(https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html):
InstanceIds "Array Members: Minimum number of 0 items. Maximum number of 50 items." ("You can
specify a maximum of 50 IDs"); more is a ValidationException, and the local cloud refuses it too
(tests/localcloud/test_ssm_limits.py). An array declares any number of hosts (the spec bounds
them nowhere), so a document meant for every host must go out once per batch.

Static rules, on the workflows as deployed and on the Lambda code:
- an ``ssm:sendCommand`` task's ``InstanceIds`` is either one instance (``States.Array`` of one
  path, or a literal list of at most 50), or the item of a Map whose items are a batch list the
  core produces (``BATCHED``: a field the controller steps fill from
  ``vsa_core.controllers.slots.paths``, whose batches are checked here to hold at most 50), read
  where the step's answer lands: its ResultPath, or a variable its ``Assign`` gives the whole answer
  (``"ctx.$": "$"``: ``$ctx.hostBatches``);
- a ``send_command`` call in ``functions/`` or ``layers/`` passes ``InstanceIds=[one]``.
"""

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_statemachine_definitions import PLACEHOLDER, load_template, state_machines
from tests.specs import BASE
from vsa_core.arrays.spec import ArraySpec
from vsa_core.controllers import slots
from vsa_core.controllers.batches import SEND_COMMAND_MAX_INSTANCE_IDS

ROOT = Path(__file__).resolve().parents[2]
SEND = ":ssm:sendCommand"

BATCHED = {"hostBatches"}
"""Fields of a controller step's answer that hold hosts in batches SendCommand accepts
(``slots.Paths.host_batches``, answered by the ``prepare`` and ``locate`` steps)."""

BATCHING_STEPS = {"prepare", "locate"}
"""Controller steps (``vsa_core/controllers/aws_*.py``) answering ``slots.paths(...).as_dict()``."""

SINGLE = re.compile(r"States\.Array\((\$[\w.\[\]-]+)\)")


def rendered(props: dict[str, Any]) -> dict[str, Any]:
    text = (ROOT / props["DefinitionUri"]).read_text()
    return json.loads(PLACEHOLDER.sub(lambda m: f"resolved-{m.group(1)}", text))  # type: ignore[no-any-return]


def _inner(state: dict[str, Any]) -> list[dict[str, Any]]:
    found = [branch["States"] for branch in state.get("Branches", [])]
    found += [state[key]["States"] for key in ("Iterator", "ItemProcessor") if key in state]
    return found


def sends(states: dict[str, Any], maps: tuple[tuple[str, dict[str, Any]], ...] = ()) -> Iterator[Any]:
    """(name, state, enclosing Maps innermost last) of every sendCommand task, at any depth."""
    for name, state in states.items():
        if state.get("Type") == "Task" and state.get("Resource", "").endswith(SEND):
            yield name, state, maps
        for inner in _inner(state):
            enclosing = (*maps, (name, state)) if state.get("Type") == "Map" else maps
            yield from sends(inner, enclosing)


def producers(states: dict[str, Any]) -> dict[str, set[str]]:
    """Where a task_controller step's answer lands (its ResultPath, or ``$name`` for a variable
    assigned the whole answer) -> the steps whose answer lands there (anywhere in the machine)."""
    found: dict[str, set[str]] = {}
    for state in states.values():
        step = state.get("Parameters", {}).get("step") if isinstance(state.get("Parameters"), dict) else None
        if state.get("Type") == "Task" and "TaskControllerFunctionArn" in state.get("Resource", "") and step:
            landing = [state.get("ResultPath", "$")]
            landing += [
                "$" + k.removesuffix(".$") for k, v in (state.get("Assign") or {}).items() if v == "$"
            ]
            for path in landing:
                if path is not None:
                    found.setdefault(path, set()).add(step)
        for inner in _inner(state):
            for path, steps in producers(inner).items():
                found.setdefault(path, set()).update(steps)
    return found


def refusals(definition: dict[str, Any]) -> list[str]:
    """``state: why`` for every sendCommand whose instances are not known to be at most 50."""
    refused = []
    made = producers(definition["States"])
    for name, state, maps in sends(definition["States"]):
        parameters = state.get("Parameters", {})
        literal = parameters.get("InstanceIds")
        if isinstance(literal, list):
            if len(literal) > SEND_COMMAND_MAX_INSTANCE_IDS:
                refused.append(f"{name}: {len(literal)} literal instance ids")
            continue
        source = parameters.get("InstanceIds.$")
        if not isinstance(source, str):
            refused.append(f"{name}: no InstanceIds")
            continue
        if SINGLE.fullmatch(source):
            continue  # one instance
        if not _from_batch(source, maps, made):
            refused.append(f"{name}: {source}")
    return refused


def _from_batch(source: str, maps: tuple[tuple[str, dict[str, Any]], ...], made: dict[str, set[str]]) -> bool:
    """Whether ``source`` is the current item of the innermost Map, and that Map iterates a batch
    list a controller step produces (``<where its answer lands>.<a BATCHED field>``)."""
    if not maps or not source.startswith("$.") or "." in source[2:]:
        return False
    _, the_map = maps[-1]
    selector = the_map.get("ItemSelector", the_map.get("Parameters", {}))
    if selector.get(f"{source[2:]}.$") != "$$.Map.Item.Value":
        return False
    items = the_map.get("ItemsPath", "$")
    parent, _, field = items.rpartition(".")
    return field in BATCHED and bool(made.get(parent, set()) & BATCHING_STEPS) and len(maps) == 1


WORKFLOWS = state_machines()


@pytest.mark.parametrize(("name", "props"), WORKFLOWS, ids=[n for n, _ in WORKFLOWS])
def test_every_sendcommand_names_at_most_50_instances(name: str, props: dict[str, Any]) -> None:
    # Given a workflow as deployed
    definition = rendered(props)
    # When every SendCommand task's InstanceIds is traced to where it comes from
    refused = refusals(definition)
    # Then each names one instance or one batch the core made of at most 50
    assert refused == [], (
        f"{name}: SendCommand takes at most {SEND_COMMAND_MAX_INSTANCE_IDS} InstanceIds; send per batch "
        f"(a Map over a controller step's hostBatches) or per instance: {refused}"
    )


def test_the_workflows_send_host_documents_per_batch() -> None:
    # The two host fan-outs (bootstrap's undo, drain's disconnect) are batched Maps, not gone
    found = {
        (workflow, name)
        for workflow, props in WORKFLOWS
        for name, _, maps in sends(rendered(props)["States"])
        if maps and maps[-1][1].get("ItemsPath", "").endswith(".hostBatches")
    }
    assert found == {
        ("BootstrapControllerStateMachine", "UndoPathsBatch"),
        ("DrainControllerStateMachine", "SendDisconnect"),
    }


def test_the_batches_the_controller_steps_answer_hold_at_most_50_hosts() -> None:
    # Given an array with 120 hosts (nothing in the spec bounds them)
    spec = ArraySpec.model_validate(
        {
            **BASE,
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "minControllers": 1,
            "maxControllers": 2,
            "hosts": [{"instanceId": f"i-0a1b2c3d4e5f6{n:04d}"} for n in range(120)],
        }
    )
    # When the controller steps answer its paths (prepare and locate spread this dict)
    answer = slots.paths(spec, ("vol-0a1b2c3d4e5f60001",)).as_dict()
    # Then every batched field holds every host once, at most 50 to a batch
    for field in BATCHED:
        batches = answer[field]
        assert [len(b) for b in batches] == [50, 50, 20]
        assert [i for b in batches for i in b] == [h.instance_id for h in spec.hosts]


def test_both_controller_steps_answer_the_batches() -> None:
    # The steps BATCHING_STEPS names put the paths (and so hostBatches) into their answer
    steps = ROOT / "layers" / "core" / "vsa_core" / "controllers"
    tree = ast.Module(
        body=[ast.parse(p.read_text()) for p in sorted(steps.glob("aws_*.py"))], type_ignores=[]
    )
    spreading = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(
            isinstance(inner, ast.Attribute)
            and inner.attr == "as_dict"
            and "slots.paths" in ast.unparse(inner)
            for inner in ast.walk(node)
        )
    }
    assert spreading >= BATCHING_STEPS


def _send_per_item(items: str) -> dict[str, Any]:
    """A Map over the list at ``items`` whose iteration sends one command to the item's hosts."""
    send = {
        "Type": "Task",
        "Resource": f"arn:aws:states:::aws-sdk{SEND}",
        "Parameters": {"DocumentName": "d", "InstanceIds.$": "$.hosts"},
        "End": True,
    }
    return {
        "Type": "Map",
        "ItemsPath": items,
        "ItemSelector": {"hosts.$": "$$.Map.Item.Value"},
        "ItemProcessor": {"StartAt": "Send", "States": {"Send": send}},
        "End": True,
    }


def test_a_whole_host_list_is_refused() -> None:
    # Given the shape the check exists to refuse: one command to every host of the array
    definition = {
        "States": {
            "Locate": {
                "Type": "Task",
                "Resource": "resolved-TaskControllerFunctionArn",
                "Parameters": {"step": "locate"},
                "ResultPath": "$.ctx",
                "Next": "DisconnectPaths",
            },
            "DisconnectPaths": {
                "Type": "Task",
                "Resource": f"arn:aws:states:::aws-sdk{SEND}",
                "Parameters": {"DocumentName": "d", "InstanceIds.$": "$.ctx.hosts"},
                "End": True,
            },
        }
    }
    # Then it is refused, and so is a Map over a list nobody batched
    assert refusals(definition) == ["DisconnectPaths: $.ctx.hosts"]
    unbatched = {
        "States": {
            "PerHost": _send_per_item("$.ctx.hostGroups"),
        }
    }
    assert refusals(unbatched) == ["Send: $.hosts"]


def test_a_batch_list_held_in_a_variable_is_followed() -> None:
    # Given a Map over the batches of a controller step's answer kept in a variable ($ctx)
    def machine(items: str) -> dict[str, Any]:
        return {
            "States": {
                "Locate": {
                    "Type": "Task",
                    "Resource": "resolved-TaskControllerFunctionArn",
                    "Parameters": {"step": "locate"},
                    "ResultPath": None,
                    "Assign": {"ctx.$": "$"},
                    "Next": "PerBatch",
                },
                "PerBatch": _send_per_item(items),
            }
        }

    # Then its batches are the step's; a variable no controller step filled is refused
    assert refusals(machine("$ctx.hostBatches")) == []
    assert refusals(machine("$other.hostBatches")) == ["Send: $.hosts"]


def _send_command_calls() -> Iterator[tuple[str, ast.Call]]:
    for folder in ("functions", "layers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "send_command"
                ):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", node


def test_the_lambdas_send_each_command_to_one_instance() -> None:
    # Given every send_command call in the Lambda code and the core
    calls = list(_send_command_calls())
    assert calls, "no send_command call found: the scan is looking in the wrong place"
    # Then each passes InstanceIds as a one-element list (a host fan-out is one call per host)
    refused = []
    for where, call in calls:
        given = {k.arg: k.value for k in call.keywords}
        ids = given.get("InstanceIds")
        if not (isinstance(ids, ast.List) and len(ids.elts) == 1):
            refused.append(f"{where}: InstanceIds={ast.unparse(ids) if ids else '(none)'}")
    assert refused == [], f"SendCommand takes at most {SEND_COMMAND_MAX_INSTANCE_IDS} InstanceIds: {refused}"


def test_template_has_the_controller_workflows() -> None:
    names = set(load_template()["Resources"])
    assert {"BootstrapControllerStateMachine", "DrainControllerStateMachine"} <= names
