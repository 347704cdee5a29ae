"""The backup sets in the control plane's single DynamoDB table, under their array's partition
(``pk = ARRAY#<id>``, beside the array's own items: ``vsa_core.arrays.aws_registry``)."""

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from vsa_core.backups.drills import Drill
from vsa_core.backups.sets import BackupSet
from vsa_core.clients import client
from vsa_core.errors import BackupNotFoundError, ConflictError, DrillNotFoundError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BACKUP_PREFIX = "BACKUP#"
DRILL_PREFIX = "DRILL#"


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


def drill_key(array_id: str, drill_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"ARRAY#{array_id}"}, "sk": {"S": f"{DRILL_PREFIX}{drill_id}"}}


class DrillRegistry:
    """Restore drills under their array: ``pk = ARRAY#<id>, sk = DRILL#<drill id>`` with the
    drill (JSON) and its ``state``; a write that ends a drill is conditional on it running, so a
    drill never changes its verdict once given."""

    def __init__(self, table_name: str, dynamodb: "DynamoDBClient | None" = None) -> None:
        self._table = table_name
        self._dynamodb: DynamoDBClient = dynamodb or client("dynamodb")

    def create(self, drill: Drill) -> tuple[bool, Drill]:
        """Record a new drill; ``(False, the recorded one)`` when that id exists already."""
        try:
            self._dynamodb.put_item(
                TableName=self._table, Item=self._item(drill), ConditionExpression="attribute_not_exists(sk)"
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False, self.get(drill.array_id, drill.drill_id)
        return True, drill

    def get(self, array_id: str, drill_id: str) -> Drill:
        item = self._dynamodb.get_item(
            TableName=self._table, Key=drill_key(array_id, drill_id), ConsistentRead=True
        ).get("Item")
        if item is None:
            raise DrillNotFoundError(f"array {array_id!r} has no drill {drill_id!r}")
        return Drill.model_validate_json(item["drill"]["S"])

    def drills(self, array_id: str) -> list[Drill]:
        """Every drill of the array, newest first."""
        found: list[Drill] = []
        for page in self._dynamodb.get_paginator("query").paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :drill)",
            ExpressionAttributeValues={":pk": {"S": f"ARRAY#{array_id}"}, ":drill": {"S": DRILL_PREFIX}},
            ScanIndexForward=False,
            ConsistentRead=True,
        ):
            found.extend(Drill.model_validate_json(item["drill"]["S"]) for item in page.get("Items", []))
        return found

    def save(self, drill: Drill, *, ending: bool = False) -> Drill:
        """Write ``drill``. While it runs any step may; the write that gives its verdict
        (``ending``) only if the recorded one still runs, else ``ConflictError``. A write
        after the verdict (cleanup's) keeps the recorded state."""
        condition = "#state = :running" if ending else "attribute_exists(sk) AND #state = :state"
        values = {":running": {"S": "running"}} if ending else {":state": {"S": drill.state}}
        try:
            self._dynamodb.put_item(
                TableName=self._table,
                Item=self._item(drill),
                ConditionExpression=condition,
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values,
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            raise ConflictError(f"drill {drill.drill_id} has ended or is gone: read it again") from None
        return drill

    @staticmethod
    def _item(drill: Drill) -> dict[str, Any]:
        return {
            **drill_key(drill.array_id, drill.drill_id),
            "drill": {"S": drill.model_dump_json(by_alias=True)},
            "state": {"S": drill.state},
        }
