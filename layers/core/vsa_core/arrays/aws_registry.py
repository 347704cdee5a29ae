"""The array registry in the control plane's single DynamoDB table.

Keys: ``pk = ARRAY#<id>``; ``sk = SPEC`` holds the declared spec (JSON), the desired
controller count and a version; ``sk = SLOT#nn`` a controller's slot (``instanceId``, ``state``,
``address``; leased and released by the controller workflows); ``sk = DECISION#<time>#<execution>``
holds scale decisions (written by the ScaleArray workflow itself); ``sk = CHANGE#<time>#<kind>#<nonce>``
a stored change and who asked for it (``arrays.callers.ChangeRecord``; the SPEC item's ``appliedBy``
names the last apply's caller in the spec's own write). The same partition holds the array's
backup sets (``sk = BACKUP#<backup id>``: ``vsa_core.backups.aws_registry``).

Every per-event read is keyed, never a scan, so an event costs the same with 10 arrays or 1,000
(``make bench-arrays``): an array by its id, its slots by a query of its partition, and a
controller by its instance id through the ``instances`` index (``naming.INSTANCE_INDEX``: a
sparse global secondary index of the items that have an ``instanceId``, i.e. the slots;
``aws_index``).
History items carry ``expiresAt`` (epoch seconds, :func:`expires_at`), the table's TTL
attribute: DynamoDB deletes them after the retention (``HistoryRetentionDays``, 90 by default).

Every write of the SPEC item is conditional on the version it read (optimistic concurrency):
of two concurrent applies one wins, the other gets ``ConflictError`` and changes nothing. The
ScaleArray workflow bumps the version too when it sets the desired count.
"""

import contextlib
import json
import os
import secrets
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_index
from vsa_core.arrays.callers import Caller, ChangeRecord
from vsa_core.arrays.spec import STORED, ArraySpec, Deletion, RegisteredArray
from vsa_core.clients import client
from vsa_core.errors import ArrayNotFoundError, ConflictError
from vsa_core.naming import SLOT_PREFIX, slot_of_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def array_key(array_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"ARRAY#{array_id}"}, "sk": {"S": "SPEC"}}


EXPIRES_AT = "expiresAt"
"""The registry table's TTL attribute (template.yaml ``TimeToLiveSpecification``)."""
HISTORY_RETENTION_ENV = "VSA_HISTORY_RETENTION_DAYS"
DEFAULT_HISTORY_RETENTION_DAYS = 90
"""The template's ``HistoryRetentionDays`` default."""


def history_retention_days() -> int:
    """How long an array's history is kept: the template's ``HistoryRetentionDays``, given to
    every function as ``VSA_HISTORY_RETENTION_DAYS`` (a Globals variable). Inside a Lambda
    function an unset or invalid value is an error (the history would outlive, or undercut, what
    the operator set); outside one (the CLI, tools, tests) it is the default."""
    value = os.environ.get(HISTORY_RETENTION_ENV, "")
    if not value and not os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return DEFAULT_HISTORY_RETENTION_DAYS
    if not value.isdigit() or not 1 <= int(value) <= 3650:
        raise ValueError(f"{HISTORY_RETENTION_ENV}={value!r}: the history's retention, 1 to 3650 days")
    return int(value)


def expires_at(now: datetime, retention_days: int) -> int:
    """When a history item written at ``now`` may go: epoch seconds, as DynamoDB's TTL reads them."""
    return int((now + timedelta(days=retention_days)).timestamp())


def registered_array(item: dict[str, Any]) -> RegisteredArray:
    """An array as its registry item holds it."""
    deleting = item.get("deleting", {}).get("S")
    stored = json.loads(item["spec"]["S"])
    # a spec stored before ``authentication`` or ``fencing`` existed ran without it: it keeps
    # none (the defaults, dh-hmac-chap and reservations, are for new arrays) until an apply says
    # otherwise
    stored.setdefault("authentication", "none")
    stored.setdefault("fencing", "none")
    return RegisteredArray(
        spec=ArraySpec.model_validate(stored, context=STORED),
        desired_controllers=int(item["desiredControllers"]["N"]),
        version=int(item["version"]["N"]),
        deleting=Deletion.model_validate_json(deleting) if deleting else None,
        delete_failure=item.get("deleteFailure", {}).get("S"),
        last_scale_out_at=item.get("lastScaleOutAt", {}).get("S"),
        last_scale_in_at=item.get("lastScaleInAt", {}).get("S"),
        pending_host_removals=tuple(sorted(item.get("pendingHostRemovals", {}).get("SS", []))),
        pending_volume_deletions=tuple(sorted(item.get("pendingVolumeDeletions", {}).get("SS", []))),
        reconcile={
            k.removeprefix("reconcile")[:1].lower() + k.removeprefix("reconcile")[1:]: v["S"]
            for k, v in item.items()
            if k.startswith("reconcile") and "S" in v
        }
        or None,
        forecast_floor=json.loads(floor) if (floor := item.get("forecastFloor", {}).get("S")) else None,
        roll_surge=int(item.get("rollSurge", {}).get("N", "0")),
        rekey_stages=json.loads(item.get("keysRotation", {}).get("S", "{}")),
        owners=json.loads(item.get("owners", {}).get("S", "{}")),
        owners_handover=json.loads(moving) if (moving := item.get("ownersHandover", {}).get("S")) else None,
        applying=int(applying["N"]) if (applying := item.get("applying")) else None,
        restored_from=item.get("restoredFrom", {}).get("S"),
        scaling_lock_until=int(item["scalingLockUntil"]["N"])
        if "scalingLock" in item and "scalingLockUntil" in item
        else None,
    )


class ArrayRegistry:
    def __init__(self, table_name: str, dynamodb: "DynamoDBClient | None" = None) -> None:
        self._table = table_name
        self._dynamodb: DynamoDBClient = dynamodb or client("dynamodb")

    @property
    def history(self) -> "ArrayHistory":
        """The arrays' stored changes and their callers, in the same table."""
        return ArrayHistory(self._table, self._dynamodb)

    def scale_decisions(self) -> "ScaleDecisions":
        """The arrays' recorded scale decisions, in the same table."""
        return ScaleDecisions(self._table, self._dynamodb)

    def get(self, array_id: str) -> RegisteredArray:
        item = self._dynamodb.get_item(
            TableName=self._table, Key=array_key(array_id), ConsistentRead=True
        ).get("Item")
        if item is None:
            raise ArrayNotFoundError(f"array {array_id!r} is not registered")
        return registered_array(item)

    def put(
        self,
        spec: ArraySpec,
        expected_version: int | None,
        left_hosts: tuple[str, ...] = (),
        delete_volumes: tuple[str, ...] = (),
        by: Caller | None = None,
    ) -> RegisteredArray:
        """Store ``spec``: a new array when ``expected_version`` is None, else an update of the
        version the caller read. The desired count stays, clamped into the new [min, max].
        ``left_hosts`` (hosts the new spec drops) join the pending host removals in the same
        write, so ReconcileArray learns of them however the apply ends; so do ``delete_volumes``
        (owned volumes the apply asked to delete once detached). ``by``: who applied, kept on
        the item in the same write (``appliedBy``)."""
        if expected_version is None:
            try:
                return self.create(spec, by)
            except ClientError as error:
                if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                raise ConflictError(
                    f"array {spec.array_id!r} was created by a concurrent apply: read it and apply again"
                ) from None
        current = self.get(spec.array_id)
        desired = min(max(current.desired_controllers, spec.min_controllers), spec.max_controllers)
        adds = [
            *(["pendingHostRemovals :left"] if left_hosts else []),
            *(["pendingVolumeDeletions :gone"] if delete_volumes else []),
        ]
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key=array_key(spec.array_id),
                UpdateExpression="SET spec = :spec, desiredControllers = :desired, version = :next, "
                "applying = :next"
                + (", appliedBy = :by" if by else "")
                + (" ADD " + ", ".join(adds) if adds else ""),
                ConditionExpression="version = :expected",
                ExpressionAttributeValues={
                    ":spec": {"S": spec.model_dump_json(by_alias=True)},
                    ":desired": {"N": str(desired)},
                    ":next": {"N": str(expected_version + 1)},
                    ":expected": {"N": str(expected_version)},
                    **({":left": {"SS": list(left_hosts)}} if left_hosts else {}),
                    **({":gone": {"SS": list(delete_volumes)}} if delete_volumes else {}),
                    **({":by": {"S": by.model_dump_json(by_alias=True)}} if by else {}),
                },
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            raise ConflictError(
                f"array {spec.array_id!r} changed since version {expected_version} (a concurrent apply "
                "or a scaling decision): read it and apply again"
            ) from None
        return RegisteredArray(
            spec=spec,
            desired_controllers=desired,
            version=expected_version + 1,
            pending_host_removals=tuple(sorted({*current.pending_host_removals, *left_hosts})),
            pending_volume_deletions=tuple(sorted({*current.pending_volume_deletions, *delete_volumes})),
            reconcile=current.reconcile,
            roll_surge=current.roll_surge,
            rekey_stages=current.rekey_stages,
            owners=current.owners,
            owners_handover=current.owners_handover,
            applying=expected_version + 1,
        )

    def all(self) -> list[RegisteredArray]:
        """Every registered array, by id. A scan of the SPEC items: arrays number in the tens."""
        arrays: list[RegisteredArray] = []
        paginator = self._dynamodb.get_paginator("scan")
        for page in paginator.paginate(
            TableName=self._table,
            FilterExpression="sk = :spec",
            ExpressionAttributeValues={":spec": {"S": "SPEC"}},
            ConsistentRead=True,
        ):
            arrays.extend(registered_array(item) for item in page.get("Items", []))
        return sorted(arrays, key=lambda a: a.spec.array_id)

    def mark_deleting(self, array_id: str, expected_version: int, deletion: Deletion) -> RegisteredArray:
        """Record that the DeleteArray workflow runs for the array (conditional on the version
        read: an apply that slipped in first wins, and this DELETE answers 409)."""
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key=array_key(array_id),
                UpdateExpression="SET deleting = :deleting, version = :next",
                ConditionExpression="version = :expected AND attribute_not_exists(deleting)",
                ExpressionAttributeValues={
                    ":deleting": {"S": deletion.model_dump_json(by_alias=True)},
                    ":next": {"N": str(expected_version + 1)},
                    ":expected": {"N": str(expected_version)},
                },
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            raise ConflictError(
                f"array {array_id!r} changed while the delete was requested (or is already being "
                "deleted): read it and delete again"
            ) from None
        return self.get(array_id)

    def retry_deleting(self, array_id: str, deletion: Deletion) -> RegisteredArray:
        """After a failed DeleteArray: record the new workflow and clear the failure (only one
        of two concurrent retries wins)."""
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key=array_key(array_id),
                UpdateExpression="SET deleting = :deleting REMOVE deleteFailure",
                ConditionExpression="attribute_exists(deleteFailure)",
                ExpressionAttributeValues={":deleting": {"S": deletion.model_dump_json(by_alias=True)}},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        return self.get(array_id)

    def forget(self, array_id: str) -> None:
        """The DeleteArray workflow's last step: the SPEC item (only once marked deleting) and
        the array's decisions. Idempotent: forgetting a forgotten array does nothing."""
        try:
            self._dynamodb.delete_item(
                TableName=self._table,
                Key=array_key(array_id),
                ConditionExpression="attribute_exists(deleting)",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            item = self._dynamodb.get_item(TableName=self._table, Key=array_key(array_id)).get("Item")
            if item is not None:
                raise ConflictError(f"array {array_id!r} is not being deleted: not forgetting it") from None
        self._delete_rest(array_id)

    def _delete_rest(self, array_id: str) -> None:
        paginator = self._dynamodb.get_paginator("query")
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"ARRAY#{array_id}"}},
            ProjectionExpression="pk, sk",
        ):
            for item in page.get("Items", []):
                self._dynamodb.delete_item(TableName=self._table, Key={"pk": item["pk"], "sk": item["sk"]})

    def create(
        self, spec: ArraySpec, by: Caller | None = None, restored_from: str | None = None
    ) -> RegisteredArray:
        """Register a new array at its minimum size, never over an existing one. ``by``: who asked
        (``appliedBy``); ``restored_from``: the set a restore registered it from (nothing made)."""
        registered = RegisteredArray(
            spec=spec, desired_controllers=spec.min_controllers, version=1, applying=1
        )
        registered = registered.model_copy(update={"restored_from": restored_from})
        self._dynamodb.put_item(
            TableName=self._table,
            Item={
                **array_key(spec.array_id),
                "spec": {"S": spec.model_dump_json(by_alias=True)},
                "desiredControllers": {"N": str(registered.desired_controllers)},
                "version": {"N": "1"},
                "applying": {"N": "1"},
                **({"appliedBy": {"S": by.model_dump_json(by_alias=True)}} if by else {}),
                **({"restoredFrom": {"S": restored_from}} if restored_from else {}),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return registered

    def applied(self, array_id: str, version: int) -> None:
        """The apply of ``version`` finished: its AWS changes made, its run started."""
        with contextlib.suppress(self._dynamodb.exceptions.ConditionalCheckFailedException):
            self._dynamodb.update_item(
                TableName=self._table,
                Key=array_key(array_id),
                UpdateExpression="REMOVE applying, restoredFrom",
                ConditionExpression="applying = :v",
                ExpressionAttributeValues={":v": {"N": str(version)}},
            )

    def slots(self, array_id: str) -> dict[int, dict[str, str]]:
        """The array's leased controller slots: slot → {instanceId, state, address, since}."""
        paginator = self._dynamodb.get_paginator("query")
        found: dict[int, dict[str, str]] = {}
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :slot)",
            ExpressionAttributeValues={":pk": {"S": f"ARRAY#{array_id}"}, ":slot": {"S": SLOT_PREFIX}},
            ConsistentRead=True,
        ):
            for item in page.get("Items", []):
                found[slot_of_key(item["sk"]["S"])] = {
                    k: v["S"] for k, v in item.items() if k not in ("pk", "sk") and "S" in v
                }
        return found

    def find_slot(self, instance_id: str) -> tuple[str, int, dict[str, str]] | None:
        """The array and slot a controller holds, wherever it is (an EC2 state-change event
        names only the instance): the ``instances`` index gives the slot's key, and the slot is
        read from the table itself, consistently (an index is eventually consistent: a slot
        released or leased by another instance since is not this controller's)."""
        for pk, sk in self.slot_keys(instance_id):
            item = self._dynamodb.get_item(
                TableName=self._table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
            ).get("Item")
            if item is None or item.get("instanceId", {}).get("S") != instance_id:
                continue
            fields = {k: v["S"] for k, v in item.items() if k not in ("pk", "sk") and "S" in v}
            return pk.removeprefix("ARRAY#"), slot_of_key(sk), fields
        return None

    def slot_keys(self, instance_id: str) -> list[tuple[str, str]]:
        """The keys (pk, sk) of the slots the ``instances`` index lists for the instance."""
        return aws_index.slot_keys(self._dynamodb, self._table, instance_id)


class ScaleDecisions:
    """The array's scale decisions as the ScaleArray workflow recorded them (``sk =
    DECISION#<run's start time>#<run's name>``), beside its spec: read by the API and by
    PlanScale's churn limit."""

    def __init__(self, table_name: str, dynamodb: "DynamoDBClient") -> None:
        self._table = table_name
        self._dynamodb = dynamodb

    def newest(self, array_id: str, limit: int = 10) -> list[dict[str, Any]]:
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

    def since(
        self, array_id: str, since: datetime | None, limit: int | None = None, *, consistent: bool = False
    ) -> list[tuple[datetime, str, dict[str, Any]]]:
        """The decisions recorded from ``since`` on (every one without it), newest first: the
        run's start time, its name and the decision; at most ``limit`` (every page without
        one)."""
        start = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if since else ""
        pages = self._dynamodb.get_paginator("query").paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":pk": {"S": f"ARRAY#{array_id}"},
                ":from": {"S": f"DECISION#{start}"},
                ":to": {"S": "DECISION$"},  # "$" sorts right after "#"
            },
            ScanIndexForward=False,
            ConsistentRead=consistent,
            PaginationConfig={"MaxItems": limit} if limit else {},
        )
        found = []
        for page in pages:
            for item in page.get("Items", []):
                _, at, name = item["sk"]["S"].split("#", 2)
                when = datetime.fromisoformat(at)
                when = when if when.tzinfo else when.replace(tzinfo=UTC)
                found.append((when, name, json.loads(item["decision"]["S"])))
        return found

    def scalings_since(self, array_id: str, since: datetime) -> list[datetime]:
        """When the array's scale decisions changed its count from ``since`` on, oldest first:
        the run's start time in each recorded scale-out or scale-in (the time its
        ``lastScaleOutAt`` / ``lastScaleInAt`` took); holds, and runs that found the lock busy,
        are not changes. Read consistently: the last run recorded its decision just before it
        released the scaling lock."""
        return sorted(
            at
            for at, _, decision in self.since(array_id, since, consistent=True)
            if decision.get("desired_controllers") != decision.get("current_controllers")
        )


class ArrayHistory:
    """The array's stored changes and who asked for each (``sk = CHANGE#...``): kept beside its
    spec, read by the timeline."""

    def __init__(self, table_name: str, dynamodb: "DynamoDBClient") -> None:
        self._table = table_name
        self._dynamodb = dynamodb

    def record(self, array_id: str, change: ChangeRecord, retention_days: int | None = None) -> None:
        """Keep a stored change and who asked for it in the array's history
        (``sk = CHANGE#<time>#<kind>#<nonce>``), gone after the history's retention like the
        decisions (``retention_days``; default: ``history_retention_days()``)."""
        days = retention_days or history_retention_days()
        at = change.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self._dynamodb.put_item(
            TableName=self._table,
            Item={
                "pk": {"S": f"ARRAY#{array_id}"},
                "sk": {"S": f"{CHANGE_PREFIX}{at}#{change.kind}#{secrets.token_hex(4)}"},
                "change": {"S": change.model_dump_json(by_alias=True)},
                EXPIRES_AT: {"N": str(expires_at(change.at, days))},
            },
        )

    def read(self, array_id: str, since: datetime | None, limit: int) -> list[ChangeRecord]:
        """The newest ``limit`` recorded changes at or after ``since``, newest first."""
        start = CHANGE_PREFIX + (since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if since else "")
        response = self._dynamodb.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":pk": {"S": f"ARRAY#{array_id}"},
                ":from": {"S": start},
                ":to": {"S": "CHANGE$"},  # "$" sorts right after "#"
            },
            ScanIndexForward=False,
            Limit=limit,
        )
        return [ChangeRecord.model_validate_json(item["change"]["S"]) for item in response.get("Items", [])]


CHANGE_PREFIX = "CHANGE#"
