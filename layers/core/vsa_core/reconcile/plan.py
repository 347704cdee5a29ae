"""What ReconcileArray does in each phase, given what it observed. Pure.

The workflow runs the phases in this order, every run, each idempotent (a phase with nothing
to do answers so at once): re-running converges from wherever a run stopped.

1. ``settle``: wait until every spec volume is available or in use (a volume the API created
   moments ago is ``creating``), and until no spec volume's modification is still ``modifying``
   (an apply that grew a volume started its ModifyVolume; EBS: "size increases take effect once
   the volume modification reaches the optimizing state", so ``optimizing`` and ``completed``
   are both good: the device already has its new size).
2. ``attach``: every spec volume to every serving controller (AttachVolume, io2 Multi-Attach);
   wait until attached.
3. ``disconnect``: hosts let go first. A volume leaving the spec: every host disconnects it
   from every controller. A host leaving the spec: it disconnects every path of the array.
4. ``export``: configure-target on every serving controller with the spec's volumes and hosts:
   a new volume becomes a subsystem with the same identities everywhere, a new host is
   allowed, a removed volume's subsystem and a removed host's link go; existing subsystems are
   left as they are (the document writes only what differs); a namespace whose device grew
   since nvmet last read its size is told to re-read it (``revalidate_size``), which makes
   nvmet announce the change to every connected host.
5. ``connect``: connect-path on every host to every serving controller (it connects only the
   subsystems without a path there; paths in use are untouched), and reports the size each
   host sees.
6. ``detach``: a volume no longer in the spec, from every serving controller; one an apply
   asked to delete is waited for until EBS has it ``available`` (DeleteVolume takes no other).
7. ``delete``: an owned volume an apply asked to delete (``deleteRemovedVolumes``), once
   detached: only if it carries this array's tags as created by it (``vsa:owned=true``) and the
   spec does not list it; wait until EBS has deleted it. Any other volume is never deleted.
8. ``roll``: controllers that run another AMI or instance type than the group launches are
   replaced one at a time, the new one serving before the old one drains
   (``vsa_core.reconcile.roll``); each action is waited for, then the phase starts again
   (``again``) until none is outdated.

Then ``verify``: whether anything is left (a controller that started serving meanwhile, short
of a volume; a controller or host whose last report shows a volume at another size than EBS
has it); the workflow runs the phases again if so (bounded rounds).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from vsa_core.arrays import dataplane, keys
from vsa_core.arrays.dataplane import Report
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, OWNED_TAG, ArraySpec
from vsa_core.controllers import ownership
from vsa_core.naming import deployment
from vsa_core.nvme import host_nqn

Phase = Literal["settle", "attach", "disconnect", "export", "connect", "detach", "delete", "roll", "rekey"]
PHASES: tuple[Phase, ...] = (
    "settle",
    "attach",
    "disconnect",
    "export",
    "connect",
    "detach",
    "delete",
    "roll",
    "rekey",
)

PHASE_TIMEOUT_SECONDS: Mapping[Phase, int] = {
    # EBS creates an io2 volume in seconds to a few minutes; a modification leaves ``modifying``
    # for ``optimizing`` in about as long (the size is usable from then on; optimizing itself,
    # which can take hours, is not waited for)
    "settle": 600,
    "attach": 180,
    "disconnect": 300,  # disconnect-path's TimeoutSeconds + delivery
    "export": 600,  # configure-target's TimeoutSeconds
    "connect": 420,  # connect-path's 300 s + delivery, as BootstrapController
    "detach": 180,
    "delete": 300,  # EBS deletes a volume in seconds to minutes
    # each of the roll's actions (a surge until the new controller serves, a retire until the
    # old one is gone: a launch + bootstrap, a drain + termination); the phase starts again
    # for the next one (vsa_core.reconcile.roll)
    "roll": 1800,
    # each of a key rotation's actions (configure-target on one controller, or connect-path on
    # every host to it: as export and connect); the phase starts again for the next one
    # (vsa_core.arrays.keys.rekey_step); after the roll, so a replaced controller is rekeyed
    "rekey": 600,
}
COMMAND_TIMEOUT_SECONDS: Mapping[Phase, int] = {"disconnect": 120, "export": 600, "connect": 300}

ATTACHED = ("attaching", "attached")
READY = ("available", "in-use")
MODIFYING = "modifying"
"""The one modification state whose new size the volume does not have yet (EBS: then
``optimizing``, where the size is usable, then ``completed``; or ``failed``, where it keeps its
old size and nothing is left to wait for)."""


@dataclass(frozen=True)
class Controller:
    instance_id: str
    address: str
    slot: int


@dataclass(frozen=True)
class Observed:
    """The array as a reconcile step sees it: the spec, the serving controllers, the volumes
    (the spec's and any other attached to a serving controller) with their attachments."""

    spec: ArraySpec
    volume_ids: tuple[str, ...]
    """The spec's volumes, by id (existing ones and the owned ones created so far)."""
    controllers: tuple[Controller, ...]
    """The serving controllers (registry slots in state ``serving``), by slot."""
    volume_states: Mapping[str, str]
    """EBS state of each volume described (a spec volume missing here does not exist)."""
    attachments: Mapping[str, Mapping[str, str]]
    """volume id → {instance id → attachment state}."""
    removed_hosts: tuple[str, ...] = ()
    """Hosts that left the spec and have not been disconnected yet (and are not back in it)."""
    missing_volumes: tuple[str, ...] = field(default=())
    """Owned volumes the spec declares that do not exist yet (names)."""
    sizes: Mapping[str, int] = field(default_factory=dict)
    """volume id → its size on EBS (GiB; the new one from ``optimizing`` on)."""
    modifications: Mapping[str, str] = field(default_factory=dict)
    """volume id → the state of its most recent modification (a volume never modified: absent)."""
    deletions: tuple[str, ...] = ()
    """Owned volumes an apply asked to delete and not deleted yet (the array item's
    ``pendingVolumeDeletions``)."""
    tags: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """volume id → its tags, for the volumes described."""

    @property
    def hosts(self) -> tuple[tuple[str, str], ...]:
        return tuple((h.instance_id, host_nqn(h)) for h in self.spec.hosts)


@dataclass(frozen=True)
class Invocation:
    """One SendCommand: a document to one instance (as every fan-out of the Lambdas: SSM takes
    at most 50 instance ids per call, and one per call never reaches that limit; each host
    then also carries its own parameters)."""

    document: str
    instance_id: str
    parameters: Mapping[str, str]
    comment: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "instanceId": self.instance_id,
            "parameters": dict(self.parameters),
            "comment": self.comment[:100],
        }


@dataclass(frozen=True)
class NodePaths:
    """Where the documents find things on the nodes (the stack's Node* parameters)."""

    configfs_root: str = "/sys/kernel/config"
    device_dir: str = "/dev/disk/by-id"
    modprobe_command: str = "modprobe"
    nvme_command: str = "nvme"
    nvme_config: str = "/etc/nvme/config.json"
    sysfs_root: str = "/sys"
    aws_command: str = "aws"
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class Documents:
    configure_target: str
    connect_path: str
    disconnect_path: str


def unready_volumes(observed: Observed) -> list[str]:
    """What the ``settle`` phase still waits for, in words (empty: nothing)."""
    waiting = [f"volume {name} not created yet" for name in observed.missing_volumes]
    for volume_id in observed.volume_ids:
        state = observed.volume_states.get(volume_id)
        if state not in READY:
            waiting.append(f"volume {volume_id} is {state or 'not found'}")
        elif observed.modifications.get(volume_id) == MODIFYING:
            waiting.append(
                f"volume {volume_id} is being modified (modifying): its new size is usable once "
                "the modification is optimizing"
            )
    return waiting


def missing_attachments(observed: Observed) -> dict[str, list[str]]:
    """controller instance id → the spec volumes not attaching/attached to it."""
    missing: dict[str, list[str]] = {}
    for controller in observed.controllers:
        for volume_id in observed.volume_ids:
            if observed.attachments.get(volume_id, {}).get(controller.instance_id) not in ATTACHED:
                missing.setdefault(controller.instance_id, []).append(volume_id)
    return missing


def unattached(observed: Observed) -> list[str]:
    """Spec volumes not yet ``attached`` (attaching counts as not yet) to a serving controller."""
    return [
        f"{volume_id} on {c.instance_id}"
        for c in observed.controllers
        for volume_id in observed.volume_ids
        if observed.attachments.get(volume_id, {}).get(c.instance_id) != "attached"
    ]


def removed_volumes(observed: Observed) -> dict[str, list[str]]:
    """Volumes attached to a serving controller that the spec no longer lists: volume id → the
    controllers holding it. (A controller is the array's own: every data volume on it is the
    array's; its root volume is not in ``attachments``.)"""
    serving = {c.instance_id for c in observed.controllers}
    removed: dict[str, list[str]] = {}
    for volume_id, holders in observed.attachments.items():
        if volume_id in observed.volume_ids:
            continue
        on = sorted(i for i, state in holders.items() if i in serving and state in ATTACHED)
        if on:
            removed[volume_id] = on
    return removed


def leaving(observed: Observed) -> dict[str, list[str]]:
    """Volumes the spec no longer lists whose attachment to a serving controller EBS is still
    ending (``detaching``): volume id → those controllers."""
    serving = {c.instance_id for c in observed.controllers}
    found: dict[str, list[str]] = {}
    for volume_id, holders in observed.attachments.items():
        if volume_id in observed.volume_ids:
            continue
        on = sorted(i for i, state in holders.items() if i in serving and state == "detaching")
        if on:
            found[volume_id] = on
    return found


RESERVATIONS = "reservations"


def export_ahead(record: Mapping[str, str] | None, before_lock: Sequence[str]) -> bool:
    """Whether the recorded ReconcileArray run still has its export phase ahead: converging and
    at a step before the lock (one starting with a ``before_lock`` step: creating volumes,
    waiting for the lock) or in a phase before ``export``. Such a run hands a controller serving
    now its share of the volumes (the export phase's owners are an even split over the
    controllers serving when it runs), so a newcomer need not start another."""
    if not record or record.get("state") != "converging":
        return False
    step = record.get("step", "")
    return step.startswith(tuple(before_lock)) or step in PHASES[: PHASES.index("export")]


@dataclass(frozen=True)
class OwnershipWave:
    """The export phase's part of a handover (``fencing: reservations``): the owners every run
    gets (``after``), which wave this is and the controllers it runs on with the keys each
    fences first, and whether another wave follows (``last`` False: the takers, once every
    giver has released)."""

    after: Mapping[str, int]
    wave: int
    runs: tuple[ownership.Run, ...]
    last: bool
    moving: bool

    def as_dict(self) -> dict[str, Any]:
        return {"after": dict(self.after), "wave": self.wave}


def export_wave(
    observed: Observed,
    owners: Mapping[str, int],
    under_way: Mapping[str, Any] | None,
    lost_keys: Mapping[int, str],
) -> OwnershipWave | None:
    """The export phase's wave with fencing on (None without): the handover recorded as under
    way, resumed at its wave while it still fits the array (the same volumes, takers still
    serving), else a new one from the stored ``owners`` to an even split over the serving
    controllers. ``lost_keys``: the reservation key of each owner slot that no longer serves.
    None too while no controller serves (a new or restored array's first run, every controller
    still launching): nothing is exported, and the first to serve starts the handover that gives
    it the volumes (BootstrapController's StartHandover), fencing any lost owner first."""
    if observed.spec.fencing != RESERVATIONS:
        return None
    serving = {c.slot for c in observed.controllers}
    if not serving:
        return None
    after: dict[str, int] | None = None
    wave = 1
    if under_way:
        after = {str(v): int(s) for v, s in dict(under_way.get("after", {})).items()}
        wave = int(under_way.get("wave", 1))
        if set(after) != set(observed.volume_ids) or not set(after.values()) <= serving:
            after, wave = None, 1
    if after is None:
        after = ownership.owners(observed.volume_ids, serving, owners)
    before = {v: s for v, s in owners.items() if v in after}
    order = ownership.handover(before, after, serving, lost_keys)
    runs = order.first if wave == 1 else order.then
    return OwnershipWave(after, wave, runs, last=wave == 2 or not order.then, moving=after != dict(owners))


def _fencing(
    wave: OwnershipWave, run: ownership.Run, volume_ids: Sequence[str], node: NodePaths
) -> dict[str, str]:
    return {
        "Owners": ownership.owners_parameter(volume_ids, wave.after),
        "Fencing": RESERVATIONS,
        "FenceKeys": ",".join(run.fence_keys),
        "NvmeCommand": node.nvme_command,
        "BootIdFile": node.boot_id_file,
    }


def commands(
    phase: Phase, observed: Observed, documents: Documents, node: NodePaths, wave: OwnershipWave | None = None
) -> list[Invocation]:
    """The Run Command invocations of a command phase (``disconnect``, ``export``, ``connect``);
    with fencing, the export phase runs configure-target on ``wave``'s controllers only."""
    spec, array_id = observed.spec, observed.spec.array_id
    volumes = ",".join(observed.volume_ids)
    if phase == "disconnect":
        gone = sorted(removed_volumes(observed))
        hosts = [h for h, _ in observed.hosts]
        out: list[Invocation] = []
        every = ",".join([*observed.volume_ids, *gone])
        for c in observed.controllers:
            if gone:
                out += [
                    Invocation(
                        documents.disconnect_path,
                        host,
                        _disconnect(array_id, ",".join(gone), c.address, node),
                        f"vsa {array_id} remove volumes from {c.address}",
                    )
                    for host in hosts
                ]
            out += [
                Invocation(
                    documents.disconnect_path,
                    host,
                    _disconnect(array_id, every, c.address, node),
                    f"vsa {array_id} remove host from {c.address}",
                )
                for host in observed.removed_hosts
            ]
        return out
    if phase == "export":
        nqns = ",".join(n for _, n in observed.hosts)
        runs = {r.slot: r for r in wave.runs} if wave is not None else {}
        return [
            Invocation(
                documents.configure_target,
                c.instance_id,
                {
                    "ArrayId": array_id,
                    "Volumes": volumes,
                    "Slot": str(c.slot),
                    "HostNqns": nqns,
                    "AllowAnyHost": "true" if spec.allow_any_host else "false",
                    "ListenAddress": c.address,
                    "Mode": "apply",
                    "ConfigfsRoot": node.configfs_root,
                    "DeviceDir": node.device_dir,
                    "ModprobeCommand": node.modprobe_command,
                    # the controller's own key secret (written at its bootstrap and by every apply)
                    **keys.document_parameters(
                        spec.authentication, keys.node_secret_name(array_id, c.instance_id), node.aws_command
                    ),
                    **(_fencing(wave, runs[c.slot], observed.volume_ids, node) if wave is not None else {}),
                },
                f"vsa {array_id} reconcile configure-target slot {c.slot}",
            )
            for c in observed.controllers
            if wave is None or c.slot in runs
        ]
    if phase == "connect":
        return [
            Invocation(
                documents.connect_path,
                host,
                {
                    "ArrayId": array_id,
                    "Volumes": volumes,
                    "Address": c.address,
                    "HostNqn": nqn,
                    "NvmeCommand": node.nvme_command,
                    "SysfsRoot": node.sysfs_root,
                    # where nvme-cli keeps the failover settings (as BootstrapController sends it)
                    "NvmeConfig": node.nvme_config,
                    **keys.document_parameters(
                        spec.authentication, keys.node_secret_name(array_id, host), node.aws_command
                    ),
                },
                f"vsa {array_id} reconcile connect-path to {c.address}",
            )
            for c in observed.controllers
            for host, nqn in observed.hosts
        ]
    raise ValueError(f"phase {phase} sends no commands")


def rekey_commands(
    step: keys.RekeyStep, observed: Observed, documents: Documents, node: NodePaths
) -> tuple[list[Invocation], int]:
    """A key rotation's action as Run Command invocations and their timeout: configure-target
    on the one controller (``target``: exactly the export phase's command for it, which reads
    its copy, now at the new keys), or connect-path on every host for that controller's address
    (``paths``: the connect phase's, whose document re-authenticates an existing path whose keys
    differ from its copy's)."""
    if step.kind == "target":
        sent = [i for i in commands("export", observed, documents, node) if i.instance_id == step.instance_id]
        return sent, COMMAND_TIMEOUT_SECONDS["export"]
    if step.kind == "paths":
        sent = [
            i
            for i in commands("connect", observed, documents, node)
            if i.parameters["Address"] == step.address
        ]
        return sent, COMMAND_TIMEOUT_SECONDS["connect"]
    return [], 0


def _disconnect(array_id: str, volumes: str, address: str, node: NodePaths) -> dict[str, str]:
    # AllowLastPath: the volume (or the host) leaves the array, so its last path goes too
    return {
        "ArrayId": array_id,
        "Volumes": volumes,
        "Address": address,
        "AllowLastPath": "true",
        "NvmeCommand": node.nvme_command,
    }


def detaching(observed: Observed) -> list[str]:
    """What the ``detach`` phase still waits for: removed volumes still on a serving controller
    or still ``detaching`` from one (DetachVolume answers at once; the volume is free for another
    instance, or for an operator's DeleteVolume, only once EBS has ended the attachment), and a
    volume to delete until EBS has it ``available`` (its last attachment gone)."""
    removed = removed_volumes(observed)
    waiting = [f"{v} on {', '.join(on)}" for v, on in removed.items()]
    waiting += [
        f"{v} detaching from {', '.join(on)}" for v, on in leaving(observed).items() if v not in removed
    ]
    for volume_id in deletable(observed):
        state = observed.volume_states.get(volume_id)
        if state != "available" and volume_id not in removed:
            waiting.append(f"{volume_id} is {state} (deleted once available)")
    return waiting


def owned_by(observed: Observed, volume_id: str) -> bool:
    """Whether the array created ``volume_id`` (its tags: ``vsa:array=<id>``, this deployment's
    ``vsa:deployment``, ``vsa:owned=true``)."""
    tags = observed.tags.get(volume_id, {})
    return (
        tags.get(ARRAY_TAG) == observed.spec.array_id
        and tags.get(DEPLOYMENT_TAG) == deployment()
        and tags.get(OWNED_TAG) == "true"
    )


def deletable(observed: Observed) -> list[str]:
    """The volumes to delete that still exist: asked for, created by this array, not in the spec."""
    return [
        v
        for v in observed.deletions
        if v in observed.volume_states
        and observed.volume_states[v] != "deleted"
        and v not in observed.volume_ids
        and owned_by(observed, v)
    ]


def refused_deletions(observed: Observed) -> list[str]:
    """Volumes asked to be deleted that this array may not delete, in words: never deleted."""
    refused = []
    for v in observed.deletions:
        if v in observed.volume_ids:
            refused.append(f"{v}: back in the spec, kept")
        elif v in observed.volume_states and not owned_by(observed, v):
            refused.append(f"{v}: not created by array {observed.spec.array_id}, never deleted")
    return refused


def deleting(observed: Observed) -> list[str]:
    """What the ``delete`` phase still waits for: volumes asked deleted that still exist."""
    return [f"{v} is {observed.volume_states.get(v)}" for v in deletable(observed)]


def remaining(observed: Observed) -> list[str]:
    """What is not converged, in words (empty: converged as far as AWS shows it)."""
    left = unready_volumes(observed)
    left += [f"volume {v} not attached to {c}" for c, vs in missing_attachments(observed).items() for v in vs]
    left += [
        f"volume {v} (no longer in the spec) still attached to {', '.join(on)}"
        for v, on in removed_volumes(observed).items()
    ]
    left += [
        f"volume {v} (no longer in the spec) still detaching from {', '.join(on)}"
        for v, on in leaving(observed).items()
    ]
    left += [f"host {h} (no longer in the spec) not disconnected yet" for h in observed.removed_hosts]
    left += [f"volume {v} (to be deleted) still exists" for v in deletable(observed)]
    return left


def size_differences(
    observed: Observed,
    controller_reports: Mapping[str, Report | None],
    host_reports: Mapping[str, Report | None],
) -> list[str]:
    """Where the nodes do not show a spec volume at its EBS size, in words: a serving
    controller whose last configure-target report exports it at another size, a host whose
    last connect-path (or disconnect-path) report sees it so. The reports are this run's when
    its export and connect phases ran (every run runs both); a node with no report, or no size
    in it, is no size difference (``GET /arrays/{id}`` names what it lacks)."""
    desired = dataplane.Desired(
        array_id=observed.spec.array_id,
        volumes=[dataplane.Volume(v, v, observed.sizes.get(v)) for v in observed.volume_ids],
        hosts=[dataplane.Host(h, nqn) for h, nqn in observed.hosts],
        allow_any_host=observed.spec.allow_any_host,
        authentication=observed.spec.authentication,
    )
    seen = dataplane.Observed(
        controllers=[
            dataplane.Controller(c.instance_id, c.address, c.slot, "serving") for c in observed.controllers
        ],
        controller_reports={k: v for k, v in controller_reports.items() if v is not None},
        host_reports={k: v for k, v in host_reports.items() if v is not None},
    )
    differences = dataplane.compare(desired, seen)
    return [d.text for d in differences if d.kind == "size"]


def data_plane(spec: ArraySpec) -> tuple[Any, ...]:
    """The part of a spec that ReconcileArray converges: the volumes (and their sizes), the hosts
    and their NQNs, whether any host may connect, how hosts authenticate, how a lost controller
    is fenced."""
    return (
        spec.existing_volume_ids,
        tuple((v.name, v.size_gib, v.iops) for v in spec.new_volumes),
        tuple((h.instance_id, host_nqn(h)) for h in spec.hosts),
        spec.allow_any_host,
        spec.authentication,
        spec.fencing,
    )


def left_hosts(before: ArraySpec | None, after: ArraySpec) -> tuple[str, ...]:
    """Hosts the new spec drops: they must disconnect (ReconcileArray's ``disconnect``)."""
    if before is None:
        return ()
    kept = {h.instance_id for h in after.hosts}
    return tuple(sorted(h.instance_id for h in before.hosts if h.instance_id not in kept))


KEEP_HINT = (
    "kept, detached (the array created it): delete it with PUT /arrays/{id}?deleteRemovedVolumes=true "
    "(vsactl apply --delete-removed-volumes)"
)


def pending_work(
    before: ArraySpec | None, after: ArraySpec, delete_removed: bool = False, deleting: tuple[str, ...] = ()
) -> list[str]:
    """What ReconcileArray will do for this apply, one line per volume or host (the apply's
    answer says it: what the API did is in ``changes``, what remains is this). ``delete_removed``:
    the apply asked to delete the owned volumes it removes; ``deleting``: owned volumes an
    earlier apply removed (and kept) that this one asks to delete (by id)."""
    if before is None:
        return [f"volume {v}: delete (created by the array, no longer in the spec)" for v in deleting]
    work: list[str] = []
    old_ids, new_ids = set(before.existing_volume_ids), set(after.existing_volume_ids)
    old_new = {v.name: v for v in before.new_volumes}
    for volume_id in sorted(new_ids - old_ids):
        work.append(f"volume {volume_id}: attach to every serving controller, export, connect every host")
    for volume in after.new_volumes:
        was = old_new.get(volume.name)
        if was is None:
            work.append(
                f"volume {volume.name}: create, attach to every serving controller, export, connect hosts"
            )
        elif was.size_gib != volume.size_gib:
            work.append(
                f"volume {volume.name}: grow to {volume.size_gib} GiB (from {was.size_gib} GiB), "
                "re-read the size on every controller, verify on every host"
            )
        elif was.iops != volume.iops:
            work.append(
                f"volume {volume.name}: modified by EBS ({was.iops} -> {volume.iops} IOPS); "
                "nothing changes on the controllers or hosts"
            )
    for name in sorted(old_ids - new_ids):
        work.append(
            f"volume {name}: every host disconnects it, unexport, detach (kept: the array did not create it)"
        )
    for name in sorted(set(old_new) - {v.name for v in after.new_volumes}):
        fate = "then delete it (deleteRemovedVolumes)" if delete_removed else KEEP_HINT
        work.append(f"volume {name}: every host disconnects it, unexport, detach; {fate}")
    work += [f"volume {v}: delete (created by the array, no longer in the spec)" for v in deleting]
    old_hosts = {h.instance_id: host_nqn(h) for h in before.hosts}
    new_hosts = {h.instance_id: host_nqn(h) for h in after.hosts}
    for host in sorted(set(new_hosts) - set(old_hosts)):
        work.append(f"host {host}: allow on every controller, then connect through every controller")
    for host in sorted(set(old_hosts) - set(new_hosts)):
        work.append(f"host {host}: disconnect from every controller, then disallow")
    for host in sorted(h for h in set(old_hosts) & set(new_hosts) if old_hosts[h] != new_hosts[h]):
        work.append(f"host {host}: allow its new NQN, connect with it")
    if before.allow_any_host != after.allow_any_host:
        work.append(f"allowAnyHost {before.allow_any_host} -> {after.allow_any_host} on every controller")
    if before.controllers != after.controllers:
        work.append(
            "controllers: new launch settings; every controller running another AMI or instance type "
            "is replaced, one at a time, the new one serving before the old one drains"
        )
    return work


def creation_work(before: ArraySpec | None, after: ArraySpec, missing: list[str]) -> list[str]:
    """The answer's lines for the owned volumes ReconcileArray creates (``missing``: names), but
    those ``pending_work`` already names (added to an existing array's spec)."""
    named = {v.name for v in before.new_volumes} if before is not None else set()
    lines = []
    for volume in after.new_volumes:
        if volume.name not in missing or (before is not None and volume.name not in named):
            continue
        what = f"io2 {volume.size_gib} GiB, {volume.iops:,} IOPS, Multi-Attach, tagged vsa:owned=true"
        then = (
            "then each controller's bootstrap attaches and exports it"
            if before is None
            else "then attach to every serving controller, export, connect every host"
        )
        lines.append(f"volume {volume.name}: create ({what}), wait until available; {then}")
    return lines


def needs_reconcile(
    before: ArraySpec | None, after: ArraySpec, last_state: str | None, deleting: bool = False
) -> bool:
    """Whether an apply starts ReconcileArray: the data plane changed on an existing array, the
    controllers' launch settings changed (the roll replaces the running ones), the last run did
    not converge (re-applying resumes it), or owned volumes are to be deleted. A new array's
    controllers get everything from their bootstrap."""
    if before is None:
        return False
    return (
        data_plane(before) != data_plane(after)
        or before.controllers != after.controllers
        or last_state == "failed"
        or deleting
    )


def controllers_of(slots: Mapping[int, Mapping[str, str]]) -> tuple[Controller, ...]:
    return tuple(
        Controller(instance_id=item["instanceId"], address=item.get("address", ""), slot=slot)
        for slot, item in sorted(slots.items())
        if item.get("state") == "serving" and item.get("address")
    )


def in_flight(slots: Mapping[int, Mapping[str, str]]) -> list[str]:
    """Controllers bootstrapping or draining, in words: ReconcileArray takes the lock only when
    none is (their workflows read the spec once, at their start)."""
    return [
        f"controller {item.get('instanceId')} (slot {slot}) is {item.get('state')}"
        for slot, item in sorted(slots.items())
        if item.get("state") in ("bootstrapping", "draining")
    ]


def invocation_pairs(sent: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(command id, instance id) of every command sent."""
    return [(str(s["commandId"]), str(s["instanceId"])) for s in sent]
