"""The array lock on DynamoDB (``vsa_core.arrays.lock`` says what it is): take, renew, read.
ScaleArray takes and releases it in its own ASL with the same expressions."""

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from vsa_core.arrays import lock
from vsa_core.arrays.aws_registry import array_key
from vsa_core.errors import ArrayNotFoundError, LockLostError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def _conditional_failed(error: ClientError) -> bool:
    return error.response["Error"]["Code"] == "ConditionalCheckFailedException"


def read(dynamodb: "DynamoDBClient", table: str, array_id: str) -> lock.Lease:
    item = dynamodb.get_item(
        TableName=table,
        Key=array_key(array_id),
        ConsistentRead=True,
        ProjectionExpression=f"pk, {lock.HOLDER_ATTRIBUTE}, {lock.UNTIL_ATTRIBUTE}",
    ).get("Item")
    if item is None:
        raise ArrayNotFoundError(f"array {array_id!r} is not registered")
    holder = item.get(lock.HOLDER_ATTRIBUTE, {}).get("S")
    return lock.Lease(holder=holder, until=int(item.get(lock.UNTIL_ATTRIBUTE, {}).get("N", "0")))


def acquire(
    dynamodb: "DynamoDBClient", table: str, array_id: str, owner: str, lease_seconds: int, now: int
) -> dict[str, Any]:
    """Take the lock for ``owner`` (or keep it: taking it again renews); answers
    ``{acquired, holder, until, lock}`` (``lock`` in words when busy)."""
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression=lock.ACQUIRE_UPDATE,
            ConditionExpression=lock.ACQUIRE_CONDITION,
            ExpressionAttributeValues={
                ":me": {"S": owner},
                ":until": {"N": str(now + lease_seconds)},
                ":now": {"N": str(now)},
            },
        )
    except ClientError as error:
        if not _conditional_failed(error):
            raise
        lease = read(dynamodb, table, array_id)  # raises ArrayNotFoundError when it is gone
        return {"acquired": False, "holder": lease.holder, "until": lease.until, "lock": lease.describe(now)}
    return {"acquired": True, "holder": owner, "until": now + lease_seconds, "lock": "held"}


def renew(
    dynamodb: "DynamoDBClient", table: str, array_id: str, owner: str, lease_seconds: int, now: int
) -> None:
    """Extend ``owner``'s lease; ``LockLostError`` when it no longer holds the lock."""
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression=lock.RENEW_UPDATE,
            ConditionExpression=lock.RENEW_CONDITION,
            ExpressionAttributeValues={":me": {"S": owner}, ":until": {"N": str(now + lease_seconds)}},
        )
    except ClientError as error:
        if not _conditional_failed(error):
            raise
        lease = read(dynamodb, table, array_id)
        raise LockLostError(
            f"array {array_id!r}: {owner} no longer holds the array lock ({lease.describe(now)}): "
            "its lease ran out and another run took it"
        ) from None
