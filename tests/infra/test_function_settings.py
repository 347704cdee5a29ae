"""Every function's settings against the environment template.yaml gives it.

A function reads a small settings model (its handler's ``settings``, a ``vsa_core.settings.Loader``)
on its first invocation. Here, for every function of the template: its settings load from
exactly its template environment (Globals merged with its own, intrinsics rendered to
placeholders); every variable they read is in that environment and every ``VSA_*`` variable there
is read (the narrowest environment); and without any one of them, or with it empty, the first
invocation fails naming it.
"""

import importlib
import os
from dataclasses import dataclass
from typing import Any

import pytest

from tests.infra.test_statemachine_definitions import load_template
from vsa_core import naming
from vsa_core.settings import Deployment, Loader, SettingsError

OURS = "VSA_"
"""The prefix of the control plane's own variables (powertools' are POWERTOOLS_*)."""


@dataclass(frozen=True)
class FakeContext:
    """What powertools' ``inject_lambda_context`` reads from a Lambda context."""

    function_name: str = "settings-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:settings-test"
    aws_request_id: str = "00000000-0000-4000-8000-000000000000"


def _render(value: Any, parameters: dict[str, Any]) -> str:
    """A variable's value as a deploy gives it: a parameter's default, a placeholder for any other
    intrinsic (a resource's name or ARN: non-empty, unknown until deployed)."""
    if isinstance(value, dict):
        (function, argument), *_ = value.items()
        if function == "Ref" and "Default" in parameters.get(argument, {}):
            return str(parameters[argument]["Default"])
        return f"rendered-{function}-{argument}"
    return str(value)


def functions(template: dict[str, Any]) -> dict[str, str]:
    """Each function's logical id → its handler's module."""
    return {
        name: resource["Properties"]["Handler"].rsplit(".", 1)[0]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def environment(template: dict[str, Any], function: str) -> dict[str, str]:
    """The function's environment: Globals' variables, then its own."""
    shared = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    own = template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {})
    parameters = template.get("Parameters", {})
    return {name: _render(value, parameters) for name, value in {**shared, **own}.items()}


def loader(template: dict[str, Any], function: str) -> Loader[Any]:
    module = importlib.import_module(functions(template)[function])
    found = getattr(module, "settings", None)
    assert isinstance(found, Loader), f"{function}: its handler declares no settings Loader"
    return found


def mismatches(template: dict[str, Any], function: str) -> list[str]:
    """What differs between the variables the function's settings read and its environment."""
    read = set(loader(template, function).model.variables())
    given = {name for name in environment(template, function) if name.startswith(OURS)}
    return [f"{function}: {name} is read but not in its environment" for name in sorted(read - given)] + [
        f"{function}: {name} is in its environment but not read" for name in sorted(given - read)
    ]


TEMPLATE = load_template()
FUNCTIONS = sorted(functions(TEMPLATE))
REQUIRED = [
    (f, str(field.alias))
    for f in FUNCTIONS
    for field in sorted(loader(TEMPLATE, f).model.model_fields.values(), key=lambda x: str(x.alias))
    if field.is_required()
]
"""Every variable a function cannot do without (an optional one, e.g. VSA_BACKUP_COPY_REGIONS,
has its default: the stack's own)."""


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An environment with none of our variables, and no settings loaded."""
    for name in [n for n in os.environ if n.startswith(OURS)]:
        monkeypatch.delenv(name)
    Loader.clear_all()
    yield monkeypatch
    Loader.clear_all()


def test_the_template_has_functions_and_each_declares_its_settings() -> None:
    assert len(FUNCTIONS) >= 14
    for function in FUNCTIONS:
        # every function names its resources after the deployment (vsa_core.naming)
        assert issubclass(loader(TEMPLATE, function).model, Deployment), function


@pytest.mark.parametrize("function", FUNCTIONS)
def test_settings_read_exactly_the_template_environment(function: str) -> None:
    assert mismatches(TEMPLATE, function) == []


@pytest.mark.parametrize("function", FUNCTIONS)
def test_settings_load_from_the_template_environment(function: str) -> None:
    # Given the function's environment as deployed / When its settings load / Then they hold it
    env = environment(TEMPLATE, function)
    settings = loader(TEMPLATE, function).model.from_environment(env)
    for name, field in type(settings).model_fields.items():
        assert str(getattr(settings, name)) == env[str(field.alias)]


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
@pytest.mark.parametrize("empty", [False, True], ids=["missing", "empty"])
@pytest.mark.parametrize(("function", "variable"), REQUIRED)
def test_a_missing_or_empty_variable_fails_the_first_invocation(
    fresh: pytest.MonkeyPatch, function: str, variable: str, empty: bool
) -> None:
    # Given the function's environment without the variable, or with it empty
    for name, value in environment(TEMPLATE, function).items():
        fresh.setenv(name, value)
    if empty:
        fresh.setenv(variable, "")
    else:
        fresh.delenv(variable)
    fresh.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    module = importlib.import_module(functions(TEMPLATE)[function])
    # When it is first invoked, whatever the event / Then it fails naming the variable
    with pytest.raises(SettingsError, match=rf"{variable} is missing or empty: the function needs it for "):
        module.lambda_handler({}, FakeContext())


def test_the_check_finds_a_variable_a_function_lacks_or_does_not_read() -> None:
    # Given a copy of the template whose ApiArrays function lost a variable and gained another
    template = load_template()
    variables = template["Resources"]["ApiArraysFunction"]["Properties"]["Environment"]["Variables"]
    del variables["VSA_DELETE_STATE_MACHINE_ARN"]
    variables["VSA_THAW_IO_DOCUMENT"] = "thaw"
    # Then the check names both
    assert mismatches(template, "ApiArraysFunction") == [
        "ApiArraysFunction: VSA_DELETE_STATE_MACHINE_ARN is read but not in its environment",
        "ApiArraysFunction: VSA_THAW_IO_DOCUMENT is in its environment but not read",
    ]
    # And a Globals variable counts for every function: without the deployment's name, all fail
    del template["Globals"]["Function"]["Environment"]["Variables"][naming.DEPLOYMENT_ENV]
    assert all(mismatches(template, f) for f in FUNCTIONS)


def test_an_out_of_bounds_number_names_its_variable() -> None:
    env = environment(TEMPLATE, "OnIopsAlarmFunction") | {"VSA_ALARM_REARM_SECONDS": "0"}
    with pytest.raises(SettingsError, match="VSA_ALARM_REARM_SECONDS='0'"):
        loader(TEMPLATE, "OnIopsAlarmFunction").model.from_environment(env)
