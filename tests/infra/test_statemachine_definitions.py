"""Every DefinitionUri in the template renders with exactly the substitutions it is given.

Step Functions leaves an unknown ``${Placeholder}`` in the definition as literal text, and a
substitution nobody uses is a sign of a renamed placeholder: both must fail here, before a
deploy. The rendered definition is the one the tests and the local cloud run.
"""

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


class _CfnLoader(yaml.CSafeLoader):
    """YAML loader that keeps CloudFormation short-form tags (!Ref, !GetAtt, !Sub) as data
    (libyaml's safe loader: the pure-Python one took a quarter of a second per parse of the
    template, which dozens of test modules load)."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _tag)


@functools.cache
def _parsed_template() -> dict[str, Any]:
    parsed: dict[str, Any] = yaml.load((ROOT / "template.yaml").read_text(), Loader=_CfnLoader)
    return parsed


def load_template() -> dict[str, Any]:
    """template.yaml as data, parsed once per process; each caller gets its own copy to change."""
    return copy.deepcopy(_parsed_template())


def state_machines() -> list[tuple[str, dict[str, Any]]]:
    resources = load_template()["Resources"]
    return [
        (name, resource["Properties"])
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Serverless::StateMachine"
    ]


def test_template_has_state_machines() -> None:
    # Given the template / Then it declares at least the ScaleArray workflow from a file
    names = [name for name, _ in state_machines()]
    assert "ScaleArrayStateMachine" in names


@pytest.mark.parametrize(("name", "props"), state_machines(), ids=[n for n, _ in state_machines()])
def test_placeholders_match_substitutions(name: str, props: dict[str, Any]) -> None:
    # Given a state machine defined by a file with DefinitionSubstitutions
    assert "DefinitionUri" in props, f"{name}: workflows live in statemachines/, not inline"
    definition = (ROOT / props["DefinitionUri"]).read_text()
    substitutions = props.get("DefinitionSubstitutions", {})
    # When its placeholders are collected
    placeholders = set(PLACEHOLDER.findall(definition))
    # Then every placeholder has a substitution and every substitution is used
    assert placeholders - set(substitutions) == set(), f"{name}: placeholders without a substitution"
    assert set(substitutions) - placeholders == set(), f"{name}: substitutions no placeholder uses"
    # And the rendered definition is valid JSON with no ${...} left
    rendered = PLACEHOLDER.sub(lambda m: f"resolved-{m.group(1)}", definition)
    parsed = json.loads(rendered)
    assert "${" not in json.dumps(parsed)
    assert parsed["StartAt"] in parsed["States"]


@pytest.mark.parametrize(("name", "props"), state_machines(), ids=[n for n, _ in state_machines()])
def test_lambda_tasks_retry_transient_errors(name: str, props: dict[str, Any]) -> None:
    # Given the rendered workflow
    definition = json.loads((ROOT / props["DefinitionUri"]).read_text())
    lambda_tasks = {
        state_name: state
        for state_name, state in definition["States"].items()
        if state.get("Type") == "Task" and ":::lambda:invoke" in state.get("Resource", "")
    }
    # Then each Lambda task retries the standard transient Lambda errors with backoff and jitter
    for state_name, state in lambda_tasks.items():
        retried = {error for rule in state.get("Retry", []) for error in rule["ErrorEquals"]}
        assert {
            "Lambda.ServiceException",
            "Lambda.AWSLambdaException",
            "Lambda.SdkClientException",
            "Lambda.TooManyRequestsException",
        } <= retried, f"{name}.{state_name}"
        assert all(rule.get("JitterStrategy") == "FULL" for rule in state["Retry"]), f"{name}.{state_name}"
        assert "TimeoutSeconds" in state, f"{name}.{state_name} has no timeout"


PATH_FIELDS = {"InputPath", "OutputPath", "ResultPath", "ItemsPath", "Variable"}


def _paths(node: Any) -> list[str]:
    """Every JSONPath (``"field.$": "$..."``) in a definition, recursively."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            is_path = key.endswith(".$") or key in PATH_FIELDS
            if is_path and isinstance(value, str):
                found.append(value)
            found.extend(_paths(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_paths(item))
    return found


@pytest.mark.parametrize(("name", "props"), state_machines(), ids=[n for n, _ in state_machines()])
def test_no_wildcard_projections(name: str, props: dict[str, Any]) -> None:
    # Design rule (docs/localcloud.md, "Step Functions on the local cloud"): the local cloud's engine turns
    # a `$.X[*].Y` projection with exactly one match into a scalar where AWS yields a list, so a
    # workflow that passes the result on behaves differently in tests and in production.
    # Lists are built by Map states (ItemSelector) or Lambdas instead.
    definition = json.loads((ROOT / props["DefinitionUri"]).read_text())
    offending = [p for p in _paths(definition) if "[*]" in p or ".." in p]
    assert offending == [], f"{name}: wildcard JSONPath projections {offending}"


def test_wildcard_rule_catches_a_projection() -> None:
    # The rule above must be able to fail: a projection inside Parameters is found
    definition = {"States": {"P": {"Type": "Pass", "Parameters": {"ids.$": "$.volumes[*].id"}}}}
    assert _paths(definition) == ["$.volumes[*].id"]


@pytest.mark.parametrize(("name", "props"), state_machines(), ids=[n for n, _ in state_machines()])
def test_jsonpath_only(name: str, props: dict[str, Any]) -> None:
    # Design rule (docs/localcloud.md): the local cloud runs JSONata, but the infra tests that walk the
    # definitions (test_static_gate's Parameters check, test_sendcommand_batches) read JSONPath
    # Parameters only: a JSONata state's Arguments would pass them unchecked. Lift this rule
    # together with teaching them JSONata.
    text = (ROOT / props["DefinitionUri"]).read_text()
    assert "JSONata" not in text, f"{name}: use JSONPath (the infra tests do not check JSONata Arguments yet)"


VARIABLE = re.compile(r"\$[A-Za-z_]")
"""A workflow variable's reference (``$name``, ``$name.field``), not the state input (``$.``) or
the context object (``$$.``)."""


def _choice_rules(node: Any) -> list[dict[str, Any]]:
    """Every Choice state's rules in a definition, in Maps too."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("Type") == "Choice":
            found.extend(node.get("Choices", []))
        for value in node.values():
            found.extend(_choice_rules(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_choice_rules(item))
    return found


def _rule_problems(rule: dict[str, Any], guarded: frozenset[str] = frozenset()) -> list[str]:
    problems = []
    if "And" in rule:
        compared = frozenset(r["Variable"] for r in rule["And"] if "Variable" in r and "IsPresent" not in r)
        for operand in rule["And"]:
            problems += _rule_problems(operand, guarded | compared)
    for operand in rule.get("Or", []) + ([rule["Not"]] if "Not" in rule else []):
        problems += _rule_problems(operand)
    variable = rule.get("Variable", "")
    if "IsPresent" in rule and VARIABLE.match(variable) and variable not in guarded:
        problems.append(f"IsPresent on {variable}")
    for key, value in rule.items():
        if key.endswith("Path") and isinstance(value, str) and VARIABLE.match(value):
            problems.append(f"{key} {value}")
    return problems


def variable_rule_problems(definition: dict[str, Any]) -> list[str]:
    """Choice rules the local cloud evaluates differently from AWS when they read variables."""
    return sorted({p for rule in _choice_rules(definition) for p in _rule_problems(rule)})


@pytest.mark.parametrize(("name", "props"), state_machines(), ids=[n for n, _ in state_machines()])
def test_choices_read_variables_as_the_local_cloud_can(name: str, props: dict[str, Any]) -> None:
    # Design rule (docs/localcloud.md, "Step Functions on the local cloud"): the local cloud reads a variable
    # reference through JSONata, where a missing field is undefined, not an error, so `IsPresent`
    # on `$name.field` is always true there (AWS answers false); and a `...Path` comparator reads
    # the state input only. So a workflow tests presence by a count it assigns
    # (`States.ArrayLength`) or on the state input, uses `IsPresent` on a variable only as the
    # guard of a comparison of the same variable in an And (both engines then agree), and keeps a
    # Path comparator's operand in the state input; a bound is a literal or the input's.
    definition = json.loads((ROOT / props["DefinitionUri"]).read_text())
    assert variable_rule_problems(definition) == [], name


def test_variable_rules_catch_what_the_local_cloud_gets_wrong() -> None:
    # The rule above must be able to fail
    definition = {
        "States": {
            "C": {
                "Type": "Choice",
                "Choices": [
                    {"Variable": "$ctx.hosts[0]", "IsPresent": True, "Next": "X"},
                    {"Variable": "$polls", "NumericLessThanPath": "$maxPolls", "Next": "X"},
                    {"Variable": "$.hosts[0]", "IsPresent": True, "Next": "X"},
                    {"Variable": "$polls", "NumericLessThanPath": "$.maxPolls", "Next": "X"},
                    {
                        "And": [
                            {"Variable": "$outcome.rearm", "IsPresent": True},
                            {"Variable": "$outcome.rearm", "BooleanEquals": True},
                        ],
                        "Next": "X",
                    },
                ],
            }
        }
    }
    assert variable_rule_problems(definition) == [
        "IsPresent on $ctx.hosts[0]",
        "NumericLessThanPath $maxPolls",
    ]
