"""The registry table serves many arrays (issue #16 item 5): a controller is found by its instance
id through an index (never a Scan), history items expire (TTL), and the roles hold exactly the
grants these calls need.

AWS's documents: a global secondary index is queried by its ARN, ``table/<name>/index/<index>``
("IAM policy to read, write, update, and delete access on a DynamoDB table": Query on
``index/*`` apart from the table); TTL deletes an item once the epoch seconds in its TTL
attribute have passed ("Using time to live (TTL) in DynamoDB").
"""

import json
from pathlib import Path
from typing import Any

from tests.infra.test_iam_least_privilege import statements
from tests.infra.test_statemachine_definitions import load_template
from vsa_core.arrays.aws_registry import EXPIRES_AT
from vsa_core.naming import INSTANCE_INDEX

ROOT = Path(__file__).resolve().parents[2]
INDEX_ARN = {"Sub": f"${{RegistryTable.Arn}}/index/{INSTANCE_INDEX}"}
SCANNING_ROLES = {
    "ApiArraysRole/arrays-registry",
    "TaskPublishDemandRole/publish-demand",
    "TaskHealthCheckRole/health-check",
}
"""The only roles that may Scan the registry: GET /arrays, the every-minute demand publisher and
the scheduled health check read every array (not an event's hot path; see docs/architecture.md,
"Many arrays")."""


def table() -> dict[str, Any]:
    props: dict[str, Any] = load_template()["Resources"]["RegistryTable"]["Properties"]
    return props


def create_table_arguments(name: str) -> dict[str, Any]:
    """CreateTable's arguments for a registry table exactly as template.yaml declares it (keys,
    the instances index, billing); its TTL is ``time_to_live()`` (UpdateTimeToLive)."""
    props = table()
    return {
        "TableName": name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "GlobalSecondaryIndexes": props["GlobalSecondaryIndexes"],
        "BillingMode": props["BillingMode"],
    }


def time_to_live() -> dict[str, Any]:
    spec: dict[str, Any] = table()["TimeToLiveSpecification"]
    return spec


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def test_the_instances_index_is_the_one_the_core_queries() -> None:
    # Given the registry table / Then it has the index the core names, on instanceId (+ sk), keys only
    indexes = {i["IndexName"]: i for i in table()["GlobalSecondaryIndexes"]}
    assert list(indexes) == [INSTANCE_INDEX]
    index = indexes[INSTANCE_INDEX]
    assert index["KeySchema"] == [
        {"AttributeName": "instanceId", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert {"AttributeName": "instanceId", "AttributeType": "S"} in table()["AttributeDefinitions"]


def test_history_items_expire_by_the_attribute_the_workflow_writes() -> None:
    # Given the table's TTL / Then it reads the attribute the core names
    assert table()["TimeToLiveSpecification"] == {"AttributeName": EXPIRES_AT, "Enabled": True}
    # And ScaleArray's RecordDecision writes it, a number, from PlanScale's answer
    definition = json.loads((ROOT / "statemachines" / "scale_array.asl.json").read_text())
    item = definition["States"]["RecordDecision"]["Parameters"]["Item"]
    assert item[EXPIRES_AT] == {"N.$": "States.Format('{}', $outcome.expiresAt)"}


def test_the_retention_is_a_parameter_given_to_every_function() -> None:
    # every function that records a change (the APIs, the backup steps) or a decision (PlanScale)
    # writes its expiry: the variable is a Globals one
    template = load_template()
    parameter = template["Parameters"]["HistoryRetentionDays"]
    assert (parameter["Type"], parameter["Default"], parameter["MinValue"]) == ("Number", 90, 1)
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["VSA_HISTORY_RETENTION_DAYS"] == {"Ref": "HistoryRetentionDays"}


def test_only_the_listing_roles_may_scan_the_registry() -> None:
    # Given every role statement / Then dynamodb:Scan is granted only where every array is read
    scanning = {where for where, s in statements() if "dynamodb:Scan" in _actions(s)}
    assert scanning == SCANNING_ROLES


def test_the_controller_trigger_may_only_query_the_instances_index_and_read_items() -> None:
    # Given on_controller_event's role / Then its DynamoDB grants are Query on the index (is an
    # instance a controller?) and GetItem on the table (is a group's array this deployment's?)
    dynamodb = [
        (where, s)
        for where, s in statements()
        if where.startswith("OnControllerEventRole/") and any(a.startswith("dynamodb:") for a in _actions(s))
    ]
    assert [(s["Action"], s["Resource"]) for _, s in dynamodb] == [
        ("dynamodb:Query", INDEX_ARN),
        ("dynamodb:GetItem", {"GetAtt": "RegistryTable.Arn"}),
    ]


def test_the_controller_steps_query_the_index_and_no_longer_scan() -> None:
    granted = [s for where, s in statements() if where.startswith("TaskControllerRole/")]
    on_index = [s for s in granted if s["Resource"] == INDEX_ARN]
    assert [_actions(s) for s in on_index] == [["dynamodb:Query"]]
    assert not any("dynamodb:Scan" in _actions(s) for s in granted)
