"""DynamoDB Query as DynamoDB runs it: from the queried partition, not from a walk of the table.

DynamoDB finds a Query's items by its partition key, in the table or in the index queried: its
cost and time follow the items in that partition, not the table's size. moto's ``Table.query``
builds its candidates from ``Table.all_items()``, which lists and sorts every item of the table,
and keeps those with the queried key, for the table and for an index alike. On a registry of
1,000 arrays (42,000 items, ``make bench-arrays``) one Query took 0.4-0.5 s here, against 9-14
ms with 10 arrays: the local cloud timed a keyed read like a scan.

This keeps moto's query as it is (its key conditions, filters, sort order, pagination, limits,
projections) and narrows only the candidates it starts from, during a Query:

* on the table: the items of the queried partition (moto's own ``Table.items[hash]``);
* on an index: the items whose index partition key is the queried value, from a map per index
  built from the table and rebuilt after any write to the table (``Table.put_item``,
  ``Table.delete_item`` and ``update_item``, whatever the path: PutItem, UpdateItem, BatchWriteItem,
  TransactWriteItems, Step Functions' DynamoDB tasks). A write costs nothing more; the first
  index Query after it rebuilds the map (a walk of the table, as every index Query did before).

Scans and everything else still walk ``all_items()`` unchanged. The local cloud serves DynamoDB
one operation at a time (``providers._serialised``), so nothing here races.
"""

import itertools
import threading
from collections import defaultdict
from typing import Any

_QUERY = threading.local()
_GENERATION = itertools.count(1)


def _written(table: Any) -> None:
    table.__dict__["_vsa_generation"] = next(_GENERATION)


def _index_candidates(table: Any, all_items: Any, index_name: str, key: Any) -> list[Any] | None:
    """The items whose partition key in ``index_name`` is ``key`` (None: not an index we know)."""
    indexes = {i.name: i for i in table.all_indexes()}
    index = indexes.get(index_name)
    if index is None:
        return None
    hashes = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
    if not hashes:
        return None
    generation = table.__dict__.get("_vsa_generation", 0)
    cache = table.__dict__.setdefault("_vsa_index_items", {})
    entry = cache.get(index_name)
    if entry is None or entry[0] != generation:
        by_key: dict[Any, list[Any]] = defaultdict(list)
        for item in all_items(table):
            value = item.attrs.get(hashes[0])
            if value is not None:
                by_key[value].append(item)
        entry = (generation, dict(by_key))
        cache[index_name] = entry
    return list(entry[1].get(key, []))


def apply() -> None:
    """Patch moto's Table and backend (idempotent)."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_vsa_keyed_query", False):
        return
    query, all_items = Table.query, Table.all_items
    put_item, delete_item, update_item = Table.put_item, Table.delete_item, DynamoDBBackend.update_item

    def keyed_query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs["index_name"] if "index_name" in kwargs else (args[6] if len(args) > 6 else None)
        _QUERY.current = (self, index_name, hash_key)
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            _QUERY.current = None

    def narrowed_all_items(self: Any) -> Any:
        current = getattr(_QUERY, "current", None)
        if current is None or current[0] is not self:
            return all_items(self)
        _, index_name, hash_key = current
        if index_name:
            found = _index_candidates(self, all_items, index_name, hash_key)
            return all_items(self) if found is None else found
        partition = self.items.get(hash_key)
        if partition is None:
            return []
        return list(partition.values()) if self.range_key_attr else [partition]

    def tracked_put(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return put_item(self, *args, **kwargs)
        finally:
            _written(self)

    def tracked_delete(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return delete_item(self, *args, **kwargs)
        finally:
            _written(self)

    def tracked_update(self: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return update_item(self, table_name, *args, **kwargs)
        finally:
            table = self.tables.get(table_name)
            if table is not None:
                _written(table)

    Table.query = keyed_query
    Table.all_items = narrowed_all_items
    Table.put_item = tracked_put
    Table.delete_item = tracked_delete
    DynamoDBBackend.update_item = tracked_update
    Table._vsa_keyed_query = True
