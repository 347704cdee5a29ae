"""The scheduled health check on AWS: for every array, read what its hosts last reported
(``aws_reports``), judge it (``vsa_core.health.rules``), have Auto Scaling replace a controller
confirmed dead (``SetInstanceHealth`` Unhealthy: the group terminates it through the drain hook
and launches a replacement through the bootstrap hook), note a backup overdue, send report-paths
to the hosts for the next run, and publish what it saw as metrics.

It also computes every array's forecast floor (``vsa_core.scaling.aws_forecast``: the arrays'
demand history in batched GetMetricData calls at a 5-minute period, once a run, never in a
scaling decision), stores it on the array's registry item for ScaleArray's PlanScale, and when
the floor is above the group's desired count and no ScaleArray run holds the lock, starts
ScaleArray (the look-ahead, ``vsa_core.scaling.aws_lookahead``): a recurring surge gets its
controllers booted before it comes.

Metrics: per array, namespace ``VSA/Arrays`` with dimension ``ArrayId`` (the dashboard's
widgets find every array with a SEARCH expression): ``ServingControllers``,
``ControllerCapacityIops`` (serving controllers x ``perControllerIops``), ``MinLivePaths``,
``HostsShortOfPaths``, ``HostsUnreported``, ``DeadControllers``, ``BackupAgeSeconds`` (arrays
with a backup policy and a completed set), ``BackupOverdue``. Per deployment, namespace ``VSA``
with dimension ``Deployment`` (the stack's alarms watch these): ``HostsShortOfPaths``,
``BackupsOverdue``, ``ControllersReplaced``, ``HealthCheckFailures`` (arrays the run could not
check).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.arrays import aws_observe, aws_reports, aws_status, dataplane
from vsa_core.arrays.aws_observe import ArrayClients
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_reports import NodeDocuments
from vsa_core.arrays.spec import RegisteredArray
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.clients import client
from vsa_core.controllers import ownership
from vsa_core.health import aws_state, rules
from vsa_core.naming import arrays_namespace, group_name
from vsa_core.observability import logger
from vsa_core.reconcile.aws_start import ReconcileStarter
from vsa_core.scaling import aws_forecast, forecast
from vsa_core.scaling.aws_lookahead import ScaleStarter
from vsa_core.scaling.tuning import DEFAULT_BOOT_MINUTES
from vsa_core.settings import (
    AlarmRearm,
    HealthPeriod,
    NodeCommands,
    NodeDocumentNames,
    ReconcileWorkflow,
    Registry,
    ScaleWorkflow,
    StackMetrics,
)

DEPLOYMENT_NAMESPACE = "VSA"
"""The deployment's own metrics (dimension ``Deployment``: the stack); per array, they go to
``naming.arrays_namespace()``."""
UNITS = {"ControllerCapacityIops": "Count/Second", "BackupAgeSeconds": "Seconds"}
"""Every other per-array metric is a Count."""
ARRAY_METRICS = (
    "ServingControllers",
    "ControllerCapacityIops",
    "MinLivePaths",
    "HostsShortOfPaths",
    "HostsUnreported",
    "DeadControllers",
    "BackupAgeSeconds",
    "BackupOverdue",
    "ApplyUnfinished",
)
DEPLOYMENT_METRICS = (
    "HostsShortOfPaths",
    "BackupsOverdue",
    "ControllersReplaced",
    "HealthCheckFailures",
    "UnfinishedApplies",
)
PUT_BATCH = 1000
"""PutMetricData takes up to 1,000 metrics per call."""


class HealthSettings(
    Registry,
    StackMetrics,
    HealthPeriod,
    NodeDocumentNames,
    NodeCommands,
    ReconcileWorkflow,
    ScaleWorkflow,
    AlarmRearm,
):
    """What the deployed check reads: the registry, its period, the node documents and command
    paths its reports use, the workflows it starts and the metrics' stack."""


@dataclass(frozen=True)
class HealthContext:
    registry: ArrayRegistry
    backups: BackupRegistry
    clients: ArrayClients
    documents: NodeDocuments
    deployment: str
    period: timedelta
    """how often the check runs (the schedule's rate)"""
    reconcile: ReconcileStarter | None = None
    """starts ReconcileArray for a drift (None: the drift check is off)"""
    dynamodb: Any = None
    """the registry's table, for the check's own state (``aws_state``)"""
    table: str = ""
    scale: ScaleStarter | None = None
    """starts ScaleArray when the forecast floor is above the desired count (None: the floor is
    stored, nothing is started)"""
    forecast: bool = True
    """compute and store the forecast floors (off: neither, nor the look-ahead)"""
    boot_minutes: int = DEFAULT_BOOT_MINUTES
    nvme_command: str = "nvme"
    sysfs_root: str = "/sys"
    mounts_file: str = "/proc/self/mounts"
    configfs_root: str = "/sys/kernel/config"

    @property
    def max_age(self) -> timedelta:
        """A host report older than this judges nothing: two periods (a run's report-paths is
        read by the next one) and five minutes of delivery."""
        return 2 * self.period + timedelta(minutes=5)

    @property
    def horizon_minutes(self) -> int:
        """How far each run's floor looks ahead: a boot plus one period (``forecast.horizon_minutes``)."""
        return forecast.horizon_minutes(self.boot_minutes, int(self.period.total_seconds() // 60))

    @classmethod
    def from_settings(cls, settings: "HealthSettings") -> "HealthContext":
        """The deployed check's context: the stack's table, clients, documents and workflows."""
        sfn = client("stepfunctions")
        dynamodb = client("dynamodb")
        return cls(
            registry=ArrayRegistry(settings.table_name),
            backups=BackupRegistry(settings.table_name),
            clients=ArrayClients(
                ec2=client("ec2"),
                autoscaling=client("autoscaling"),
                cloudwatch=client("cloudwatch"),
                scheduler=None,
                ssm=client("ssm"),
                scheduler_role_arn="",
            ),
            documents=NodeDocuments.of(settings),
            reconcile=ReconcileStarter(
                sfn=sfn,
                dynamodb=dynamodb,
                table=settings.table_name,
                state_machine_arn=settings.reconcile_state_machine_arn,
            ),
            scale=ScaleStarter(
                sfn=sfn,
                state_machine_arn=settings.scale_state_machine_arn,
                rearm_seconds=settings.alarm_rearm_seconds,
            ),
            dynamodb=dynamodb,
            table=settings.table_name,
            deployment=settings.stack_name,
            period=timedelta(minutes=settings.health_check_minutes),
            nvme_command=settings.node_nvme_command,
            sysfs_root=settings.node_sysfs_root,
            mounts_file=settings.node_mounts_file,
            configfs_root=settings.node_configfs_root,
        )


@dataclass
class ArrayHealth:
    array_id: str
    assessment: rules.Assessment
    per_controller_iops: int = 0
    replaced: str | None = None
    held: str | None = None
    backup_age_seconds: float | None = None
    backup_overdue: bool = False
    reports_requested: int = 0
    drift: list[str] = field(default_factory=list)
    """the data plane's differences from the spec (drift), in words"""
    reconcile: str | None = None
    """the ReconcileArray run this check started for the drift"""
    forecast_floor: int | None = None
    """the forecast floor stored (0: off; None: not computed)"""
    forecast_reason: str | None = None
    lookahead: str | None = None
    """the ScaleArray run this check started ahead of a recurring surge"""
    apply_unfinished: int | None = None
    """the stored version whose apply has not finished (``RegisteredArray.applying``): under way,
    or stopped part way (API Gateway's 504); seen on two checks in a row, it stopped"""

    def as_dict(self) -> dict[str, Any]:
        a = self.assessment
        return {
            "arrayId": self.array_id,
            "servingControllers": a.serving,
            "hostsReporting": a.hosts_reporting,
            "hostsUnreported": a.hosts_stale,
            "hostsShortOfPaths": a.hosts_short,
            "minLivePaths": a.min_live_paths,
            "deadControllers": {c: a.witnesses[c] for c in a.dead},
            "replaced": self.replaced,
            "held": self.held,
            "backupAgeSeconds": self.backup_age_seconds,
            "backupOverdue": self.backup_overdue,
            "reportsRequested": self.reports_requested,
            "drift": self.drift,
            "reconcileStarted": self.reconcile,
            "forecastFloor": self.forecast_floor,
            "forecastReason": self.forecast_reason,
            "lookaheadStarted": self.lookahead,
            "applyUnfinished": self.apply_unfinished,
        }


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _serving_since(slot: dict[str, str]) -> datetime | None:
    """When the slot's controller began serving (bootstrap's ``servingSince``; else its lease)."""
    return _when(slot.get("servingSince") or slot.get("since"))


def _host_view(report: dataplane.Report | None, instance_id: str, array_id: str) -> rules.HostView:
    subsystems = dataplane.subsystems_of(report, array_id)
    return rules.HostView(
        instance_id=instance_id,
        reported_at=_when(report.at) if report is not None else None,
        paths={
            volume: [(str(p.get("address")), str(p.get("state"))) for p in entry.get("paths") or []]
            for volume, entry in subsystems.items()
        },
    )


def check_array(
    ctx: HealthContext, array: RegisteredArray, now: datetime, floor: forecast.Floor | None = None
) -> ArrayHealth:
    """One array: judge, act, ask the hosts for the next run's reports, keep the state; store
    its forecast ``floor`` and start ScaleArray ahead of a recurring surge."""
    spec = array.spec
    array_id = spec.array_id
    state = aws_state.load(ctx.dynamodb, ctx.table, array_id)
    slots = ctx.registry.slots(array_id)
    serving = [
        rules.Serving(item["instanceId"], item["address"], _serving_since(item))
        for item in slots.values()
        if item.get("state") == "serving" and item.get("address") and item.get("instanceId")
    ]
    volumes = aws_observe.volume_ids(ctx.clients, spec)
    hosts = [h.instance_id for h in spec.hosts]
    read = aws_reports.last_reports(
        ctx.clients.ssm, [(h, ctx.documents.host) for h in hosts], array_id, ctx.documents.recent, now
    )
    reports = dict(zip(hosts, read, strict=True))
    views = [_host_view(reports[h], h, array_id) for h in hosts]
    assessment = rules.assess(serving, views, volumes, now, ctx.max_age)
    group = aws_observe.describe_group(ctx.clients, group_name(array_id))
    members: list[dict[str, Any]] = list(group.get("Instances", [])) if group else []
    replacing = sum(
        1
        for m in members
        if str(m.get("LifecycleState", "")).startswith("Terminating") or m.get("HealthStatus") == "Unhealthy"
    )
    verdict = rules.verdict(assessment, state.get("suspects", {}), replacing)
    health = ArrayHealth(array_id, assessment, spec.per_controller_iops, held=verdict.held)
    health.apply_unfinished = array.unfinished_apply()
    if health.apply_unfinished is not None:
        logger.warning(
            "apply unfinished: apply the same spec again to finish it",
            extra={"array_id": array_id, "version": array.version},
        )
    if verdict.replace is not None:
        witnesses = ", ".join(assessment.witnesses.get(verdict.replace, []))
        ctx.clients.autoscaling.set_instance_health(
            InstanceId=verdict.replace, HealthStatus="Unhealthy", ShouldRespectGracePeriod=True
        )
        health.replaced = verdict.replace
        logger.warning(
            "controller marked Unhealthy: no host has a live path through it",
            extra={"array_id": array_id, "instance_id": verdict.replace, "witnesses": witnesses},
        )
    if verdict.held:
        logger.warning("dead controller not replaced", extra={"array_id": array_id, "why": verdict.held})

    backup_state: dict[str, str] = {}
    if spec.backup is not None:
        schedule = spec.backup.schedule
        since = _when(state.get("backupSince")) if state.get("schedule") == schedule else None
        since = since or now
        completed = [s.created_at for s in ctx.backups.sets(array_id) if s.state == "completed"]
        last = max(completed, default=None)
        health.backup_age_seconds = (now - last).total_seconds() if last is not None else None
        health.backup_overdue = rules.backup_overdue(schedule, last, since, now)
        backup_state = {"schedule": schedule, "backupSince": since.isoformat()}

    drift_state = _drift(ctx, array, health, state, now, slots, reports)
    health.reports_requested = _request_reports(
        ctx, array_id, hosts, volumes, [s.instance_id for s in serving]
    )
    aws_state.save(
        ctx.dynamodb,
        ctx.table,
        array_id,
        {"suspects": verdict.suspects, "checkedAt": now.isoformat(), **backup_state, **drift_state},
    )
    if floor is not None and group is not None:
        _lookahead(ctx, array, health, floor, int(group["DesiredCapacity"]), now)
    return health


def _lookahead(
    ctx: HealthContext,
    array: RegisteredArray,
    health: ArrayHealth,
    floor: forecast.Floor,
    desired: int,
    now: datetime,
) -> None:
    """Store the array's forecast floor for PlanScale; start ScaleArray when it is above the
    desired count and no run holds the lock (``forecast.lookahead``)."""
    array_id = array.spec.array_id
    health.forecast_floor, health.forecast_reason = floor.controllers, floor.reason
    if not aws_forecast.store_floor(ctx.dynamodb, ctx.table, array_id, floor, now):
        logger.info("forecast floor not stored: array gone or a newer floor", extra={"array_id": array_id})
        return
    spec = array.spec
    kind, why = forecast.lookahead(
        floor, desired, spec.max_controllers, array.scaling_lock_until, now, spec.min_controllers
    )
    if kind is not None and ctx.scale is not None:
        runs = forecast.lookahead_runs(floor, kind, desired, now)
        names = [
            ctx.scale.start(array_id, now, ctx.period, kind, None if kind == "high" else at) for at in runs
        ]
        health.lookahead = names[0]
        logger.info(why, extra={"array_id": array_id, "executions": names})
    elif floor.on or floor.ceiling_controllers:
        logger.info(why, extra={"array_id": array_id})


def _drift(
    ctx: HealthContext,
    array: RegisteredArray,
    health: ArrayHealth,
    state: dict[str, Any],
    now: datetime,
    slots: dict[int, dict[str, str]],
    reports: dict[str, dataplane.Report | None],
) -> dict[str, Any]:
    """The periodic drift check: the data plane against the spec, as the status names it; a
    drift that persists starts ReconcileArray (``rules.drift`` says when). Answers what to keep."""
    if ctx.reconcile is None:
        return {}
    differences = aws_status.data_plane_differences(ctx.clients, array.spec, slots, ctx.documents, reports)
    differences += _ownership_drift(ctx, array, slots)
    decided = rules.drift(
        [str(d.get("kind")) for d in differences],
        int(state.get("driftRuns", 0)),
        _when(state.get("driftStartedAt")),
        now,
        health.assessment.dead,
        (array.reconcile or {}).get("state"),
    )
    health.drift = [str(d.get("text")) for d in differences if d.get("kind") not in rules.NOT_DRIFT]
    kept: dict[str, Any] = {"driftRuns": decided.runs}
    if state.get("driftStartedAt"):
        kept["driftStartedAt"] = state["driftStartedAt"]
    if decided.start:
        started = ctx.reconcile.start(array.spec.array_id, array.version, health.drift)
        health.reconcile = str(started.get("executionName", ""))
        kept["driftStartedAt"] = now.isoformat()
        logger.warning(
            "drift: ReconcileArray started", extra={"array_id": array.spec.array_id, "drift": health.drift}
        )
    elif health.drift:
        logger.info(decided.why, extra={"array_id": array.spec.array_id})
    return kept


def _request_reports(
    ctx: HealthContext,
    array_id: str,
    hosts: Sequence[str],
    volumes: Sequence[str],
    controllers: Sequence[str],
) -> int:
    """Send report-paths to the array's hosts and report-exports to its serving controllers
    that SSM can reach now (an offline or unmanaged node cannot run it: its report goes stale,
    which the assessment counts). Answers how many were sent."""
    if not volumes or not (hosts or controllers):
        return 0
    nodes = aws_observe.managed_nodes(ctx.clients, [*hosts, *controllers])
    online = {n for n, info in nodes.items() if info.get("PingStatus") == "Online"}
    sent = 0
    for controller in (c for c in controllers if c in online and ctx.documents.report_exports):
        ctx.clients.ssm.send_command(
            DocumentName=ctx.documents.report_exports,
            InstanceIds=[controller],
            Parameters={"ArrayId": [array_id], "ConfigfsRoot": [ctx.configfs_root]},
            Comment=f"vsa health check: {array_id}"[:100],
        )
        sent += 1
    if not ctx.documents.report_paths:
        return sent
    for host in (
        h for h in hosts if h in online
    ):  # one command per host, as every Lambda sends (tests/infra: SendCommand batches)
        ctx.clients.ssm.send_command(
            DocumentName=ctx.documents.report_paths,
            InstanceIds=[host],
            Parameters={
                "ArrayId": [array_id],
                "Volumes": [",".join(volumes)],
                "NvmeCommand": [ctx.nvme_command],
                "SysfsRoot": [ctx.sysfs_root],
                "MountsFile": [ctx.mounts_file],
            },
            Comment=f"vsa health check: {array_id}"[:100],
        )
        sent += 1
    return sent


def to_check(arrays: Iterable[RegisteredArray]) -> list[RegisteredArray]:
    """The arrays a check covers: not those being deleted, nor those a restore registered that
    wait for their first apply (nothing of them is made: no controller to judge, no report to ask
    its hosts for, no drift to reconcile, no apply stopped part way)."""
    return [a for a in arrays if a.deleting is None and not a.awaiting_first_apply()]


def run(ctx: HealthContext, now: datetime, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Every array once (``only``: just those, e.g. an operator's "check this array now");
    one array's failure does not stop the others (it is counted in ``HealthCheckFailures`` and
    the run raises at the end, so Lambda counts an error)."""
    checked: list[ArrayHealth] = []
    failed: dict[str, str] = {}
    arrays = to_check(ctx.registry.all() if only is None else [ctx.registry.get(a) for a in only])
    # every array's floor from a few batched reads (fails soft: an unread floor is off)
    floors = (
        aws_forecast.read_floors(
            [a.spec for a in arrays], ctx.clients.cloudwatch, now, horizon_minutes=ctx.horizon_minutes
        )
        if ctx.forecast and arrays
        else {}
    )
    for array in arrays:
        try:
            checked.append(check_array(ctx, array, now, floors.get(array.spec.array_id)))
        except (ClientError, BotoCoreError) as error:
            logger.exception("health check failed", extra={"array_id": array.spec.array_id})
            failed[array.spec.array_id] = f"{type(error).__name__}: {error}"
    _publish(ctx, checked, len(failed), now)
    answer = {"arrays": [h.as_dict() for h in checked], "failed": failed}
    logger.info("health checked", extra=answer)
    if failed:
        raise RuntimeError(f"health check failed for {sorted(failed)}: {failed}")
    return answer


def _publish(ctx: HealthContext, checked: Sequence[ArrayHealth], failures: int, now: datetime) -> None:
    per_array: list[dict[str, Any]] = []
    for h in checked:
        a = h.assessment
        values: dict[str, float | None] = {
            "ServingControllers": a.serving,
            "ControllerCapacityIops": a.serving * h.per_controller_iops,
            "MinLivePaths": a.min_live_paths,
            "HostsShortOfPaths": len(a.hosts_short),
            "HostsUnreported": len(a.hosts_stale),
            "DeadControllers": len(a.dead),
            "BackupAgeSeconds": h.backup_age_seconds,
            "BackupOverdue": float(h.backup_overdue),
            "ApplyUnfinished": float(h.apply_unfinished is not None),
        }
        per_array += [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "ArrayId", "Value": h.array_id}],
                "Timestamp": now,
                "Value": float(value),
                "Unit": UNITS.get(name, "Count"),
            }
            for name, value in values.items()
            if value is not None
        ]
    totals: dict[str, float] = {
        "HostsShortOfPaths": sum(len(h.assessment.hosts_short) for h in checked),
        "BackupsOverdue": sum(h.backup_overdue for h in checked),
        "ControllersReplaced": sum(h.replaced is not None for h in checked),
        "HealthCheckFailures": failures,
        "UnfinishedApplies": sum(h.apply_unfinished is not None for h in checked),
    }
    deployment = [
        {
            "MetricName": name,
            "Dimensions": [{"Name": "Deployment", "Value": ctx.deployment}],
            "Timestamp": now,
            "Value": float(value),
            "Unit": "Count",
        }
        for name, value in totals.items()
    ]
    for namespace, data in ((arrays_namespace(), per_array), (DEPLOYMENT_NAMESPACE, deployment)):
        for i in range(0, len(data), PUT_BATCH):
            ctx.clients.cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[i : i + PUT_BATCH])


def _ownership_drift(
    ctx: HealthContext, array: RegisteredArray, slots: dict[int, dict[str, str]]
) -> list[dict[str, Any]]:
    """With fencing, the owners recorded against an even split over the serving controllers: a
    controller that joined owning nothing (a scale-out, a replacement), a volume with no owner or
    an owner that no longer serves, a handover left part way. Each is drift: ReconcileArray's
    export phase hands the volumes over."""
    if array.spec.fencing != ownership.RESERVATIONS:
        return []
    serving = {s for s, item in slots.items() if item.get("state") == "serving"}
    if not serving:
        return []
    owned = aws_observe.owned_volumes(ctx.clients, array.spec.array_id)
    names = [v.name for v in array.spec.new_volumes if v.name in owned]
    volumes = [*array.spec.existing_volume_ids, *(str(owned[n]["VolumeId"]) for n in names)]
    expected = ownership.owners(volumes, serving, array.owners)
    recorded = {v: s for v, s in array.owners.items() if v in expected}
    if array.owners_handover is None and recorded == expected:
        return []
    moving = ownership.moves(recorded, expected)
    why = (
        "a handover stopped part way"
        if array.owners_handover is not None
        else (f"{len(moving)} volume(s) to hand over to an even split over slots {sorted(serving)}")
    )
    return [{"node": "array", "kind": rules.OWNERS, "volume": None, "text": f"volume owners: {why}"}]
