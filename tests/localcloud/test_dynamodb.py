"""DynamoDB conditional writes are atomic: of concurrent writers racing on one condition,
exactly one wins (what the scaling lock and the registry's optimistic concurrency rely on)."""

import threading
import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError


def test_concurrent_conditional_writes_have_exactly_one_winner(aws: Callable[[str], Any]) -> None:
    dynamodb = aws("dynamodb")
    table = f"vsa-lock-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        for round_ in range(30):
            key = {"pk": {"S": f"lock-{round_}"}}
            dynamodb.put_item(TableName=table, Item=key)
            winners: list[str] = []
            losers: list[str] = []
            start = threading.Barrier(32)

            def take(
                owner: str,
                key: dict[str, Any] = key,
                start: threading.Barrier = start,
                winners: list[str] = winners,
                losers: list[str] = losers,
            ) -> None:
                start.wait()
                try:
                    dynamodb.update_item(
                        TableName=table,
                        Key=key,
                        UpdateExpression="SET holder = :me",
                        ConditionExpression="attribute_not_exists(holder)",
                        ExpressionAttributeValues={":me": {"S": owner}},
                    )
                    winners.append(owner)
                except ClientError as error:
                    losers.append(error.response["Error"]["Code"])

            threads = [threading.Thread(target=take, args=(f"w{i}",)) for i in range(32)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(winners) == 1, winners
            assert losers == ["ConditionalCheckFailedException"] * 31
            holder = dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]["holder"]["S"]
            assert holder == winners[0]
    finally:
        dynamodb.delete_table(TableName=table)
