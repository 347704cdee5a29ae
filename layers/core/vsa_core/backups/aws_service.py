"""Backups of an array on the AWS side: what the API, the schedule trigger and each step of the
ConsistentBackup workflow do. The decisions are ``vsa_core.backups.sets`` (pure); this module reads
AWS, acts, and records the set in the registry (every write conditional on the state read).

The workflow, and which method does each step (``statemachines/consistent_backup.asl.json``):

1. :meth:`BackupService.preflight` — a serving controller with every array volume attached,
   every host online in SSM, the EBS limits (at most 5 pending snapshots per io2 volume, one
   snapshot per volume every 15 s): start, wait (the workflow's Wait state) or refuse. Then the
   workflow runs freeze-io with ``DryRun=true`` on every host and :meth:`hosts_ready` fails fast
   on any host that could not freeze.
2. (the workflow) freeze-io on every host in parallel.
3. :meth:`snapshot` — ONE ``CreateSnapshots`` on the controller, every attached volume that is
   not the array's excluded, tagged with the set: one point in time across all volumes.
4. (the workflow) thaw-io on every host, on every path out; :meth:`record_hosts` keeps what the
   hosts reported (the instants they froze and thawed, on their clocks).
5. :meth:`progress` until every snapshot has completed or one is in error; :meth:`finish`
   labels the set honestly, or fails it and deletes its snapshots; :meth:`fail` does the same
   for a workflow that caught an error.
6. :meth:`apply_retention` — whole sets, oldest first, never one in progress, capped per run.
"""

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError

from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ARRAY_TAG, ArraySpec, ExistingVolume, RegisteredArray
from vsa_core.backups import sets
from vsa_core.backups.sets import BackupSet, HostFreeze, RetentionPlan, SnapshotRequest, VolumeSnapshot
from vsa_core.clients import client
from vsa_core.errors import (
    ArrayNotFoundError,
    BackupNotFoundError,
    ConflictError,
    InvalidBackupError,
    PreflightError,
    RestoreError,
    SnapshotLimitError,
    SnapshotSetError,
)
from vsa_core.registry import ArrayRegistry, BackupRegistry
from vsa_core.settings import Settings
from vsa_core.waiters import execution_arn

SNAPSHOT_RATE_SECONDS = 15
# StartTime can read up to a second early (the local cloud reports whole seconds) and the
# Lambda's clock is not EBS's: wait a second more than the rate, or EBS refuses the set
# (SnapshotCreationPerVolumeRateExceeded) after the hosts were frozen for it
RATE_MARGIN_SECONDS = 1
"""EBS: "Wait at least 15 seconds between concurrent volume snapshots" (per volume). Preflight
applies it to the latest snapshot of each volume whatever its state, as the local cloud does
(AWS only between concurrent ones): stricter, never refused."""
MAX_QUEUE_SECONDS = 900
"""A set waits at most this long for snapshot slots, then is refused (the next schedule is near)."""
QUEUE_POLL_SECONDS = 30
PROGRESS_FIRST_WAIT_SECONDS = 2
PROGRESS_MAX_WAIT_SECONDS = 30
THAW_MAX_POLLS = 30
# freeze-io / thaw-io sends in flight at once (one SendCommand per host: each has its mountpoints)
SEND_WORKERS = 8
DELETE_WORKERS = 8
RESTORED_FROM_TAG = "vsa:restored-from"
SOURCE_VOLUME_TAG = "vsa:source-volume"

Admission = Literal["start", "wait", "refuse"]


def freeze_key(backup_id: str, instance_id: str) -> str:
    """freeze-io's BackupId on one host: names its watchdog, state and log in StateDir. The host
    is in it so two sandbox nodes of the local cloud sharing one machine never share a state
    file (and a host's log names the set and itself)."""
    return f"{backup_id}.{instance_id}"


def _now() -> datetime:
    return datetime.now(UTC)


def _code(error: ClientError) -> str:
    return str(error.response["Error"].get("Code", ""))


def _tags(items: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or ()}


def _report(stdout: str | None) -> dict[str, Any] | None:
    """The JSON report a host document prints as its last stdout line (None if there is none)."""
    for line in reversed((stdout or "").strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def _command_error(result: Mapping[str, Any] | None, what: str) -> str | None:
    """Why an SSM command of the workflow did not succeed (None when it did)."""
    if result is None:
        return f"{what}: never ran"
    status = result.get("status", "Unknown")
    if status == "Success":
        return None
    report = _report(result.get("stdout"))
    reason = (report or {}).get("reason") or (result.get("stderr") or "").strip()[-300:] or "no output"
    return f"{what}: {status}: {reason}"


class BackupService:
    def __init__(
        self,
        *,
        registry: ArrayRegistry,
        backups_registry: BackupRegistry,
        arrays: ArrayService,
        state_machine_arn: str = "",
        ec2: Any = None,
        ssm: Any = None,
        sfn: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._backups = backups_registry
        self._arrays = arrays
        self._state_machine_arn = state_machine_arn
        self._ec2 = ec2 or client("ec2")
        self._ssm = ssm or client("ssm")
        self._sfn = sfn
        self._clock = clock

    def array(self, array_id: str) -> RegisteredArray:
        return self._registry.get(array_id)

    # --- requests ------------------------------------------------------------------------------

    def start(
        self,
        array_id: str,
        *,
        mode: sets.BackupMode,
        label: str | None = None,
        trigger: Literal["api", "schedule"] = "api",
        backup_id: str | None = None,
    ) -> tuple[bool, BackupSet]:
        """Record a set and start its workflow; ``(False, set)`` if that set exists already."""
        array = self._registry.get(array_id)
        if array.deleting is not None:
            raise ConflictError(f"array {array_id!r} is being deleted: no new backups")
        if mode == "application":
            bare = [h.instance_id for h in array.spec.hosts if not h.mountpoints]
            if not array.spec.hosts or bare:
                raise InvalidBackupError(
                    f"mode application freezes every host's mountpoints, and array {array_id!r} has "
                    f"{'hosts without mountpoints: ' + ', '.join(bare) if bare else 'no hosts'}"
                    ": declare the hosts' mountpoints in the spec, or ask for mode crash"
                )
        if backup_id is not None:
            try:
                return False, self._backups.get(array_id, backup_id)
            except BackupNotFoundError:
                pass  # a new one
        backup_id = backup_id or sets.new_backup_id(_now())
        volume_ids = self._arrays.volume_ids(array.spec)
        decision = self._admission(backup_id, volume_ids, self.sets(array_id), max_queued=1)
        if decision.action == "refuse":
            raise SnapshotLimitError(decision.message)
        policy = array.spec.backup
        backup = BackupSet(
            backup_id=backup_id,
            array_id=array_id,
            mode=mode,
            label=label,
            created_at=sets.backup_id_time(backup_id),
            trigger=trigger,
            freeze_timeout_seconds=policy.freeze_timeout_seconds if policy else 10,
            message=decision.message if decision.action == "queue" else "requested",
        )
        created, backup = self._backups.create(backup)
        if created:
            self._start_workflow(array_id, backup_id)
        return created, backup

    def _start_workflow(self, array_id: str, backup_id: str) -> None:
        sfn = self._sfn or client("stepfunctions")
        with contextlib.suppress(sfn.exceptions.ExecutionAlreadyExists):
            sfn.start_execution(
                stateMachineArn=self._state_machine_arn,
                name=backup_id,
                input=json.dumps({"arrayId": array_id, "backupId": backup_id}),
            )

    def _admission(
        self,
        backup_id: str,
        volume_ids: Sequence[str],
        known: Sequence[BackupSet],
        max_queued: int | None = None,
    ) -> sets.SnapshotDecision:
        """This set's turn under the EBS pending-snapshot limit, behind earlier waiting sets."""
        pending: dict[str, int] = {}
        for snapshot in self._snapshots_of_volumes(volume_ids, states=("pending", "error")):
            pending[snapshot["VolumeId"]] = pending.get(snapshot["VolumeId"], 0) + 1
        waiting = [
            SnapshotRequest(backup_id=s.backup_id, volume_ids=tuple(volume_ids))
            for s in sorted(known, key=lambda s: s.backup_id)
            if s.state == "requested" and s.backup_id < backup_id
        ]
        requests = [*waiting, SnapshotRequest(backup_id=backup_id, volume_ids=tuple(volume_ids))]
        # the workflow's own check never refuses for the queue's length (only after waiting too long)
        decisions = sets.snapshot_limits(
            pending, requests, max_queued=len(requests) if max_queued is None else max_queued
        )
        return decisions[-1]

    def _snapshots_of_volumes(
        self, volume_ids: Sequence[str], states: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        filters: list[dict[str, Any]] = [{"Name": "volume-id", "Values": list(volume_ids)}]
        if states:
            filters.append({"Name": "status", "Values": list(states)})
        pages = self._ec2.get_paginator("describe_snapshots").paginate(OwnerIds=["self"], Filters=filters)
        return [dict(s) for page in pages for s in page["Snapshots"]]

    # --- reading (with stopped workflows reconciled) -------------------------------------------

    def get(self, array_id: str, backup_id: str) -> BackupSet:
        self._registry.get(array_id)
        return self._reconcile(self._backups.get(array_id, backup_id))

    def sets(self, array_id: str) -> list[BackupSet]:
        self._registry.get(array_id)
        return [self._reconcile(s) for s in self._backups.sets(array_id)]

    def _reconcile(self, backup: BackupSet) -> BackupSet:
        """A set in progress whose workflow was stopped (StopExecution, a timeout) never reaches
        its own failure path: fail it here, delete its snapshots. The hosts were thawed by their
        watchdogs (freeze-io arms one before freezing anything)."""
        if not backup.in_progress or not self._state_machine_arn:
            return backup
        sfn = self._sfn or client("stepfunctions")
        try:
            status = sfn.describe_execution(
                executionArn=execution_arn(self._state_machine_arn, backup.backup_id)
            )["status"]
        except ClientError as error:
            if _code(error) != "ExecutionDoesNotExist":
                raise
            if (_now() - backup.created_at).total_seconds() < 300:
                return backup  # being started
            status = "NEVER STARTED"
        if status == "RUNNING":
            return backup
        return self._fail(
            backup,
            f"the workflow ended {status} while the set was {backup.state}: hosts were thawed by their "
            "watchdogs, if frozen",
            expected=(backup.state,),
        )

    # --- deleting --------------------------------------------------------------------------------

    def delete(self, array_id: str, backup_id: str) -> dict[str, Any]:
        """Delete a set: refuse one in progress; only the snapshots this array's set created."""
        backup = self.get(array_id, backup_id)
        if backup.in_progress:
            raise ConflictError(
                f"backup set {backup_id} is in progress ({backup.state}): delete it once it has "
                "completed or failed"
            )
        if backup.state != "deleting":
            backup = self._backups.save(backup.model_copy(update={"state": "deleting"}), (backup.state,))
        deleted = self._delete_snapshots(backup)
        self._backups.delete(array_id, backup_id)
        return {"backupId": backup_id, "deletedSnapshots": deleted}

    def _delete_snapshots(self, backup: BackupSet) -> list[str]:
        """Every snapshot tagged with this array and set (and owned), recorded or not (a workflow
        that failed after CreateSnapshots returned); never another's."""
        pages = self._ec2.get_paginator("describe_snapshots").paginate(
            OwnerIds=["self"],
            Filters=[
                {"Name": f"tag:{sets.BACKUP_TAG}", "Values": [backup.backup_id]},
                {"Name": f"tag:{ARRAY_TAG}", "Values": [backup.array_id]},
            ],
        )
        doomed = [
            str(snapshot["SnapshotId"])
            for page in pages
            for snapshot in page["Snapshots"]
            if sets.may_delete_snapshot(_tags(snapshot.get("Tags")), backup.array_id, backup.backup_id)
        ]
        # a set has up to one snapshot per volume (64 or more): delete them side by side, so the
        # API's DELETE stays well inside API Gateway's 29 s
        with ThreadPoolExecutor(max_workers=DELETE_WORKERS) as pool:
            list(pool.map(self._delete_snapshot, doomed))
        return sorted(doomed)

    def _delete_snapshot(self, snapshot_id: str) -> None:
        try:
            self._ec2.delete_snapshot(SnapshotId=snapshot_id)
        except ClientError as error:
            if _code(error) != "InvalidSnapshot.NotFound":
                raise

    # --- retention -------------------------------------------------------------------------------

    def retention(self, array_id: str, keep: int | None, max_deletions: int) -> tuple[int, RetentionPlan]:
        array = self._registry.get(array_id)
        keep = keep or (array.spec.backup.retention if array.spec.backup else None)
        if keep is None:
            raise InvalidBackupError(
                f"array {array_id!r} has no backup policy: give keep (how many completed sets to keep)"
            )
        return keep, sets.retention_plan(self.sets(array_id), keep, max_deletions, _now())

    def apply_retention(self, array_id: str, keep: int | None, max_deletions: int) -> dict[str, Any]:
        keep, plan = self.retention(array_id, keep, max_deletions)
        deleted = []
        for decision in plan.deletions:
            try:
                deleted.append(self.delete(array_id, decision.backup_id))
            except ConflictError:
                continue  # taken up meanwhile: a later run decides again
        return {"keep": keep, "plan": _dump(plan.decisions), "deleted": deleted}

    # --- workflow steps --------------------------------------------------------------------------

    def preflight(self, array_id: str, backup_id: str) -> dict[str, Any]:
        array = self._registry.get(array_id)
        backup = self._backups.get(array_id, backup_id)
        if backup.state != "requested":
            raise PreflightError(
                f"backup set {backup_id} is {backup.state}, not requested: not starting it twice"
            )
        spec = array.spec
        volume_ids = self._arrays.volume_ids(spec)
        volumes = self._volumes(volume_ids)
        controller, excluded = self._controller(array, volume_ids, volumes)
        hosts = self._hosts(spec) if backup.mode == "application" else []
        now = _now()
        decision = self._admission(backup_id, volume_ids, self.sets(array_id))
        waited = (now - backup.created_at).total_seconds()
        action: Admission = "start"
        message = decision.message
        wait_seconds = 0
        if decision.action != "start":
            action, wait_seconds = "wait", QUEUE_POLL_SECONDS
        else:
            rate_wait = self._rate_wait(volume_ids)
            if rate_wait > 0:
                action, wait_seconds = "wait", rate_wait
                message = (
                    f"waiting {rate_wait} s: a volume was snapshotted less than "
                    f"{SNAPSHOT_RATE_SECONDS} s ago (EBS allows one snapshot per volume every 15 s)"
                )
        if action == "wait" and waited + wait_seconds > MAX_QUEUE_SECONDS:
            raise SnapshotLimitError(
                f"refused after waiting {waited:.0f} s for EBS snapshot slots: {message}; "
                "retry after the pending snapshots complete"
            )
        sizes = {v["VolumeId"]: v for v in volumes}
        if action == "start":
            self._backups.save(
                backup.model_copy(
                    update={
                        "state": "freezing" if hosts else "snapshotting",
                        "controller_instance_id": controller,
                        "message": f"{len(volume_ids)} volume(s) on {controller}; "
                        f"{len(hosts)} host(s) to freeze",
                    }
                ),
                ("requested",),
            )
        elif backup.message != message:
            self._backups.save(backup.model_copy(update={"message": message}), ("requested",))
        timeout = backup.freeze_timeout_seconds
        return {
            "arrayId": array_id,
            "backupId": backup_id,
            "mode": backup.mode,
            "freeze": bool(hosts),
            "freezeTimeout": timeout,
            "admission": {"action": action, "waitSeconds": wait_seconds, "message": message},
            "controller": controller,
            "excluded": excluded,
            "volumes": [
                {"volumeId": v, "volumeSize": sizes[v].get("Size"), "iops": sizes[v].get("Iops")}
                for v in volume_ids
            ],
            "hosts": [
                {
                    "instanceId": h.instance_id,
                    "mountpoints": ",".join(h.mountpoints),
                    "freezeKey": freeze_key(backup_id, h.instance_id),
                    "timeoutSeconds": str(timeout),
                    # freeze-io is polled every second; past the watchdog's deadline it is moot
                    "maxPolls": timeout + 5,
                    "thawMaxPolls": THAW_MAX_POLLS,
                }
                for h in hosts
            ],
        }

    def _volumes(self, volume_ids: Sequence[str]) -> list[dict[str, Any]]:
        if not volume_ids:
            raise PreflightError("the array has no volumes")
        try:
            pages = self._ec2.get_paginator("describe_volumes").paginate(VolumeIds=list(volume_ids))
            return [dict(v) for page in pages for v in page["Volumes"]]
        except ClientError as error:
            raise PreflightError(f"the array's volumes cannot be read: {error}") from None

    def _controller(
        self, array: RegisteredArray, volume_ids: Sequence[str], volumes: Sequence[Mapping[str, Any]]
    ) -> tuple[str, list[str]]:
        """A serving controller with every array volume attached, and the other data volumes
        attached to it (CreateSnapshots must leave them out)."""
        slots = self._registry.slots(array.spec.array_id)
        serving = [item["instanceId"] for _, item in sorted(slots.items()) if item.get("state") == "serving"]
        if not serving:
            states = (
                ", ".join(f"slot {s}: {item.get('state')}" for s, item in sorted(slots.items())) or "none"
            )
            raise PreflightError(
                f"no serving controller (controllers: {states}): a backup snapshots the volumes through a "
                "serving controller; wait for one to finish bootstrapping"
            )
        attached_to: dict[str, set[str]] = {
            v["VolumeId"]: {a["InstanceId"] for a in v.get("Attachments", []) if a.get("State") == "attached"}
            for v in volumes
        }
        problems = []
        for instance_id in serving:
            missing = sorted(v for v in volume_ids if instance_id not in attached_to.get(v, set()))
            if missing:
                problems.append(f"{instance_id} lacks {', '.join(missing)}")
                continue
            instance = self._ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0][
                "Instances"
            ][0]
            root = instance.get("RootDeviceName")
            excluded = sorted(
                m["Ebs"]["VolumeId"]
                for m in instance.get("BlockDeviceMappings", [])
                if "Ebs" in m
                and m["DeviceName"] not in (root, "/dev/sda1")
                and m["Ebs"]["VolumeId"] not in volume_ids
            )
            return instance_id, excluded
        raise PreflightError(
            "no serving controller has every array volume attached (" + "; ".join(problems) + ")"
        )

    def _hosts(self, spec: ArraySpec) -> list[Any]:
        ids = [h.instance_id for h in spec.hosts]
        pages = self._ssm.get_paginator("describe_instance_information").paginate(
            Filters=[{"Key": "InstanceIds", "Values": ids}]
        )
        ping = {
            n["InstanceId"]: n.get("PingStatus") for page in pages for n in page["InstanceInformationList"]
        }
        offline = [f"{i} ({ping.get(i) or 'not a managed node'})" for i in ids if ping.get(i) != "Online"]
        if offline:
            raise PreflightError(
                f"host(s) not online in SSM: {', '.join(offline)}: they cannot be frozen; bring them back "
                "or ask for mode crash"
            )
        return list(spec.hosts)

    def _rate_wait(self, volume_ids: Sequence[str]) -> int:
        latest: dict[str, float] = {}
        for snapshot in self._snapshots_of_volumes(volume_ids):
            started = snapshot["StartTime"].timestamp()
            latest[snapshot["VolumeId"]] = max(latest.get(snapshot["VolumeId"], 0.0), started)
        if not latest:
            return 0
        since = self._clock() - max(latest.values())
        return max(0, math.ceil(SNAPSHOT_RATE_SECONDS + RATE_MARGIN_SECONDS - since))

    def hosts_ready(self, checks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """After freeze-io's dry run on every host: fail fast, naming each host that cannot freeze."""
        problems = [
            f"{c.get('instanceId')}: {why}"
            for c in checks
            if (why := _command_error(c, "freeze-io dry run")) is not None
        ]
        if problems:
            raise PreflightError("host(s) cannot be frozen, nothing was: " + "; ".join(problems))
        return {"ready": len(checks)}

    def freeze(self, backup_id: str, hosts: Sequence[Mapping[str, Any]], document: str) -> dict[str, Any]:
        """Send freeze-io to every host at once (each arms its watchdog before freezing), not
        waiting: the Snapshot step checks them. A host SSM refuses is recorded as undelivered."""

        def send(host: Mapping[str, Any]) -> dict[str, Any]:
            parameters = {
                "Mountpoints": [host["mountpoints"]],
                "TimeoutSeconds": [host["timeoutSeconds"]],
                "BackupId": [host["freezeKey"]],
            }
            command_id, error = self._send(
                document, host["instanceId"], f"vsa {backup_id} freeze", parameters
            )
            return {**host, "freezeCommandId": command_id, "freezeError": error}

        # side by side: the first host's freeze does not wait on the sends to all the others
        with ThreadPoolExecutor(max_workers=max(1, min(SEND_WORKERS, len(hosts)))) as pool:
            sent = list(pool.map(send, hosts))
        return {"hosts": sent, "sentAt": self._clock()}

    def _send(
        self, document: str, instance_id: str, comment: str, parameters: dict[str, list[str]]
    ) -> tuple[str, str]:
        """SendCommand to one host, not waiting: (command id, "") or ("", why SSM refused)."""
        try:
            answer = self._ssm.send_command(
                DocumentName=document,
                InstanceIds=[instance_id],
                Comment=comment,
                TimeoutSeconds=60,
                Parameters=parameters,
            )
        except ClientError as err:
            return "", f"{_code(err)}: {err.response['Error'].get('Message', '')}"
        return str(answer["Command"]["CommandId"]), ""

    def _freeze_results(
        self, freezing: Mapping[str, Any], timeout: float
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Each host's freeze-io outcome so far, and the hosts still freezing (within the timeout)."""
        results, waiting = [], []
        late = self._clock() - float(freezing.get("sentAt") or 0) > timeout
        for host in freezing.get("hosts", []):
            instance = host["instanceId"]
            if not host.get("freezeCommandId"):
                results.append(
                    {
                        "instanceId": instance,
                        "status": "Undelivered",
                        "stdout": "",
                        "stderr": host.get("freezeError", ""),
                    }
                )
                continue
            try:
                answer = self._ssm.get_command_invocation(
                    CommandId=host["freezeCommandId"], InstanceId=instance
                )
                status = answer["Status"]
            except ClientError as err:
                if _code(err) != "InvocationDoesNotExist":
                    raise
                answer, status = {}, "Pending"
            if status in ("Pending", "InProgress", "Delayed", "Cancelling"):
                if not late:
                    waiting.append(instance)
                    continue
                status = "GaveUp"
            results.append(
                {
                    "instanceId": instance,
                    "commandId": host["freezeCommandId"],
                    "status": status,
                    "stdout": answer.get("StandardOutputContent", ""),
                    "stderr": answer.get("StandardErrorContent", "")
                    if status != "GaveUp"
                    else "still freezing",
                }
            )
        return results, waiting

    def snapshot(
        self,
        array_id: str,
        backup_id: str,
        controller: str,
        excluded: Sequence[str],
        volumes: Sequence[Mapping[str, Any]],
        freezing: Mapping[str, Any] | None = None,
        thaw_document: str = "",
        freeze_timeout: float = 10,
    ) -> dict[str, Any]:
        """Once every host has frozen (or failed to, or is late): ONE CreateSnapshots call, every
        array volume at one point in time; then, at once, thaw-io sent to every host
        (``thawHosts``: each host with the command id, ``""`` when sending failed — the
        workflow's Thaw sends those again and waits for every one). While a host is still
        freezing it answers ``taken: false`` and the workflow asks again a second later."""
        freezes, waiting = self._freeze_results(freezing or {}, freeze_timeout)
        if waiting:
            return {"taken": False, "waiting": waiting}
        backup = self._backups.get(array_id, backup_id)
        tags = sets.snapshot_tags(array_id, backup_id, backup.label)
        requested_at = self._clock()
        try:
            answer = self._ec2.create_snapshots(
                Description=f"VSA array {array_id} backup {backup_id}",
                InstanceSpecification={
                    "InstanceId": controller,
                    "ExcludeBootVolume": True,
                    **({"ExcludeDataVolumeIds": list(excluded)} if excluded else {}),
                },
                TagSpecifications=[
                    {"ResourceType": "snapshot", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                ],
            )
        except ClientError as error:
            if _code(error) in ("ConcurrentSnapshotLimitExceeded", "SnapshotCreationPerVolumeRateExceeded"):
                raise SnapshotLimitError(f"EBS refused CreateSnapshots: {error}") from None
            raise
        returned_at = self._clock()
        thaw_hosts = self._send_thaws(backup_id, (freezing or {}).get("hosts", []), thaw_document)
        known = {v["volumeId"]: v for v in volumes}
        taken = {s["VolumeId"]: s for s in answer["Snapshots"]}
        snapshots = tuple(
            VolumeSnapshot(
                volume_id=volume,
                snapshot_id=taken[volume]["SnapshotId"],
                state=taken[volume].get("State", "pending"),
                progress=sets.parse_progress(taken[volume].get("Progress")),
                volume_size=known.get(volume, {}).get("volumeSize") or taken[volume].get("VolumeSize"),
                iops=known.get(volume, {}).get("iops"),
            )
            for volume in sorted(taken)
        )
        timing = sets.SnapshotTiming(requested_at=requested_at, returned_at=returned_at)
        self._backups.save(
            backup.model_copy(
                update={
                    "state": "snapshotting",
                    "snapshots": snapshots,
                    "snapshot_timing": timing,
                    "message": f"CreateSnapshots returned {len(snapshots)} snapshot(s) in "
                    f"{returned_at - requested_at:.3f} s",
                }
            ),
            ("freezing", "snapshotting"),
        )
        extra, missing = sorted(set(taken) - set(known)), sorted(set(known) - set(taken))
        if extra or missing:
            raise SnapshotSetError(
                f"CreateSnapshots on {controller} took {', '.join(extra) or 'no other volume'} beyond "
                f"the array and missed {', '.join(missing) or 'none'}: the set is not the array"
            )
        return {
            "taken": True,
            "freezes": freezes,
            "snapshots": len(snapshots),
            "requestedAt": requested_at,
            "returnedAt": returned_at,
            "thawHosts": thaw_hosts,
        }

    def _send_thaws(
        self, backup_id: str, hosts: Sequence[Mapping[str, Any]], document: str
    ) -> list[dict[str, Any]]:
        """thaw-io to each host, not waiting for it (the workflow polls); a host whose command
        could not be sent is left to the workflow's Thaw (it sends again) and its watchdog."""

        def send(host: Mapping[str, Any]) -> dict[str, Any]:
            parameters = {"Mountpoints": [host["mountpoints"]], "BackupId": [host["freezeKey"]]}
            command_id = ""
            if document:
                command_id, _ = self._send(document, host["instanceId"], f"vsa {backup_id} thaw", parameters)
            return {
                k: host[k] for k in ("instanceId", "mountpoints", "freezeKey", "thawMaxPolls") if k in host
            } | {"thawCommandId": command_id}

        # side by side: the last host's thaw does not wait on the sends to all the others
        with ThreadPoolExecutor(max_workers=max(1, min(SEND_WORKERS, len(hosts)))) as pool:
            return list(pool.map(send, hosts))

    def record_hosts(
        self,
        array_id: str,
        backup_id: str,
        freezes: Sequence[Mapping[str, Any]],
        thaws: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        """Keep what each host reported of its freeze and thaw (freeze-io / thaw-io reports)."""
        backup = self._backups.get(array_id, backup_id)
        hosts = _host_freezes(freezes, thaws)
        if hosts:
            backup = self._backups.save(backup.model_copy(update={"hosts": hosts}), (backup.state,))
        return {"hosts": len(hosts), "longestFreezeSeconds": backup.freeze_window_seconds}

    def progress(self, array_id: str, backup_id: str, last_wait: int | None) -> dict[str, Any]:
        backup = self._backups.get(array_id, backup_id)
        ids = [s.snapshot_id for s in backup.snapshots]
        found: dict[str, dict[str, Any]] = {}
        for snapshot_id in ids:  # one by one: a snapshot deleted behind our back is an error, not a 400
            try:
                for s in self._ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"]:
                    found[s["SnapshotId"]] = dict(s)
            except ClientError as error:
                if _code(error) != "InvalidSnapshot.NotFound":
                    raise
        snapshots = tuple(
            s.model_copy(
                update={
                    "state": found[s.snapshot_id]["State"],
                    "progress": sets.parse_progress(found[s.snapshot_id].get("Progress")),
                    "state_message": found[s.snapshot_id].get("StateMessage"),
                }
            )
            if s.snapshot_id in found
            else s.model_copy(update={"state": "error", "state_message": "the snapshot no longer exists"})
            for s in backup.snapshots
        )
        state = sets.set_state(snapshots)
        done = sum(1 for s in snapshots if s.state == "completed")
        backup = self._backups.save(
            backup.model_copy(
                update={
                    "snapshots": snapshots,
                    "message": f"{done} of {len(snapshots)} snapshot(s) completed",
                }
            ),
            ("snapshotting",),
        )
        wait = (
            PROGRESS_FIRST_WAIT_SECONDS
            if not last_wait
            else min(PROGRESS_MAX_WAIT_SECONDS, math.ceil(last_wait * 1.5))
        )
        return {"state": state, "completed": done, "total": len(snapshots), "waitSeconds": wait}

    def finish(self, array_id: str, backup_id: str) -> dict[str, Any]:
        backup = self._backups.get(array_id, backup_id)
        state = sets.set_state(backup.snapshots)
        if state != "completed":
            broken = [s for s in backup.snapshots if s.state == "error"]
            why = (
                "; ".join(
                    f"{s.snapshot_id} of {s.volume_id} is in error"
                    + (f": {s.state_message}" if s.state_message else "")
                    for s in broken
                )
                or "no snapshots"
            )
            backup = self._fail(backup, f"snapshot(s) failed: {why}", expected=("snapshotting",))
            return {"state": backup.state, "failure": backup.failure}
        label, reason = sets.consistency(
            backup.mode, backup.hosts, backup.freeze_timeout_seconds, backup.snapshot_timing
        )
        self._ec2.create_tags(
            Resources=[s.snapshot_id for s in backup.snapshots],
            Tags=[{"Key": sets.CONSISTENCY_TAG, "Value": label}],
        )
        backup = self._backups.save(
            backup.model_copy(
                update={
                    "state": "completed",
                    "consistency": label,
                    "consistency_reason": reason,
                    "completed_at": _now(),
                    "message": f"{len(backup.snapshots)} snapshot(s) completed",
                }
            ),
            ("snapshotting",),
        )
        return {"state": backup.state, "consistency": label, "reason": reason}

    def fail(
        self,
        array_id: str,
        backup_id: str,
        error: Mapping[str, Any] | None,
        freezes: Sequence[Mapping[str, Any]] = (),
        thaws: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """The workflow caught an error: record the hosts' reports, fail the set, delete its snapshots."""
        backup = self._backups.get(array_id, backup_id)
        hosts = _host_freezes(freezes, thaws)
        if hosts:
            backup = backup.model_copy(update={"hosts": hosts})
        backup = self._fail(backup, _error_message(error), expected=(backup.state,))
        return {"state": backup.state, "failure": backup.failure}

    def _fail(self, backup: BackupSet, why: str, expected: tuple[str, ...]) -> BackupSet:
        if backup.state in ("failed", "completed", "deleting"):
            return backup
        deleted = self._delete_snapshots(backup)
        note = f" (deleted {len(deleted)} snapshot(s))" if deleted else ""
        return self._backups.save(
            backup.model_copy(update={"state": "failed", "failure": why + note, "message": "failed"}),
            expected,
        )

    # --- restore ---------------------------------------------------------------------------------

    def restore(self, array_id: str, backup_id: str, new_array_id: str | None) -> dict[str, Any]:
        """io2 Multi-Attach volumes from a completed set, in the array's AZ, tagged back to the
        set; for a new array, its spec registered (the source's, these volumes as existing
        volumes). Reads the source; never changes it."""
        array = self._registry.get(array_id)
        backup = self.get(array_id, backup_id)
        if backup.state != "completed":
            raise ConflictError(
                f"backup set {backup_id} is {backup.state}: only a completed set can be restored"
            )
        target = new_array_id or array_id
        if new_array_id is not None:
            if new_array_id == array_id:
                raise InvalidBackupError(
                    "target arrayId is the source array: a restore never touches the source"
                )
            try:
                self._registry.get(new_array_id)
            except ArrayNotFoundError:
                pass
            else:
                raise ConflictError(f"array {new_array_id!r} exists: restore into a new array id")
        created: list[dict[str, str]] = []
        try:
            spec = self._restore_volumes(array, backup, target, created, new_array_id)
        except (ClientError, ConflictError) as error:
            # nothing half-done: the volumes made so far go again, nothing stays registered
            removed, left = self._delete_volumes([v["volumeId"] for v in created])
            leftover = (
                "; NOT deleted (delete them by hand; they carry vsa:restored-from): "
                + ", ".join(f"{volume_id} ({why})" for volume_id, why in left)
                if left
                else ""
            )
            if isinstance(error, ClientError):
                code = error.response["Error"].get("Code", "?")
                message = error.response["Error"].get("Message", "")
                raise RestoreError(
                    f"restore of {backup_id} failed ({error.operation_name}: {code}: {message}); "
                    f"the {len(removed)} volume(s) it had created were deleted{leftover} and nothing "
                    "was registered: fix the cause and restore again"
                ) from error
            if left:
                raise RestoreError(
                    f"restore of {backup_id} failed ({error}); the {len(removed)} volume(s) it had "
                    f"created were deleted{leftover} and nothing was registered"
                ) from error
            raise
        return {
            "arrayId": array_id,
            "backupId": backup_id,
            "target": {"arrayId": new_array_id} if new_array_id else {"volumesOnly": True},
            "availabilityZone": array.spec.availability_zone,
            "volumes": created,
            "registered": spec.model_dump(by_alias=True, mode="json") if spec else None,
        }

    def _delete_volumes(self, volume_ids: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
        """Delete what a failed restore made: (deleted, [(volume id, why not)]). A refusal is
        reported, never swallowed: the caller names each volume left behind and AWS's reason."""
        deleted: list[str] = []
        left: list[tuple[str, str]] = []
        for volume_id in volume_ids:
            try:
                self._ec2.delete_volume(VolumeId=volume_id)
                deleted.append(volume_id)
            except ClientError as error:
                left.append((volume_id, str(error.response["Error"].get("Code", "?"))))
        return deleted, left

    def _restore_volumes(
        self,
        array: RegisteredArray,
        backup: BackupSet,
        target: str,
        created: list[dict[str, str]],
        new_array_id: str | None,
    ) -> ArraySpec | None:
        """One volume per snapshot (appended to ``created`` as made), then the new array's spec
        registered when there is one."""
        backup_id = backup.backup_id
        for snapshot in backup.snapshots:
            tags = {
                ARRAY_TAG: target,
                RESTORED_FROM_TAG: backup_id,
                SOURCE_VOLUME_TAG: snapshot.volume_id,
                "Name": f"vsa-{target}-restore-{snapshot.volume_id}",
            }
            volume = self._ec2.create_volume(
                SnapshotId=snapshot.snapshot_id,
                AvailabilityZone=array.spec.availability_zone,
                VolumeType="io2",
                Iops=snapshot.iops or 3000,
                MultiAttachEnabled=True,
                TagSpecifications=[
                    {"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                ],
            )
            created.append(
                {
                    "sourceVolumeId": snapshot.volume_id,
                    "snapshotId": snapshot.snapshot_id,
                    "volumeId": volume["VolumeId"],
                }
            )
        if new_array_id is None:
            return None
        data = array.spec.model_dump(by_alias=True)
        data["arrayId"] = new_array_id
        data["volumes"] = [ExistingVolume(volume_id=v["volumeId"]).model_dump(by_alias=True) for v in created]
        spec = ArraySpec.model_validate(data)
        self._registry.create(spec)
        return spec


def _host_freezes(
    freezes: Sequence[Mapping[str, Any]], thaws: Sequence[Mapping[str, Any]]
) -> tuple[HostFreeze, ...]:
    thawed = {t.get("instanceId"): t for t in thaws}
    hosts = []
    for result in freezes:
        instance_id = str(result.get("instanceId"))
        thaw = thawed.get(instance_id)
        errors = [e for e in (_command_error(result, "freeze-io"), _command_error(thaw, "thaw-io")) if e]
        freeze_report = _report(result.get("stdout"))
        thaw_report = _report(thaw.get("stdout")) if thaw else None
        hosts.append(
            sets.host_freeze(
                instance_id,
                freeze_report,
                thaw_report,
                # the reports say why themselves; SSM's word only when a report is missing
                error="; ".join(errors)
                if errors and (freeze_report is None or thaw_report is None)
                else None,
            )
        )
    return tuple(hosts)


def from_settings(settings: Settings) -> BackupService:
    """The service as the Lambdas use it: the registry table and workflow from the settings."""
    return BackupService(
        registry=ArrayRegistry(settings.table_name),
        backups_registry=BackupRegistry(settings.table_name),
        arrays=ArrayService(scheduler_role_arn=settings.backup_scheduler_role_arn),
        state_machine_arn=settings.backup_state_machine_arn,
    )


def _error_message(error: Mapping[str, Any] | None) -> str:
    """A Step Functions caught error ``{Error, Cause}`` as one sentence (a Lambda's Cause is JSON)."""
    if not error:
        return "the workflow failed"
    name, cause = str(error.get("Error", "Error")), error.get("Cause")
    try:
        parsed = json.loads(cause) if isinstance(cause, str) else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("errorMessage"):
        return f"{parsed.get('errorType', name)}: {parsed['errorMessage']}"
    return f"{name}: {cause}" if cause else name


def _dump(decisions: Iterable[Any]) -> list[dict[str, Any]]:
    return [d.model_dump(by_alias=True, mode="json") for d in decisions]
