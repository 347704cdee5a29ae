"""Growing an array's owned volumes under EBS's Elastic Volumes rules (ModifyVolume, EC2 API
reference): one modification of a volume at a time ("you must wait for that modification to
reach the completed state before you can initiate another modification for the same volume")
and at most four within a rolling 24-hour period (older text said one every 6 hours).

``grow_volumes`` starts the modifications *before* the spec is stored, so a refusal leaves
nothing written; a volume whose modification is under way counts with its target size and IOPS
(``converging_volumes``), so re-applying the spec it converges to changes nothing, and
``modification_conflicts`` tells ``validate`` which declared size EBS would refuse now."""

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_observe, plan
from vsa_core.arrays.aws_observe import ArrayClients, error_code, project
from vsa_core.arrays.plan import Change, Params
from vsa_core.arrays.spec import ArraySpec
from vsa_core.errors import ConflictError

IN_PROGRESS = ("modifying", "optimizing")
"""Volume modification states in which EBS refuses another modification of the volume."""
MODIFICATION_WINDOW = timedelta(hours=24)
"""EBS: "You can modify a volume up to four times within a rolling 24-hour period"."""
REFUSALS = ("IncorrectModificationState", "VolumeModificationRateExceeded", "IncorrectState")


def resizes(change: Change) -> bool:
    """Whether ``change`` asks for a new size or IOPS (a tag change alone is no modification)."""
    return any(f in ("Size", "Iops") for f, _, _ in change.fields)


def latest_modifications(clients: ArrayClients, volume_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each volume's most recent modification (DescribeVolumesModifications answers only that
    one), by volume id; a volume never modified is absent. A filter, not VolumeIds: by id, a
    volume never modified fails the whole call (InvalidVolumeModification.NotFound)."""
    ids = sorted(volume_ids)
    if not ids:
        return {}
    answer = clients.ec2.describe_volumes_modifications(Filters=[{"Name": "volume-id", "Values": ids}])
    return {str(m["VolumeId"]): dict(m) for m in answer.get("VolumesModifications", [])}


def converging_volumes(clients: ArrayClients, array_id: str) -> dict[str, dict[str, Any]]:
    """The owned volumes as they are converging: a volume whose modification has not completed
    counts with its target size and IOPS (EBS shows the new size only from ``optimizing`` on,
    and refuses another modification until ``completed``), the modification under
    ``Modification``."""
    owned = aws_observe.owned_volumes(clients, array_id)
    latest = latest_modifications(clients, (v["VolumeId"] for v in owned.values()))
    for volume in owned.values():
        modification = latest.get(volume["VolumeId"])
        if modification is not None and modification.get("ModificationState") in IN_PROGRESS:
            volume["Size"] = modification.get("TargetSize", volume["Size"])
            volume["Iops"] = modification.get("TargetIops", volume["Iops"])
            volume["Modification"] = modification
    return owned


def modification_conflicts(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    """A declared size or IOPS EBS would refuse now: one differing from what an unfinished
    modification is taking the volume to, or any change of a volume not yet available."""
    conflicts: list[str] = []
    for name, have in converging_volumes(clients, spec.array_id).items():
        declared = next((v for v in spec.new_volumes if v.name == name), None)
        if declared is None or (declared.size_gib, declared.iops) == (have["Size"], have["Iops"]):
            continue
        modification = have.get("Modification")
        if modification is not None:
            conflicts.append(modification_refused(name, have["VolumeId"], "", "", modification, []))
        elif have.get("State") not in ("available", "in-use"):
            # ModifyVolume: "as long as the volume is in the in-use or available state"
            conflicts.append(
                f"volume {name} ({have['VolumeId']}) is {have.get('State')} and EBS modifies a volume "
                "only once it is available or in use: apply again once it is available"
            )
    return conflicts


def grow_volumes(clients: ArrayClients, spec: ArraySpec) -> list[Change]:
    """Start the ModifyVolume of every owned volume whose size or IOPS the spec changes, before
    the spec is stored. Answers the volumes' changes; ``apply`` then sees them converging.

    Raises ``ConflictError`` naming the volume and when it can be modified again."""
    observed = converging_volumes(clients, spec.array_id)
    started: list[str] = []
    changes: list[Change] = []
    for volume in spec.new_volumes:
        have = observed.get(volume.name)
        if have is None:
            continue
        params = plan.owned_volume_params(spec, volume)
        change = plan.diff_resource(f"volume/{volume.name}", params, project(have, params))
        if change is not None and resizes(change):
            modify_volume(clients, volume.name, str(have["VolumeId"]), params, started, stored=False)
            started.append(f"{volume.name} ({have['VolumeId']})")
            changes.append(change)
    return changes


def modify_volume(
    clients: ArrayClients, name: str, volume_id: str, params: Params, started: list[str], *, stored: bool
) -> None:
    """ModifyVolume to the declared size and IOPS; EBS's refusals as ``ConflictError``."""
    try:
        clients.ec2.modify_volume(VolumeId=volume_id, Size=params["Size"], Iops=params["Iops"])
    except ClientError as error:
        code = error_code(error)
        if code not in REFUSALS:
            raise
        latest = latest_modifications(clients, [volume_id]).get(volume_id, {})
        message = str(error.response.get("Error", {}).get("Message", ""))
        refused = modification_refused(name, volume_id, code, message, latest, started)
        # (after the spec was stored only when another apply modified the volume meanwhile)
        raise ConflictError(
            refused + ("; the spec is stored: apply it again then" if stored else "; nothing was stored")
        ) from error


def modification_refused(
    name: str, volume_id: str, code: str, message: str, latest: Mapping[str, Any], started: list[str]
) -> str:
    """What to tell the operator when EBS cannot modify ``volume_id`` yet, and when it can."""
    state, began = latest.get("ModificationState"), latest.get("StartTime")
    if code == "VolumeModificationRateExceeded":
        when = (
            f"by {(began + MODIFICATION_WINDOW).isoformat()} at the latest (24 hours after its most "
            f"recent modification, which started {began.isoformat()})"
            if isinstance(began, datetime)
            else "once 24 hours have passed since the earliest of its last four modifications"
        )
        what = (
            f"volume {name} ({volume_id}) was modified too often: EBS allows four modifications of a "
            f"volume within a rolling 24-hour period (ModifyVolume: {code}: {message}): apply again {when}"
        )
    elif code == "IncorrectState":
        what = (
            f"volume {name} ({volume_id}) cannot be modified in its state (ModifyVolume: {code}: "
            f"{message}): apply again once it is available or in use"
        )
    else:
        since = f" since {began.isoformat()}" if isinstance(began, datetime) else ""
        progress = latest.get("Progress")
        target = f"{latest.get('TargetSize')} GiB / {latest.get('TargetIops')} IOPS"
        what = (
            f"volume {name} ({volume_id}) is still being modified to {target} ({state}"
            f"{f', {progress}%' if progress is not None else ''}{since}) and EBS takes no new "
            "modification of a volume until the previous one has completed (optimizing can take "
            "minutes to hours): apply again once it has completed"
        )
    if started:
        what += (
            f"; already started by this request, and kept: the modification of {', '.join(started)} "
            "(the next apply finds it under way)"
        )
    return what
