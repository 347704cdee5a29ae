"""Controllers by instance id: the registry's ``instances`` index (``naming.INSTANCE_INDEX``), a
sparse global secondary index of the ``SLOT#nn`` items (the only ones with an ``instanceId``),
keys only. One keyed query answers, whatever the number of arrays in the table.

Kept apart from ``aws_registry`` and light on purpose: ``on_controller_event`` asks it for
every EC2 instance state change in the region (any instance, ours or not) before it starts
anything, and imports nothing heavier for it.
"""

from typing import TYPE_CHECKING

from vsa_core.naming import INSTANCE_INDEX, SLOT_PREFIX

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def slot_keys(dynamodb: "DynamoDBClient", table: str, instance_id: str) -> list[tuple[str, str]]:
    """The keys (pk, sk) of the slots the index lists for the instance (a controller holds one;
    one page). Eventually consistent, as every read of a global secondary index: a slot leased
    in the last moments may be missing (the bootstrap that leased it undoes it if its instance
    goes), one released may still be listed (``ArrayRegistry.find_slot`` reads the slot again)."""
    response = dynamodb.query(
        TableName=table,
        IndexName=INSTANCE_INDEX,
        KeyConditionExpression="instanceId = :instance AND begins_with(sk, :slot)",
        ExpressionAttributeValues={":instance": {"S": instance_id}, ":slot": {"S": SLOT_PREFIX}},
    )
    return [(item["pk"]["S"], item["sk"]["S"]) for item in response.get("Items", [])]
