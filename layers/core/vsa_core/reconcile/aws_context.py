"""What every ReconcileArray step on AWS starts from: its clients (``ReconcileContext``) and the
array as it observes it (``observe``: the registry, EC2's volumes and attachments)."""

from dataclasses import dataclass
from typing import Any

from vsa_core.arrays import aws_observe
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.controllers import slots
from vsa_core.reconcile import plan
from vsa_core.reconcile.aws_start import ReconcileStarter
from vsa_core.reconcile.plan import Observed


@dataclass(frozen=True)
class ReconcileContext:
    registry: ArrayRegistry
    arrays: ArrayService
    dynamodb: Any
    ec2: Any
    ssm: Any
    table: str
    autoscaling: Any = None
    starter: ReconcileStarter | None = None
    """starts ReconcileArray (BootstrapController's handover); None where no step needs it"""


def observe(ctx: ReconcileContext, array_id: str) -> tuple[Observed, dict[int, dict[str, str]]]:
    array = ctx.registry.get(array_id)
    spec = array.spec
    found = aws_observe.owned_volumes(ctx.arrays.ctx, spec.array_id)
    owned = {name: str(v["VolumeId"]) for name, v in found.items()}
    ids = spec.existing_volume_ids + tuple(owned[v.name] for v in spec.new_volumes if v.name in owned)
    held = ctx.registry.slots(array_id)
    controllers = plan.controllers_of(held)
    described: dict[str, dict[str, Any]] = {}
    if ids or array.pending_volume_deletions:
        # a filter, not VolumeIds: a volume deleted since is absent, not an error
        wanted = [*ids, *array.pending_volume_deletions]
        for page in ctx.ec2.get_paginator("describe_volumes").paginate(
            Filters=[{"Name": "volume-id", "Values": wanted}]
        ):
            described.update({v["VolumeId"]: v for v in page["Volumes"]})
    if controllers:
        for page in ctx.ec2.get_paginator("describe_volumes").paginate(
            Filters=[{"Name": "attachment.instance-id", "Values": [c.instance_id for c in controllers]}]
        ):
            described.update({v["VolumeId"]: v for v in page["Volumes"]})
    modifications: dict[str, str] = {}
    if ids:
        # a filter, not VolumeIds: by id, a volume never modified fails the whole call
        # (InvalidVolumeModification.NotFound); the answer holds each volume's latest only
        answer = ctx.ec2.describe_volumes_modifications(Filters=[{"Name": "volume-id", "Values": list(ids)}])
        found = answer.get("VolumesModifications", [])
        modifications = {str(m["VolumeId"]): str(m.get("ModificationState")) for m in found}
    hosts = {h.instance_id for h in spec.hosts}
    data = set(slots.DEVICE_NAMES)  # a controller's data volumes (its root volume is not one)
    observed = Observed(
        spec=spec,
        volume_ids=ids,
        controllers=controllers,
        volume_states={v: str(d.get("State")) for v, d in described.items()},
        attachments={
            v: {a["InstanceId"]: a["State"] for a in d.get("Attachments", []) if a.get("Device") in data}
            for v, d in described.items()
        },
        removed_hosts=tuple(h for h in array.pending_host_removals if h not in hosts),
        missing_volumes=tuple(v.name for v in spec.new_volumes if v.name not in owned),
        sizes={v: int(d["Size"]) for v, d in described.items() if v in ids and d.get("Size") is not None},
        modifications=modifications,
        deletions=array.pending_volume_deletions,
        tags={v: aws_observe.tag_dict(d.get("Tags")) for v, d in described.items()},
    )
    return observed, held
