"""ReconcileArray's steps on AWS, one per invocation (``step`` in the input); the workflow owns
the order of the phases, the waits, the bounds and the failure path.

- ``create``: create the owned volumes the stored spec declares that do not exist yet (the
  API no longer does: it answers within its 29 s however many there are), before the lock.
- ``lock``: take the array lock (``vsa_core.arrays.lock``) unless a controller is bootstrapping
  or draining; answers whether it was taken and, if not, why.
- ``start``: renew the lease, record the phase as the array's current step, then start the
  phase: attach the missing volumes, detach the removed ones, or send its documents (one
  SendCommand per instance and controller, side by side). Answers what it
  started, or ``pending: false`` when there was nothing to do.
- ``poll``: renew the lease and say whether the phase has finished (attachments seen by EC2,
  every invocation's status from one ListCommandInvocations).
- ``start``/``poll`` of ``roll``: the rolling replacement's next action
  (``vsa_core.reconcile.aws_roll``); its poll answers ``again`` once the action has settled and
  another is due, and the workflow starts the phase again.
- ``verify``: what is still not converged (``remaining``), and where the nodes' last reports
  show a volume at another size than EBS has it (``size_differences``).
"""

import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

from vsa_core.arrays import aws_keys, aws_lock, aws_observe, aws_reports, keys, lock
from vsa_core.controllers import aws_commands, aws_ownership, slots
from vsa_core.errors import RollBlockedError
from vsa_core.reconcile import aws_handover, aws_record, aws_roll, aws_start, plan, roll
from vsa_core.reconcile.aws_context import ReconcileContext, observe

__all__ = ["ReconcileContext", "Steps", "observe"]
from vsa_core.reconcile.plan import Observed
from vsa_core.reconcile.steps import (
    AnyStep,
    Create,
    HandOver,
    HandOverPoll,
    Lock,
    Poll,
    Start,
    StartHandover,
    Verify,
)


def _now() -> int:
    return int(time.time())


def take_lock(ctx: ReconcileContext, request: Lock) -> dict[str, Any]:
    held = ctx.registry.slots(request.array_id)
    busy = plan.in_flight(held)
    if busy:
        return {"acquired": False, "lock": "; ".join(busy) + ": waiting until it has finished"}
    return aws_lock.acquire(
        ctx.dynamodb, ctx.table, request.array_id, request.owner, lock.RECONCILE_LEASE_SECONDS, _now()
    )


def create(ctx: ReconcileContext, request: Create) -> dict[str, Any]:
    """Create the owned volumes the stored spec declares that do not exist yet (no lock: no
    node is touched), recorded as the run's step while it does."""
    array = ctx.registry.get(request.array_id)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    missing = ctx.arrays.missing_volumes(array.spec)
    if missing:
        step = f"{aws_record.CREATING_VOLUMES} {', '.join(missing)}"
        aws_record.progress(ctx.dynamodb, ctx.table, request.array_id, request.owner, step, now)
    done = ctx.arrays.create_volumes(array.spec, array.desired_controllers) if array.spec.new_volumes else {}
    return {"created": done.get("created", []), "existing": done.get("existing", [])}


def _hold(ctx: ReconcileContext, array_id: str, owner: str) -> None:
    aws_lock.renew(ctx.dynamodb, ctx.table, array_id, owner, lock.RECONCILE_LEASE_SECONDS, _now())


def start(ctx: ReconcileContext, request: Start) -> dict[str, Any]:
    _hold(ctx, request.array_id, request.owner)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    aws_record.progress(ctx.dynamodb, ctx.table, request.array_id, request.owner, request.phase, now)
    observed, _ = observe(ctx, request.array_id)
    answer: dict[str, Any] = {
        "phase": request.phase,
        "pending": False,
        "timeoutSeconds": plan.PHASE_TIMEOUT_SECONDS[request.phase],
        "commands": [],
        "document": "",
        "since": now,
        "hosts": [],
    }
    if request.phase == "roll":
        answer.update(_roll(ctx, request.array_id, request.owner, now, act=True))
    elif request.phase == "rekey":
        answer.update(_rekey(ctx, request, observed, now))
    elif request.phase == "settle":
        answer["pending"] = bool(plan.unready_volumes(observed))
    elif request.phase == "attach":
        started = _attach(ctx, observed)
        answer.update(pending=bool(started) or bool(plan.unattached(observed)), attached=started)
    elif request.phase == "detach":
        detached = []
        for volume_id, holders in plan.removed_volumes(observed).items():
            for instance_id in holders:
                ctx.ec2.detach_volume(VolumeId=volume_id, InstanceId=instance_id)
                detached.append(f"{volume_id} from {instance_id}")
        # a volume to delete must become available (its attachments gone) before the next phase
        answer.update(pending=bool(detached) or bool(plan.detaching(observed)), detached=detached)
    elif request.phase == "delete":
        refused = plan.refused_deletions(observed)
        if refused:  # never deleted: no longer pending (the run's answer names them)
            keep = [r.split(":", 1)[0] for r in refused]
            aws_record.clear_volume_deletions(ctx.dynamodb, ctx.table, request.array_id, keep)
        deleted = []
        for volume_id in plan.deletable(observed):
            # only available volumes (the detach phase waited for it); DeleteVolume is
            # conditional in IAM too: only a volume tagged vsa:owned=true
            ctx.ec2.delete_volume(VolumeId=volume_id)
            deleted.append(volume_id)
        gone = [v for v in observed.deletions if v not in observed.volume_states]
        aws_record.clear_volume_deletions(ctx.dynamodb, ctx.table, request.array_id, gone)
        answer.update(pending=bool(deleted), deleted=deleted, refused=refused)
    else:
        if request.phase == "disconnect" and observed.removed_hosts:
            observed, answer["unreachable"] = _reachable(ctx, request.array_id, observed)
        names = request.documents
        documents = plan.Documents(names.configure_target, names.connect_path, names.disconnect_path)
        node = plan.NodePaths(**request.node.model_dump())
        wave = None
        if request.phase == "export":
            # each controller's copy of the keys as they are now, before configure-target reads it
            aws_keys.refresh_controllers(
                aws_keys.of(ctx.arrays.ctx),
                observed.spec,
                [c.instance_id for c in observed.controllers],
                ctx.registry.get(request.array_id).rekey_stages,
            )
            wave = _ownership_wave(ctx, request, observed)
        invocations = [i.as_dict() for i in plan.commands(request.phase, observed, documents, node, wave)]
        if invocations:
            sent = aws_commands.send(ctx.ssm, invocations, plan.COMMAND_TIMEOUT_SECONDS[request.phase])
            answer.update(
                pending=True,
                document=invocations[0]["document"],
                since=sent["since"],
                commands=sent["commands"],
                hosts=list(observed.removed_hosts) if request.phase == "disconnect" else [],
            )
            if wave is not None:
                answer["owners"] = {**wave.as_dict(), "last": wave.last}
    return answer


def _ownership_wave(ctx: ReconcileContext, request: Start, observed: Observed) -> plan.OwnershipWave | None:
    """With fencing, the export phase's wave of the owners' handover (recorded as under way
    before its runs are sent), fencing any owner slot that no longer serves by the key its
    last configure-target report gave; None without fencing."""
    if observed.spec.fencing != plan.RESERVATIONS:
        return None
    array = ctx.registry.get(request.array_id)
    serving = {c.slot for c in observed.controllers}
    instances = aws_ownership.stored_instances(ctx.dynamodb, ctx.table, request.array_id)
    lost_keys: dict[int, str] = {}
    for slot in {s for s in array.owners.values() if s not in serving}:
        instance = instances.get(slot)
        document = request.documents.configure_target
        key = (
            aws_ownership.reservation_key(ctx.ssm, instance, document, request.array_id) if instance else None
        )
        if key is not None:
            lost_keys[slot] = key
    wave = plan.export_wave(observed, array.owners, array.owners_handover, lost_keys)
    if wave is not None and wave.moving:
        aws_ownership.begin(ctx.dynamodb, ctx.table, request.array_id, wave.as_dict())
    return wave


def _handed_over(ctx: ReconcileContext, array_id: str, moving: dict[str, Any]) -> bool:
    """An export wave finished: record the next wave (True: the phase starts again for it) or,
    after the last, the owners every serving controller now holds."""
    if not moving.get("last", True):
        aws_ownership.begin(ctx.dynamodb, ctx.table, array_id, {"after": moving["after"], "wave": 2})
        return True
    instances = {c.slot: c.instance_id for c in plan.controllers_of(ctx.registry.slots(array_id))}
    under_way = {"after": {str(v): int(s) for v, s in dict(moving["after"]).items()}, "wave": moving["wave"]}
    aws_ownership.commit(ctx.dynamodb, ctx.table, array_id, under_way, instances)
    return False


def _reachable(ctx: ReconcileContext, array_id: str, observed: Observed) -> tuple[Observed, list[str]]:
    """Removed hosts that are not online managed nodes (terminated, agent gone) cannot run
    disconnect-path (SendCommand refuses them): they are no longer pending, and the export phase
    disallows them, so a path they may still hold ends by its ctrl-loss-tmo. The others stay."""
    nodes = aws_observe.managed_nodes(ctx.arrays.ctx, list(observed.removed_hosts))
    gone = [h for h in observed.removed_hosts if nodes.get(h, {}).get("PingStatus") != "Online"]
    aws_record.clear_host_removals(ctx.dynamodb, ctx.table, array_id, gone)
    kept = tuple(h for h in observed.removed_hosts if h not in gone)
    return dataclasses.replace(observed, removed_hosts=kept), gone


def _attach(ctx: ReconcileContext, observed: Observed) -> list[str]:
    """AttachVolume of every spec volume missing on a serving controller (each call only starts
    an attachment; they proceed side by side), at a free device name of that controller."""
    started = []
    for instance_id, volume_ids in plan.missing_attachments(observed).items():
        pages = ctx.ec2.get_paginator("describe_volumes").paginate(
            Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}]
        )
        in_use = [
            str(a.get("Device"))
            for page in pages
            for v in page["Volumes"]
            for a in v.get("Attachments", [])
            if a["InstanceId"] == instance_id
        ]
        reservations = ctx.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        instance = reservations[0]["Instances"][0]
        in_use += [m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])]
        devices = slots.devices_for(volume_ids, in_use)
        for volume_id in volume_ids:
            ctx.ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=devices[volume_id])
            started.append(f"{volume_id} to {instance_id}")
    return started


def _roll(ctx: ReconcileContext, array_id: str, owner: str, now: str, *, act: bool) -> dict[str, Any]:
    """The roll's next step (taken when ``act``), recorded as the run's step in words."""
    array = ctx.registry.get(array_id)
    seen = aws_roll.observe(ctx.autoscaling, ctx.ec2, array, ctx.registry.slots(array_id))
    if seen is None:
        return {"pending": False, "roll": "done", "reason": "no controller group"}
    members, wanted, group = seen
    step = roll.next_step(members, wanted, group)
    if step.kind == "blocked":
        raise RollBlockedError(step.reason)
    if act:
        aws_roll.act(ctx.autoscaling, ctx.dynamodb, ctx.table, array, owner, step, group)
    if step.kind != "done":
        aws_record.progress(ctx.dynamodb, ctx.table, array_id, owner, f"roll: {step.reason}", now)
    return {
        "pending": step.kind != "done",
        "roll": step.kind,
        "reason": step.reason,
        **({"instanceId": step.instance_id} if step.instance_id else {}),
    }


def _rekey(ctx: ReconcileContext, request: Start, observed: Observed, now: str) -> dict[str, Any]:
    """A key rotation's next action (``keys.rekey_step``), recorded as the run's step in words:
    new keys into one controller's nvmet, then every host's path to it re-authenticating with
    them, controller by controller; at the end the new keys become the array's. Nothing when
    no rotation is under way (every run passes here)."""
    if observed.spec.authentication != keys.DH_HMAC_CHAP:
        return {"rekey": "none", "reason": "the array does not authenticate", "pending": False}
    clients = aws_keys.of(ctx.arrays.ctx)
    serving = [(c.instance_id, c.address) for c in observed.controllers]
    names = request.documents
    documents = plan.Documents(names.configure_target, names.connect_path, names.disconnect_path)
    node = plan.NodePaths(**request.node.model_dump())
    while True:
        stages = ctx.registry.get(request.array_id).rekey_stages
        stored = aws_keys.rotation(clients, observed.spec, stages)
        step = keys.rekey_step(stored, serving)
        said = {"rekey": step.kind, "reason": step.reason}
        if step.kind == "none":
            return {**said, "pending": False}
        assert stored is not None  # a rotation is under way
        aws_record.progress(
            ctx.dynamodb, ctx.table, request.array_id, request.owner, f"rekey: {step.reason}", now
        )
        if step.kind == "promote":
            # the secrets first: progress left behind without a rotation in the secret is ignored
            aws_keys.promote(clients, observed.spec, [c for c, _ in serving], stages)
            aws_record.set_rekey_stages(ctx.dynamodb, ctx.table, request.array_id, {})
            return {**said, "pending": False}
        assert step.done is not None  # a target or paths action
        if step.kind == "target":
            assert step.begin is not None
            # recorded before the copy: every writer of copies then derives this one's content
            stages = stored.at_stage(step.instance_id, step.begin, step.address).stages()
            aws_record.set_rekey_stages(ctx.dynamodb, ctx.table, request.array_id, stages)
            aws_keys.refresh_controllers(clients, observed.spec, [step.instance_id], stages)
        else:
            aws_keys.rekey_hosts(clients, observed.spec, stages)
        invocations, timeout = plan.rekey_commands(step, observed, documents, node)
        if not invocations:  # no host: its paths are trivially at the new keys
            _rekey_stage(ctx, request.array_id, step.instance_id, step.done, step.address)
            continue
        sent = aws_commands.send(ctx.ssm, [i.as_dict() for i in invocations], timeout)
        return {
            **said,
            "pending": True,
            "instanceId": step.instance_id,
            "address": step.address,
            "then": step.done,
            "document": invocations[0].document,
            "since": sent["since"],
            "commands": sent["commands"],
        }


def _rekey_stage(
    ctx: ReconcileContext, array_id: str, instance_id: str, stage: keys.Stage, address: str
) -> None:
    """A controller's rotation stage, once reached (under the array lock: the one writer)."""
    stages = dict(ctx.registry.get(array_id).rekey_stages)
    stages[instance_id] = {"stage": stage, "address": address}
    aws_record.set_rekey_stages(ctx.dynamodb, ctx.table, array_id, stages)


def poll(ctx: ReconcileContext, request: Poll) -> dict[str, Any]:
    _hold(ctx, request.array_id, request.owner)
    started = request.started
    if request.phase == "roll":
        now = datetime.now(UTC).isoformat(timespec="seconds")
        seen = _roll(ctx, request.array_id, request.owner, now, act=False)
        # settled: nothing left (done), or the next action is due (again: the phase restarts)
        again = seen["roll"] in ("surge", "retire")
        waited = _waited(started)
        return {
            "done": seen["roll"] == "done",
            "again": again,
            "failed": [],
            "waiting": [] if again or seen["roll"] == "done" else [seen["reason"]],
            "waitedSeconds": waited,
            "timedOut": seen["roll"] == "wait" and waited >= int(started["timeoutSeconds"]),
        }
    if request.phase in ("settle", "attach", "detach", "delete"):
        observed, _ = observe(ctx, request.array_id)
        waiting = {
            "settle": plan.unready_volumes,
            "attach": plan.unattached,
            "detach": plan.detaching,
            "delete": plan.deleting,
        }[request.phase](observed)
        if request.phase == "delete" and not waiting:
            aws_record.clear_volume_deletions(
                ctx.dynamodb, ctx.table, request.array_id, list(started.get("deleted", []))
            )
        waited = _waited(started)
        return {
            "done": not waiting,
            "again": False,
            "failed": [],
            "waiting": waiting,
            "waitedSeconds": waited,
            "timedOut": bool(waiting) and waited >= int(started["timeoutSeconds"]),
        }
    wanted = set(plan.invocation_pairs(started["commands"]))
    since = datetime.fromisoformat(started["since"])
    states = aws_commands.invocation_states(ctx.ssm, started["document"], since, wanted)
    if request.phase == "rekey":
        if states["done"]:  # this action's stage reached; the phase starts again for the next
            stage = str(started["then"])
            if stage not in keys.STAGES:
                raise ValueError(f"the rekey action's stage {stage!r} is not one of {keys.STAGES}")
            _rekey_stage(ctx, request.array_id, started["instanceId"], stage, started["address"])
        timed_out = not states["done"] and states["waitedSeconds"] >= int(started["timeoutSeconds"])
        return {
            **states,
            "done": False,
            "again": states["done"],
            "waiting": states["running"],
            "timedOut": timed_out,
        }
    if states["done"] and request.phase == "disconnect":
        hosts = list(started.get("hosts", []))
        aws_record.clear_host_removals(ctx.dynamodb, ctx.table, request.array_id, hosts)
    handing_over = bool(states["done"] and request.phase == "export" and started.get("owners"))
    if handing_over and _handed_over(ctx, request.array_id, dict(started["owners"])):
        return {**states, "done": False, "again": True, "waiting": [], "timedOut": False}
    timed_out = not states["done"] and states["waitedSeconds"] >= int(started["timeoutSeconds"])
    return {**states, "again": False, "waiting": states["running"], "timedOut": timed_out}


def _waited(started: dict[str, Any]) -> int:
    return int((datetime.now(UTC) - datetime.fromisoformat(started["since"])).total_seconds())


def verify(ctx: ReconcileContext, request: Verify) -> dict[str, Any]:
    _hold(ctx, request.array_id, request.owner)
    observed, held = observe(ctx, request.array_id)
    left = plan.remaining(observed)
    authenticates = observed.spec.authentication == keys.DH_HMAC_CHAP
    stages = ctx.registry.get(request.array_id).rekey_stages
    stored = aws_keys.rotation(aws_keys.of(ctx.arrays.ctx), observed.spec, stages) if authenticates else None
    if stored is not None and stored.rotation is not None:
        serving = [(c.instance_id, c.address) for c in observed.controllers]
        left.append(f"keys rotation under way: {keys.rekey_step(stored, serving).reason}")
    if request.documents is not None and not left:
        # the nodes' own reports (Run Command's history): every controller re-read each
        # volume's size in the export phase, every host reported what it sees in connect
        names = request.documents
        controller_reports = {
            c.instance_id: aws_reports.last_report(
                ctx.ssm, c.instance_id, (names.configure_target,), request.array_id
            )
            for c in observed.controllers
        }
        host_reports = {
            h: aws_reports.last_report(
                ctx.ssm, h, (names.connect_path, names.disconnect_path), request.array_id
            )
            for h, _ in observed.hosts
        }
        left += plan.size_differences(observed, controller_reports, host_reports)
    return {
        "converged": not left,
        "remaining": left,
        "controllers": len(observed.controllers),
        "volumes": len(observed.volume_ids),
        "hosts": len(observed.spec.hosts),
        "inFlight": plan.in_flight(held),
    }


class Steps:
    """Each ReconcileArray step one function of this module, given the clients this object holds."""

    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx

    def run(self, request: AnyStep) -> dict[str, Any]:
        match request:
            case HandOver():
                return aws_handover.handover(self.ctx, request)
            case HandOverPoll():
                return aws_handover.poll(self.ctx, request)
            case Lock():
                return take_lock(self.ctx, request)
            case Create():
                return create(self.ctx, request)
            case Start():
                return start(self.ctx, request)
            case Poll():
                return poll(self.ctx, request)
            case Verify():
                return verify(self.ctx, request)
            case StartHandover():
                if self.ctx.starter is None:
                    raise RuntimeError(
                        "startHandover needs the ReconcileArray starter: VSA_RECONCILE_STATE_MACHINE_ARN"
                    )
                return aws_start.start_handover(
                    self.ctx.starter, self.ctx.registry, request.array_id, request.instance_id
                )
