"""What one health-check run keeps for the next, on the array's registry item (attribute
``health``, JSON): the controllers suspected dead and for how many runs, when the backup
schedule was first seen. Only that attribute is written: never the spec, its version or the
lock, so it races nothing."""

import json
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays.aws_registry import array_key


def load(dynamodb: Any, table: str, array_id: str) -> dict[str, Any]:
    """What the last run kept of the array, or {}."""
    item = dynamodb.get_item(
        TableName=table, Key=array_key(array_id), ProjectionExpression="health", ConsistentRead=True
    ).get("Item", {})
    text = item.get("health", {}).get("S")
    return dict(json.loads(text)) if text else {}


def save(dynamodb: Any, table: str, array_id: str, state: dict[str, Any]) -> bool:
    """Keep ``state`` for the next run; False when the array is gone meanwhile."""
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="SET health = :health",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":health": {"S": json.dumps(state, sort_keys=True)}},
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return False
    return True
