"""The array registry in the control plane's single DynamoDB table (the only boto3 user here).

Keys: ``pk = ARRAY#<id>``; ``sk = SPEC`` holds the declared spec (JSON), the desired
controller count and a version; ``sk = DECISION#<time>#<execution>`` holds scale decisions
(written by the ScaleArray workflow itself).
"""

import json
from typing import TYPE_CHECKING, Any

from vsa_core.clients import client
from vsa_core.errors import ArrayNotFoundError
from vsa_core.model import ArraySpec, RegisteredArray

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def array_key(array_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"ARRAY#{array_id}"}, "sk": {"S": "SPEC"}}


class ArrayRegistry:
    def __init__(self, table_name: str, dynamodb: "DynamoDBClient | None" = None) -> None:
        self._table = table_name
        self._dynamodb: DynamoDBClient = dynamodb or client("dynamodb")

    def get(self, array_id: str) -> RegisteredArray:
        item = self._dynamodb.get_item(
            TableName=self._table, Key=array_key(array_id), ConsistentRead=True
        ).get("Item")
        if item is None:
            raise ArrayNotFoundError(f"array {array_id!r} is not registered")
        return RegisteredArray(
            spec=ArraySpec.model_validate(json.loads(item["spec"]["S"])),
            desired_controllers=int(item["desiredControllers"]["N"]),
            version=int(item["version"]["N"]),
        )

    def create(self, spec: ArraySpec) -> RegisteredArray:
        """Register a new array at its minimum size; refuses to overwrite an existing one."""
        registered = RegisteredArray(spec=spec, desired_controllers=spec.min_controllers, version=1)
        self._dynamodb.put_item(
            TableName=self._table,
            Item={
                **array_key(spec.array_id),
                "spec": {"S": spec.model_dump_json(by_alias=True)},
                "desiredControllers": {"N": str(registered.desired_controllers)},
                "version": {"N": "1"},
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return registered

    def decisions(self, array_id: str, limit: int = 10) -> list[dict[str, Any]]:
        """The newest scale decisions, newest first, as the workflow recorded them."""
        response = self._dynamodb.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :decision)",
            ExpressionAttributeValues={":pk": {"S": f"ARRAY#{array_id}"}, ":decision": {"S": "DECISION#"}},
            ScanIndexForward=False,
            Limit=limit,
        )
        return [
            {"sk": item["sk"]["S"], **json.loads(item["decision"]["S"])} for item in response.get("Items", [])
        ]
