"""ReconcileArray's record on the array's registry item (``reconcile*`` attributes: execution,
state, step, version, startedAt, updatedAt, error), which ``GET /arrays/{id}`` shows, and the
hosts waiting to be disconnected (``pendingHostRemovals``). The workflow writes the final state
itself (ASL), conditional on being the recorded execution."""

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from vsa_core.registry import array_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

WAITING_FOR_LOCK = "waiting for the array lock"


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
