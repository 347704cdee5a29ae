"""The array's volume owners on its registry item, and a lost owner's reservation key. AWS
adapter of ``vsa_core.controllers.ownership``.

``owners`` ({volume id: slot}) is what every serving controller was last told; ``ownerInstances``
({slot: instance id}) which instance held each owner slot then, so that a slot that stops
serving can be fenced by its key even after its slot item is gone; ``ownersHandover`` ({after,
wave}) a handover under way. The key itself is read where the controller printed it, in its last
configure-target report (SSM Run Command's history: ``vsa_core.arrays.aws_reports``): a new boot
is a new key, and the report always has the current one.
"""

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_reports
from vsa_core.arrays.aws_registry import array_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def begin(dynamodb: "DynamoDBClient", table: str, array_id: str, under_way: Mapping[str, Any]) -> None:
    """Record the handover under way (its owners and wave) before its runs are sent."""
    dynamodb.update_item(
        TableName=table,
        Key=array_key(array_id),
        UpdateExpression="SET ownersHandover = :h",
        ConditionExpression="attribute_exists(pk)",
        ExpressionAttributeValues={":h": {"S": json.dumps(dict(under_way), sort_keys=True)}},
    )


def commit(
    dynamodb: "DynamoDBClient",
    table: str,
    array_id: str,
    under_way: Mapping[str, Any],
    instances: Mapping[int, str],
) -> bool:
    """Every run of the handover ``under_way`` (its owners and wave, as ``begin`` recorded it)
    succeeded: its owners are what the serving controllers hold. Only while it is still the
    recorded one: another handover begun since (a second drain, a reconcile) answers for itself,
    and the health check's drift finds any split left uneven. Whether recorded."""
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="SET #o = :o, ownerInstances = :i REMOVE ownersHandover",
            ConditionExpression=(
                "attribute_exists(pk) AND (attribute_not_exists(ownersHandover) OR ownersHandover = :h)"
            ),
            ExpressionAttributeNames={"#o": "owners"},
            ExpressionAttributeValues={
                ":o": {"S": json.dumps(dict(under_way["after"]), sort_keys=True)},
                ":i": {"S": json.dumps({str(k): v for k, v in instances.items()}, sort_keys=True)},
                ":h": {"S": json.dumps(dict(under_way), sort_keys=True)},
            },
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return False
    return True


def owner_instances(item_value: str | None) -> dict[int, str]:
    """``ownerInstances`` as stored (a JSON object of slot → instance id)."""
    return {int(k): str(v) for k, v in json.loads(item_value or "{}").items()}


def stored_instances(dynamodb: "DynamoDBClient", table: str, array_id: str) -> dict[int, str]:
    item = dynamodb.get_item(TableName=table, Key=array_key(array_id), ConsistentRead=True).get("Item", {})
    return owner_instances(item.get("ownerInstances", {}).get("S"))


def reservation_key(ssm: Any, instance_id: str, document: str, array_id: str) -> str | None:
    """The reservation key ``instance_id`` registered on this boot, from its last
    configure-target report of the array (None: no report names one)."""
    report = aws_reports.last_report(ssm, instance_id, (document,), array_id)
    if report is None:
        return None
    fencing = report.body.get("fencing")
    key = fencing.get("key") if isinstance(fencing, dict) else None
    return key if isinstance(key, str) and key.startswith("0x") else None
