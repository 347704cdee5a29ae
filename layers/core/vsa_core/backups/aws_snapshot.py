"""ConsistentBackup's point in time: freeze-io sent to every host at once, then ONE
CreateSnapshots across every array volume as soon as the last has frozen (its marker, or Run
Command's status), then the thaw marker the hosts poll (``vsa_core.backups.signals``); thaw-io
is sent here only when there is no marker (else the workflow's Thaw sends it)."""

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.backups import signals
from vsa_core.backups.aws_context import BackupContext, code
from vsa_core.backups.reports import parse_report
from vsa_core.backups.sets import (
    SnapshotTiming,
    VolumeSnapshot,
    parse_progress,
    snapshot_tags,
)
from vsa_core.errors import (
    SnapshotLimitError,
    SnapshotSetError,
)
from vsa_core.observability import logger

# freeze-io / thaw-io sends in flight at once (one SendCommand per host: each has its mountpoints)
SEND_WORKERS = 8


def freeze(
    ctx: BackupContext, backup_id: str, hosts: Sequence[Mapping[str, Any]], document: str, array_id: str = ""
) -> dict[str, Any]:
    """Send freeze-io to every host at once (each arms its watchdog before freezing), not
    waiting: the Snapshot step checks them. With the deployment's signals, each host gets its
    URLs (its frozen report's PUT, the thaw marker's GET). A host SSM refuses is recorded as
    undelivered."""
    urls: dict[str, dict[str, str]] = {}
    # the set's label is read here, before any host freezes: the snapshots' tags carry it, and
    # the Snapshot step then reads nothing between the last host's report and CreateSnapshots
    label = ctx.backups.get(array_id, backup_id).label if array_id else None
    instant = signals.freeze_at(ctx.clock(), ctx.freeze_lead)
    common = {"FreezeAt": [str(instant)]} if instant is not None else {}
    if ctx.signals is not None and array_id:
        timeout = max((int(h["timeoutSeconds"]) for h in hosts), default=10)
        urls = ctx.signals.parameters(array_id, backup_id, [h["instanceId"] for h in hosts], timeout)

    def send(host: Mapping[str, Any]) -> dict[str, Any]:
        parameters = {
            "Mountpoints": [host["mountpoints"]],
            "TimeoutSeconds": [host["timeoutSeconds"]],
            "BackupId": [host["freezeKey"]],
            **common,
            **{name: [value] for name, value in urls.get(host["instanceId"], {}).items()},
        }
        command_id, error = _send(ctx, document, host["instanceId"], f"vsa {backup_id} freeze", parameters)
        return {**host, "freezeCommandId": command_id, "freezeError": error}

    # side by side: the first host's freeze does not wait on the sends to all the others
    with ThreadPoolExecutor(max_workers=max(1, min(SEND_WORKERS, len(hosts)))) as pool:
        sent = list(pool.map(send, hosts))
    _connect(ctx, array_id, backup_id, bool(urls))
    return {
        "hosts": sent,
        "sentAt": ctx.clock(),
        "freezeAt": instant / 1000 if instant is not None else None,
        "signals": bool(urls),
        "label": label,
    }


def _connect(ctx: BackupContext, array_id: str, backup_id: str, signaled: bool) -> None:
    """The Snapshot step's two services reached once now, in the lead before the hosts freeze:
    its first look and its CreateSnapshots run in this execution environment inside the
    window, and without this they open their connections there (a TLS handshake each on AWS)
    and make the environment's first listing (on the local cloud the first backup after a
    deploy took 0.19 and 0.21 s from the last host frozen to the call, later ones 0.03-0.09 s;
    with this, 0.04 s: docs/backups.md). One listing of the set's reports (none yet) and one
    DescribeSnapshots of the set (none yet), both read-only and within the step's grants; a
    failure costs only the warm-up."""
    try:
        if signaled and ctx.signals is not None:
            ctx.signals.reported(array_id, backup_id)
        ctx.ec2.describe_snapshots(
            OwnerIds=["self"], Filters=[{"Name": "tag:vsa:backup", "Values": [backup_id]}], MaxResults=5
        )
    except (ClientError, BotoCoreError) as error:
        logger.info("Snapshot step's services not reached ahead", extra={"error": str(error)})


def _send(
    ctx: BackupContext, document: str, instance_id: str, comment: str, parameters: dict[str, list[str]]
) -> tuple[str, str]:
    """SendCommand to one host, not waiting: (command id, "") or ("", why SSM refused)."""
    try:
        answer = ctx.ssm.send_command(
            DocumentName=document,
            InstanceIds=[instance_id],
            Comment=comment,
            TimeoutSeconds=60,
            Parameters=parameters,
        )
    except ClientError as err:
        return "", f"{code(err)}: {err.response['Error'].get('Message', '')}"
    return str(answer["Command"]["CommandId"]), ""


def _freezing_since(freezing: Mapping[str, Any]) -> float:
    """When the hosts began to freeze: their common instant, or when they were sent (the later);
    a host still freezing ``timeout`` seconds after it is late."""
    return max(float(freezing.get("sentAt") or 0), float(freezing.get("freezeAt") or 0))


def _freeze_results(
    ctx: BackupContext, freezing: Mapping[str, Any], timeout: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each host's freeze-io outcome so far, and the hosts still freezing (within the timeout)."""
    results, waiting = [], []
    late = ctx.clock() - _freezing_since(freezing) > timeout
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
            answer = ctx.ssm.get_command_invocation(CommandId=host["freezeCommandId"], InstanceId=instance)
            status = answer["Status"]
        except ClientError as err:
            if code(err) != "InvocationDoesNotExist":
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
                "stderr": answer.get("StandardErrorContent", "") if status != "GaveUp" else "still freezing",
            }
        )
    return results, waiting


@dataclass(frozen=True)
class _Look:
    """One look at the freezing hosts: Run Command's results (hosts done without a marker), the
    hosts whose marker arrived, those still freezing, when to look again, when SSM was read."""

    results: list[dict[str, Any]]
    signaled: set[str]
    waiting: list[str]
    wait_seconds: int
    ssm_checked_at: float


def _look(
    ctx: BackupContext,
    array_id: str,
    backup_id: str,
    freezing: Mapping[str, Any],
    timeout: float,
    previous: Mapping[str, Any],
) -> _Look:
    """The markers every time (one listing); Run Command's status for the hosts without one at
    most once a second (``signals.SSM_CHECK_SECONDS``), and always once they are late."""
    listed = ctx.signals.reported(array_id, backup_id) if ctx.signals and freezing.get("signals") else None
    on, signaled = listed is not None, listed or set()
    rest = [h for h in freezing.get("hosts", []) if h["instanceId"] not in signaled]
    # Run Command's status is first read a second after the sends (nothing has ended sooner)
    now, last = ctx.clock(), float(previous.get("ssmCheckedAt") or freezing.get("sentAt") or 0)
    if not rest:
        return _Look([], signaled, [], 0, last)
    common = float(freezing.get("freezeAt") or 0)
    late = now - _freezing_since(freezing) > timeout
    if on and not late and now - last < signals.SSM_CHECK_SECONDS:
        wait = signals.next_look(on, False, common - now)
        return _Look([], signaled, [h["instanceId"] for h in rest], wait, last)
    results, waiting = _freeze_results(ctx, {**freezing, "hosts": rest}, timeout)
    if on and ctx.signals is not None:
        # listed again: a host whose command ended since the first listing PUT its report before
        # it ended, so Run Command's word stands only for the hosts whose report never came
        signaled = ctx.signals.reported(array_id, backup_id) or signaled
        results = [r for r in results if r["instanceId"] not in signaled]
        waiting = [w for w in waiting if w not in signaled]
    return _Look(results, signaled, waiting, signals.next_look(on, bool(results), common - now), now)


def snapshot(
    ctx: BackupContext,
    array_id: str,
    backup_id: str,
    controller: str,
    excluded: Sequence[str],
    volumes: Sequence[Mapping[str, Any]],
    freezing: Mapping[str, Any] | None = None,
    thaw_document: str = "",
    freeze_timeout: float = 10,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """As soon as every host has frozen (or failed to, or is late): ONE CreateSnapshots call,
    every array volume at one point in time; then the thaw marker (the hosts' watchdogs thaw on
    it), or, without one, thaw-io sent to every host (``thawHosts``: each host with the command
    id, ``""`` when it was not sent — the workflow's Thaw sends those and waits for every one).
    While a host is still freezing it answers ``taken: false`` with ``waitSeconds`` (0 while
    the markers are what it waits on) and ``ssmCheckedAt``, which the workflow gives back as
    ``previous``."""
    freezing = freezing or {}
    look = _look(ctx, array_id, backup_id, freezing, freeze_timeout, previous or {})
    if look.waiting:
        return {
            "taken": False,
            "waiting": look.waiting,
            "waitSeconds": look.wait_seconds,
            "ssmCheckedAt": look.ssm_checked_at,
        }
    # the label as Freeze read it (a run started before it did so: read it now)
    label = freezing["label"] if "label" in freezing else ctx.backups.get(array_id, backup_id).label
    tags = snapshot_tags(array_id, backup_id, label)
    requested_at = ctx.clock()
    try:
        answer = ctx.ec2.create_snapshots(
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
        if code(error) in ("ConcurrentSnapshotLimitExceeded", "SnapshotCreationPerVolumeRateExceeded"):
            raise SnapshotLimitError(f"EBS refused CreateSnapshots: {error}") from None
        raise
    returned_at = ctx.clock()
    # The thaw marker first, on its own: the hosts poll it (every 50 ms for up to 250 hosts). Once
    # it is written, thaw-io is left to the workflow's Thaw, which sends it to every host a few
    # transitions later: it thaws a host the marker could not reach (delivered in hundreds of
    # milliseconds, it would come after the marker's next poll anyway) and brings back each
    # host's report, and its sends and deliveries then do not share the hosts' and S3's time
    # while the hosts are seeing the marker. Without the marker, thaw-io is sent at once.
    marked = (
        bool(freezing.get("signals"))
        and ctx.signals is not None
        and ctx.signals.thaw(array_id, backup_id, requested_at, returned_at)
    )
    thaw_hosts = _send_thaws(ctx, backup_id, freezing.get("hosts", []), "" if marked else thaw_document)
    freezes = _in_order(
        freezing, look.results + _signaled_results(ctx, array_id, backup_id, freezing, look.signaled)
    )
    backup = ctx.backups.get(array_id, backup_id)
    known = {v["volumeId"]: v for v in volumes}
    taken = {s["VolumeId"]: s for s in answer["Snapshots"]}
    snapshots = tuple(
        VolumeSnapshot(
            volume_id=volume,
            snapshot_id=taken[volume]["SnapshotId"],
            state=taken[volume].get("State", "pending"),
            progress=parse_progress(taken[volume].get("Progress")),
            volume_size=known.get(volume, {}).get("volumeSize") or taken[volume].get("VolumeSize"),
            iops=known.get(volume, {}).get("iops"),
        )
        for volume in sorted(taken)
    )
    timing = SnapshotTiming(requested_at=requested_at, returned_at=returned_at)
    ctx.backups.save(
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
        # present in every answer: the workflow's Taken? compares it beside "taken", and a
        # JSONPath Choice rule whose variable is missing fails the state on AWS (States.Runtime)
        "waitSeconds": 0,
        "freezes": freezes,
        "snapshots": len(snapshots),
        "requestedAt": requested_at,
        "returnedAt": returned_at,
        "thawHosts": thaw_hosts,
    }


def _signaled_results(
    ctx: BackupContext, array_id: str, backup_id: str, freezing: Mapping[str, Any], signaled: set[str]
) -> list[dict[str, Any]]:
    """The hosts that signalled, as Run Command's results would show them: the report they PUT
    is the line freeze-io printed. One that cannot be read is recorded as unknown (its label
    then says why), never assumed frozen."""
    if not signaled or ctx.signals is None:
        return []
    commands = {h["instanceId"]: h.get("freezeCommandId", "") for h in freezing.get("hosts", [])}
    why = "its frozen report was signalled but not read back"
    try:
        bodies = ctx.signals.reports(array_id, backup_id, sorted(signaled & set(commands)))
    except (ClientError, BotoCoreError) as error:
        bodies, why = {}, f"its frozen report was signalled but could not be read back: {error}"
    results = []
    for instance in sorted(signaled & set(commands)):
        body = bodies.get(instance)
        report = parse_report(body)
        status = (
            "Success" if report and report.get("status") == "frozen" else ("Failed" if report else "Unknown")
        )
        results.append(
            {
                "instanceId": instance,
                "commandId": commands[instance],
                "status": status,
                "stdout": body or "",
                "stderr": "" if body is not None else why,
            }
        )
    return results


def _in_order(freezing: Mapping[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order = {h["instanceId"]: i for i, h in enumerate(freezing.get("hosts", []))}
    return sorted(results, key=lambda r: order.get(r["instanceId"], len(order)))


def _send_thaws(
    ctx: BackupContext, backup_id: str, hosts: Sequence[Mapping[str, Any]], document: str
) -> list[dict[str, Any]]:
    """thaw-io to each host, not waiting for it (the workflow polls); a host whose command
    could not be sent is left to the workflow's Thaw (it sends again) and its watchdog."""

    def send(host: Mapping[str, Any]) -> dict[str, Any]:
        parameters = {"Mountpoints": [host["mountpoints"]], "BackupId": [host["freezeKey"]]}
        command_id = ""
        if document:
            command_id, _ = _send(ctx, document, host["instanceId"], f"vsa {backup_id} thaw", parameters)
        return {
            k: host[k] for k in ("instanceId", "mountpoints", "freezeKey", "thawMaxPolls") if k in host
        } | {"thawCommandId": command_id}

    # side by side: the last host's thaw does not wait on the sends to all the others
    with ThreadPoolExecutor(max_workers=max(1, min(SEND_WORKERS, len(hosts)))) as pool:
        return list(pool.map(send, hosts))
