"""The backup sets in the control plane's single DynamoDB table, under their array's partition
(``pk = ARRAY#<id>``, beside the array's own items: ``vsa_core.arrays.aws_registry``)."""

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from vsa_core.backups.sets import BackupSet
from vsa_core.clients import client
from vsa_core.errors import BackupNotFoundError, ConflictError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BACKUP_PREFIX = "BACKUP#"


def backup_key(array_id: str, backup_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"ARRAY#{array_id}"}, "sk": {"S": f"{BACKUP_PREFIX}{backup_id}"}}


class BackupRegistry:
    """Backup sets under their array: ``pk = ARRAY#<id>, sk = BACKUP#<backup id>`` with the set
    (JSON) and its ``state`` (a plain attribute, so every write is conditional on it: a set
    never moves from a state its writer did not read, e.g. retention never deletes a set that a
    workflow took up again)."""

    def __init__(self, table_name: str, dynamodb: "DynamoDBClient | None" = None) -> None:
        self._table = table_name
        self._dynamodb: DynamoDBClient = dynamodb or client("dynamodb")

    def create(self, backup: BackupSet) -> tuple[bool, BackupSet]:
        """Record a new set; ``(False, the recorded one)`` when that id exists already (a
        repeated scheduled event, a retried request): nothing is overwritten."""
        try:
            self._dynamodb.put_item(
                TableName=self._table,
                Item=self._item(backup),
                ConditionExpression="attribute_not_exists(sk)",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False, self.get(backup.array_id, backup.backup_id)
        return True, backup

    def get(self, array_id: str, backup_id: str) -> BackupSet:
        item = self._dynamodb.get_item(
            TableName=self._table, Key=backup_key(array_id, backup_id), ConsistentRead=True
        ).get("Item")
        if item is None:
            raise BackupNotFoundError(f"array {array_id!r} has no backup set {backup_id!r}")
        return BackupSet.model_validate_json(item["backup"]["S"])

    def sets(self, array_id: str) -> list[BackupSet]:
        """Every set of the array, newest first."""
        paginator = self._dynamodb.get_paginator("query")
        found: list[BackupSet] = []
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :backup)",
            ExpressionAttributeValues={":pk": {"S": f"ARRAY#{array_id}"}, ":backup": {"S": BACKUP_PREFIX}},
            ScanIndexForward=False,
            ConsistentRead=True,
        ):
            found.extend(BackupSet.model_validate_json(item["backup"]["S"]) for item in page.get("Items", []))
        return found

    def save(self, backup: BackupSet, expected_states: tuple[str, ...]) -> BackupSet:
        """Write ``backup`` if the recorded set is in one of ``expected_states``; else
        ``ConflictError`` naming the state it is in."""
        names = {f":s{i}": {"S": state} for i, state in enumerate(expected_states)}
        try:
            self._dynamodb.put_item(
                TableName=self._table,
                Item=self._item(backup),
                ConditionExpression=f"#state IN ({', '.join(names)})",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=names,
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            try:
                now: str = self.get(backup.array_id, backup.backup_id).state
            except BackupNotFoundError:
                now = "gone"
            raise ConflictError(
                f"backup set {backup.backup_id} is {now}, not {' or '.join(expected_states)}: read it again"
            ) from None
        return backup

    def delete(self, array_id: str, backup_id: str) -> None:
        """Forget a set whose snapshots are gone (only one marked ``deleting``)."""
        try:
            self._dynamodb.delete_item(
                TableName=self._table,
                Key=backup_key(array_id, backup_id),
                ConditionExpression="#state = :deleting",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":deleting": {"S": "deleting"}},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    @staticmethod
    def _item(backup: BackupSet) -> dict[str, Any]:
        return {
            **backup_key(backup.array_id, backup.backup_id),
            "backup": {"S": backup.model_dump_json(by_alias=True)},
            "state": {"S": backup.state},
        }
