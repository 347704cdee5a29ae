"""DynamoDB conditional writes are atomic: of concurrent writers racing on one condition,
exactly one wins (what the scaling lock and the registry's optimistic concurrency rely on); a
Query reads its partition, of the table or of an index, whatever the table's size (what keeps
an event's work the same with 10 arrays or 1,000)."""

import json
import os
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parents[2]
CLOUD_PYTHON = ROOT / ".localcloud" / "venv" / "bin" / "python"


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


# --- Query reads its partition (vsa_localcloud/dynamodb_keyed.py) -----------------------------------
# "Query finds items based on primary key values", in the table or in a secondary index: DynamoDB
# reads the queried partition, whatever else the table holds (DynamoDB developer guide, "Query
# operations in DynamoDB"). moto walked and sorted the whole table for every Query.


def _slot(array: str, slot: int, instance: str) -> dict[str, Any]:
    return {"pk": {"S": f"ARRAY#{array}"}, "sk": {"S": f"SLOT#{slot:02d}"}, "instanceId": {"S": instance}}


def _fill(dynamodb: Any, table: str, arrays: range) -> None:
    batch: list[dict[str, Any]] = []
    for a in arrays:
        for item in (
            {"pk": {"S": f"ARRAY#a{a}"}, "sk": {"S": "SPEC"}},
            *(_slot(f"a{a}", s, f"i-{a:08x}{s:08x}") for s in range(4)),
            *({"pk": {"S": f"ARRAY#a{a}"}, "sk": {"S": f"DECISION#{d:03d}"}} for d in range(5)),
        ):
            batch.append({"PutRequest": {"Item": item}})
            if len(batch) == 25:
                dynamodb.batch_write_item(RequestItems={table: batch})
                batch = []
    if batch:
        dynamodb.batch_write_item(RequestItems={table: batch})


def _keys(answer: dict[str, Any]) -> list[tuple[str, str]]:
    return [(i["pk"]["S"], i["sk"]["S"]) for i in answer["Items"]]


def test_a_query_answers_its_partition_in_order_with_pages(
    aws: Callable[[str], Any], registry_table: str
) -> None:
    dynamodb = aws("dynamodb")
    _fill(dynamodb, registry_table, range(30))
    # When one array's slots are queried, newest first, two at a time
    pages = dynamodb.get_paginator("query").paginate(
        TableName=registry_table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :slot)",
        ExpressionAttributeValues={":pk": {"S": "ARRAY#a7"}, ":slot": {"S": "SLOT#"}},
        ScanIndexForward=False,
        Limit=2,
        ConsistentRead=True,
    )
    found = [key for page in pages for key in _keys(page)]
    # Then exactly its four slots come back, in descending sort-key order
    assert found == [("ARRAY#a7", f"SLOT#{s:02d}") for s in (3, 2, 1, 0)]
    # And an index query finds a controller by its instance id, keys only
    answer = dynamodb.query(
        TableName=registry_table,
        IndexName="instances",
        KeyConditionExpression="instanceId = :i",
        ExpressionAttributeValues={":i": {"S": f"i-{12:08x}{2:08x}"}},
    )
    assert answer["Items"] == [{**_slot("a12", 2, f"i-{12:08x}{2:08x}")}]
    assert (answer["Count"], answer["ScannedCount"]) == (1, 1)


def test_an_index_query_follows_every_write_to_the_table(
    aws: Callable[[str], Any], registry_table: str
) -> None:
    dynamodb = aws("dynamodb")

    def holder(instance: str) -> list[tuple[str, str]]:
        return _keys(
            dynamodb.query(
                TableName=registry_table,
                IndexName="instances",
                KeyConditionExpression="instanceId = :i AND begins_with(sk, :slot)",
                ExpressionAttributeValues={":i": {"S": instance}, ":slot": {"S": "SLOT#"}},
            )
        )

    dynamodb.put_item(TableName=registry_table, Item=_slot("x", 0, "i-00000000000000001"))
    assert holder("i-00000000000000001") == [("ARRAY#x", "SLOT#00")]
    # an update that changes the indexed attribute in place
    dynamodb.update_item(
        TableName=registry_table,
        Key={"pk": {"S": "ARRAY#x"}, "sk": {"S": "SLOT#00"}},
        UpdateExpression="SET instanceId = :new",
        ExpressionAttributeValues={":new": {"S": "i-00000000000000002"}},
    )
    assert (holder("i-00000000000000001"), holder("i-00000000000000002")) == ([], [("ARRAY#x", "SLOT#00")])
    # a transaction that puts one slot and deletes the other
    dynamodb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": registry_table, "Item": _slot("y", 3, "i-00000000000000003")}},
            {
                "Delete": {
                    "TableName": registry_table,
                    "Key": {"pk": {"S": "ARRAY#x"}, "sk": {"S": "SLOT#00"}},
                }
            },
        ]
    )
    assert (holder("i-00000000000000002"), holder("i-00000000000000003")) == ([], [("ARRAY#y", "SLOT#03")])
    # a cancelled transaction changes nothing
    with pytest.raises(ClientError) as cancelled:
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": registry_table, "Item": _slot("z", 1, "i-00000000000000004")}},
                {
                    "Delete": {
                        "TableName": registry_table,
                        "Key": {"pk": {"S": "ARRAY#y"}, "sk": {"S": "SLOT#03"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert (holder("i-00000000000000004"), holder("i-00000000000000003")) == ([], [("ARRAY#y", "SLOT#03")])
    # a delete through BatchWriteItem
    dynamodb.batch_write_item(
        RequestItems={
            registry_table: [{"DeleteRequest": {"Key": {"pk": {"S": "ARRAY#y"}, "sk": {"S": "SLOT#03"}}}}]
        }
    )
    assert holder("i-00000000000000003") == []


# What a Query reads, counted in the local cloud's own interpreter on moto's DynamoDB: a walk of the
# table is a call of moto's Table.all_items (which lists and sorts every item). Counted, not timed:
# a time ratio on a shared machine fails for the machine's sake (`make bench-arrays` times it).
WALKS = r"""
import json, sys
import boto3
from moto import mock_aws
from moto.dynamodb.models.table import Table

walks = []
walk = Table.all_items


def counted(self):
    walks.append(self.name)
    return walk(self)


Table.all_items = counted
if sys.argv[1] == "patched":
    from vsa_localcloud import dynamodb_keyed

    dynamodb_keyed.apply()
QUERIES = {
    "table": {"KeyConditionExpression": "pk = :v", "ExpressionAttributeValues": {":v": {"S": "ARRAY#a3"}}},
    "index": {
        "IndexName": "instances",
        "KeyConditionExpression": "instanceId = :v",
        "ExpressionAttributeValues": {":v": {"S": "i-0000000300000001"}},
    },
}
with mock_aws():
    db = boto3.client("dynamodb", region_name="us-east-1")
    db.create_table(
        TableName="registry",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "instanceId")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "instances",
                "KeySchema": [{"AttributeName": "instanceId", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )

    def put(a, s):
        item = {
            "pk": {"S": f"ARRAY#a{a}"},
            "sk": {"S": f"SLOT#{s:02d}"},
            "instanceId": {"S": f"i-{a:08x}{s:08x}"},
        }
        db.put_item(TableName="registry", Item=item)

    for a in range(int(sys.argv[2])):
        for s in range(4):
            put(a, s)

    def looked(name, times):
        before = len(walks)
        counts = [db.query(TableName="registry", **QUERIES[name])["Count"] for _ in range(times)]
        return {"walks": len(walks) - before, "counts": counts}

    out = {"table": looked("table", 3), "index": looked("index", 3)}
    put(999, 0)  # a write: the next index Query rebuilds the index's map, once
    out["indexAfterWrite"] = looked("index", 2)
    print(json.dumps(out))
"""


def walks(mode: str, arrays: int) -> dict[str, Any]:
    out = subprocess.run(
        [str(CLOUD_PYTHON), "-c", WALKS, mode, str(arrays)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        # moto's in-process DynamoDB, never the running local cloud the test command points at
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")},
            "PYTHONPATH": str(ROOT / "tools" / "localcloud"),
        },
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_query_reads_its_partition_and_an_index_query_walks_the_table_only_after_a_write() -> None:
    # moto alone: every Query, on the table or an index, walks the whole table (100 arrays' items)
    alone = walks("moto", 100)
    assert (alone["table"]["walks"], alone["index"]["walks"]) == (3, 3)
    # Patched: a table Query reads its partition and never walks; an index Query walks once to
    # build the index's map, then reads from it until a write, after which it walks once again
    patched = walks("patched", 100)
    assert patched["table"] == {"walks": 0, "counts": [4, 4, 4]}
    assert patched["index"] == {"walks": 1, "counts": [1, 1, 1]}
    assert patched["indexAfterWrite"] == {"walks": 1, "counts": [1, 1]}
    # and the answers are moto's own
    assert [alone[k]["counts"] for k in ("table", "index")] == [[4, 4, 4], [1, 1, 1]]
