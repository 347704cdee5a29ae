"""Every workflow uses only the fields the Amazon States Language documents.

Step Functions accepts some fields it does not document (a ``Comment`` inside a ``Retry`` entry,
say) and a local emulator may accept more; neither is a contract. The sets below are the fields
of the specification (https://states-language.net/spec.html) and of the Step Functions
developer guide's page for each state type, both query languages included: JSONPath
(``InputPath``, ``Parameters``, ``ResultSelector``, ``ResultPath``, ``OutputPath``, the ``*Path``
variants) and JSONata (``QueryLanguage``, ``Arguments``, ``Output``, ``Items``), with workflow
variables (``Assign``) in both. A field of one query language in a state of the other is refused
too. What a state's text says goes in its own ``Comment``.
"""

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = sorted((ROOT / "statemachines").glob("*.asl.json"))

TOP_LEVEL = {"Comment", "StartAt", "States", "TimeoutSeconds", "Version", "QueryLanguage"}
SUB_WORKFLOW = {"Comment", "StartAt", "States"}  # a Parallel branch, a Map's Iterator
ITEM_PROCESSOR = SUB_WORKFLOW | {"ProcessorConfig"}

COMMON = {"Type", "Comment", "QueryLanguage"}
FLOW = {"Next", "End"}
IO = {"InputPath", "OutputPath", "Output"}
RESULT = {"Parameters", "Arguments", "ResultSelector", "ResultPath"}
ERRORS = {"Retry", "Catch"}
STATE_FIELDS: dict[str, set[str]] = {
    "Pass": COMMON | FLOW | IO | {"Parameters", "Result", "ResultPath", "Assign"},
    "Task": COMMON | FLOW | IO | RESULT | ERRORS | {"Resource", "Assign", "Credentials"}
    | {"TimeoutSeconds", "TimeoutSecondsPath", "HeartbeatSeconds", "HeartbeatSecondsPath"},
    "Choice": COMMON | IO | {"Choices", "Default", "Assign"},
    "Wait": COMMON | FLOW | IO | {"Seconds", "SecondsPath", "Timestamp", "TimestampPath", "Assign"},
    "Succeed": COMMON | IO,
    "Fail": COMMON | {"Error", "ErrorPath", "Cause", "CausePath"},
    "Parallel": COMMON | FLOW | IO | RESULT | ERRORS | {"Branches", "Assign"},
    "Map": COMMON | FLOW | IO | ERRORS | {"Assign", "ResultSelector", "ResultPath", "Label"}
    | {"ItemProcessor", "Iterator", "ItemsPath", "Items", "ItemSelector", "Parameters"}
    | {"ItemReader", "ItemBatcher", "ResultWriter", "MaxConcurrency", "MaxConcurrencyPath"}
    | {"ToleratedFailurePercentage", "ToleratedFailurePercentagePath"}
    | {"ToleratedFailureCount", "ToleratedFailureCountPath"},
}  # fmt: skip
RETRIER = {
    "ErrorEquals",
    "IntervalSeconds",
    "MaxAttempts",
    "BackoffRate",
    "MaxDelaySeconds",
    "JitterStrategy",
}
CATCHER = {"ErrorEquals", "Next", "ResultPath", "Output", "Assign"}

# Fields of one query language only (the *Path fields are JSONPath's: JSONata takes an
# expression in the field itself)
JSONPATH_ONLY = {"InputPath", "OutputPath", "Parameters", "ResultSelector", "ResultPath", "Result"}
JSONATA_ONLY = {"Arguments", "Output", "Items"}


def _language_problems(where: str, fields: set[str], language: str) -> list[str]:
    if language == "JSONata":
        wrong = {f for f in fields if f in JSONPATH_ONLY or f.endswith("Path")}
    else:
        wrong = fields & JSONATA_ONLY
    return [f"{where}: {field} is not a {language} field" for field in sorted(wrong)]


def _unknown(where: str, fields: set[str], allowed: set[str]) -> list[str]:
    return [f"{where}: {field} is not a documented field here" for field in sorted(fields - allowed)]


def _state_problems(where: str, state: dict[str, Any], language: str) -> list[str]:
    kind = state.get("Type")
    if kind not in STATE_FIELDS:
        return [f"{where}: Type {kind!r} is not a state type"]
    language = state.get("QueryLanguage", language)
    problems = _unknown(where, set(state), STATE_FIELDS[kind])
    problems += _language_problems(where, set(state), language)
    for kind_of_entry, allowed in (("Retry", RETRIER), ("Catch", CATCHER)):
        for index, entry in enumerate(state.get(kind_of_entry) or []):
            entry_at = f"{where}.{kind_of_entry}[{index}]"
            problems += _unknown(entry_at, set(entry), allowed)
            problems += _language_problems(entry_at, set(entry) - {"ErrorEquals"}, language)
    for index, branch in enumerate(state.get("Branches") or []):
        problems += _workflow_problems(f"{where}.Branches[{index}]", branch, SUB_WORKFLOW, language)
    if "ItemProcessor" in state:
        problems += _workflow_problems(
            f"{where}.ItemProcessor", state["ItemProcessor"], ITEM_PROCESSOR, language
        )
    if "Iterator" in state:
        problems += _workflow_problems(f"{where}.Iterator", state["Iterator"], SUB_WORKFLOW, language)
    return problems


def _workflow_problems(where: str, workflow: dict[str, Any], allowed: set[str], language: str) -> list[str]:
    problems = _unknown(where, set(workflow), allowed)
    for name, state in (workflow.get("States") or {}).items():
        problems += _state_problems(f"{where}.States.{name}", state, language)
    return problems


def field_problems(definition: dict[str, Any]) -> list[str]:
    """Every field of ``definition`` the Amazon States Language does not document where it is."""
    language = definition.get("QueryLanguage", "JSONPath")
    return _workflow_problems("$", definition, TOP_LEVEL, language)


def test_there_are_workflows_to_check() -> None:
    assert len(DEFINITIONS) >= 6


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_every_field_is_documented(path: Path) -> None:
    problems = field_problems(json.loads(path.read_text()))
    assert not problems, "\n".join(problems)


# --- the check itself, on definitions made for it


def _task(**fields: Any) -> dict[str, Any]:
    return {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "End": True, **fields}


def test_a_comment_inside_a_retrier_or_a_catcher_is_refused() -> None:
    state = _task(
        Retry=[{"ErrorEquals": ["States.Timeout"], "Comment": "why", "MaxAttempts": 2}],
        Catch=[{"ErrorEquals": ["States.ALL"], "Next": "Done", "Comment": "why"}],
    )
    definition = {"StartAt": "T", "States": {"T": state, "Done": {"Type": "Succeed"}}}
    assert field_problems(definition) == [
        "$.States.T.Retry[0]: Comment is not a documented field here",
        "$.States.T.Catch[0]: Comment is not a documented field here",
    ]


def test_misplaced_and_unknown_fields_are_refused_at_every_level() -> None:
    inner = {"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 1, "End": True, "Retry": []}}}
    definition = {
        "StartAt": "P",
        "Version": "1.0",
        "Extra": 1,
        "States": {
            "P": {"Type": "Parallel", "Branches": [inner], "Next": "C"},
            "C": {"Type": "Choice", "Choices": [], "Default": "F", "Next": "F"},
            "F": {"Type": "Fail", "Error": "E", "OutputPath": "$"},
            "X": {"Type": "Loop"},
        },
    }
    assert field_problems(definition) == [
        "$: Extra is not a documented field here",
        "$.States.P.Branches[0].States.W: Retry is not a documented field here",
        "$.States.C: Next is not a documented field here",
        "$.States.F: OutputPath is not a documented field here",
        "$.States.X: Type 'Loop' is not a state type",
    ]


def test_the_jsonata_fields_are_accepted_in_jsonata_states() -> None:
    # Given a JSONata workflow with every state type's JSONata fields
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "T",
        "TimeoutSeconds": 60,
        "States": {
            "T": _task(
                Arguments={"a": "{% $states.input.a %}"},
                Output="{% $states.result %}",
                Assign={"x": 1},
                TimeoutSeconds="{% $timeout %}",
                HeartbeatSeconds=10,
                Credentials={"RoleArn": "arn:aws:iam::123456789012:role/r"},
                Retry=[
                    {
                        "ErrorEquals": ["States.ALL"],
                        "IntervalSeconds": 1,
                        "MaxAttempts": 2,
                        "BackoffRate": 2,
                        "MaxDelaySeconds": 5,
                        "JitterStrategy": "FULL",
                    }
                ],
                Catch=[
                    {
                        "ErrorEquals": ["States.ALL"],
                        "Next": "M",
                        "Output": "{% $states.errorOutput %}",
                        "Assign": {"e": "{% $states.errorOutput %}"},
                    }
                ],
            ),
            "M": {
                "Type": "Map",
                "Items": "{% $x %}",
                "ItemSelector": {"v": "{% $states.context.Map.Item.Value %}"},
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "S",
                    "States": {"S": {"Type": "Succeed"}},
                },
                "MaxConcurrency": 2,
                "ToleratedFailurePercentage": 10,
                "ToleratedFailureCount": 1,
                "Label": "m",
                "Output": {},
                "Assign": {},
                "Next": "C",
            },
            "C": {"Type": "Choice", "Choices": [], "Default": "W", "Output": {}, "Assign": {}},
            "W": {"Type": "Wait", "Seconds": "{% 1 %}", "Next": "P", "Output": {}, "Assign": {}},
            "P": {"Type": "Pass", "Output": {}, "Assign": {}, "Next": "Q"},
            "Q": {
                "Type": "Parallel",
                "Branches": [],
                "Arguments": {},
                "Output": {},
                "Assign": {},
                "Next": "F",
            },
            "F": {"Type": "Fail", "Error": "{% 'E' %}", "Cause": "{% 'c' %}"},
        },
    }
    # Then nothing is refused
    assert field_problems(definition) == []


def test_a_field_of_the_other_query_language_is_refused() -> None:
    jsonata = {
        "QueryLanguage": "JSONata",
        "StartAt": "T",
        "States": {"T": _task(Parameters={}, ResultPath="$.r")},
    }
    assert field_problems(jsonata) == [
        "$.States.T: Parameters is not a JSONata field",
        "$.States.T: ResultPath is not a JSONata field",
    ]
    # a state may set its own query language, and a catcher follows its state's
    jsonpath = {
        "StartAt": "T",
        "States": {"T": _task(Output={}, Catch=[{"ErrorEquals": ["States.ALL"], "Next": "T", "Output": {}}])},
    }
    assert field_problems(jsonpath) == [
        "$.States.T: Output is not a JSONPath field",
        "$.States.T.Catch[0]: Output is not a JSONPath field",
    ]
    jsonpath["States"]["T"]["QueryLanguage"] = "JSONata"
    assert field_problems(jsonpath) == []
