"""ReconcileArray's record on the array's registry item (``reconcile*`` attributes: execution,
state, step, version, startedAt, updatedAt, error), which ``GET /arrays/{id}`` shows, and the
hosts waiting to be disconnected (``pendingHostRemovals``). The workflow writes the final state
itself (ASL), conditional on being the recorded execution."""

import json
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from vsa_core.arrays.aws_registry import array_key
from vsa_core.errors import ConflictError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

WAITING_FOR_LOCK = "waiting for the array lock"
CREATING_VOLUMES = "creating volumes"
"""The step a run records while it creates owned volumes, before it takes the lock (then the volumes)."""


def start(
    dynamodb: "DynamoDBClient", table: str, array_id: str, execution: str, version: int, now: str
) -> None:
    """The API started ``execution`` for spec ``version``: the array is converging."""
    dynamodb.update_item(
        TableName=table,
        Key=array_key(array_id),
        UpdateExpression=(
            "SET reconcileExecution = :e, reconcileState = :s, reconcileStep = :step, "
            "reconcileVersion = :v, reconcileStartedAt = :now, reconcileUpdatedAt = :now "
            "REMOVE reconcileError"
        ),
        ConditionExpression="attribute_exists(pk)",
        ExpressionAttributeValues={
            ":e": {"S": execution},
            ":s": {"S": "converging"},
            ":step": {"S": WAITING_FOR_LOCK},
            ":v": {"S": str(version)},
            ":now": {"S": now},
        },
    )


def progress(dynamodb: "DynamoDBClient", table: str, array_id: str, owner: str, step: str, now: str) -> bool:
    """The current step, while ``owner`` is the recorded execution (a later apply's run, still
    waiting for the lock, is recorded over it: then nothing is written). Whether written."""
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="SET reconcileStep = :step, reconcileUpdatedAt = :now",
            ConditionExpression="reconcileExecution = :me",
            ExpressionAttributeValues={":step": {"S": step}, ":now": {"S": now}, ":me": {"S": owner}},
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return False
    return True


def clear_host_removals(dynamodb: "DynamoDBClient", table: str, array_id: str, hosts: list[str]) -> None:
    """Hosts disconnected: no longer pending (one an apply dropped again since stays dropped)."""
    if hosts:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="DELETE pendingHostRemovals :done",
            ExpressionAttributeValues={":done": {"SS": hosts}},
        )


def clear_volume_deletions(
    dynamodb: "DynamoDBClient", table: str, array_id: str, volume_ids: list[str]
) -> None:
    """Volumes deleted (or never to be deleted): no longer pending."""
    if volume_ids:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="DELETE pendingVolumeDeletions :done",
            ExpressionAttributeValues={":done": {"SS": volume_ids}},
        )


def add_volume_deletions(
    dynamodb: "DynamoDBClient", table: str, array_id: str, version: int, volume_ids: tuple[str, ...]
) -> None:
    """Owned volumes to delete once detached, asked by an apply that stores no new spec
    (conditional on the version it read, as the registry's ``put``, which adds them in the
    write that stores a new spec)."""
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="ADD pendingVolumeDeletions :gone",
            ConditionExpression="version = :expected",
            ExpressionAttributeValues={":gone": {"SS": list(volume_ids)}, ":expected": {"N": str(version)}},
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        raise ConflictError(
            f"array {array_id!r} changed since version {version}: read it and apply again"
        ) from None


def set_rekey_stages(
    dynamodb: "DynamoDBClient", table: str, array_id: str, stages: dict[str, dict[str, str]]
) -> None:
    """A key rotation's progress (``RegisteredArray.rekey_stages``, ``keysRotation``; none:
    removed), whole: the API clears what a finished rotation left as a new one begins, then
    ReconcileArray's rekey phase writes it under the array lock (one writer at a time)."""
    if stages:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="SET keysRotation = :stages",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":stages": {"S": json.dumps(stages, sort_keys=True)}},
        )
    else:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="REMOVE keysRotation",
            ConditionExpression="attribute_exists(pk)",
        )
