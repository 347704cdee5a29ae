"""Restore drills: what one drill of an array is, which set it restores, and its verdict.

Pure and typed, no AWS. The RestoreDrill workflow restores a set to new volumes, attaches them to
a short-lived instance, runs the drill-check document there and cleans up; it feeds this module
what it observed and records what it answers.

The rules, in one place:

* **Which set** (:func:`choose_set`): the one asked for, which must be completed; else the newest
  completed set. A drill of a failed or unfinished set proves nothing.
* **RPO** (:attr:`Drill.rpo_seconds`): the set's age when the drill started; **RTO**
  (:attr:`Drill.rto_seconds`): the drill's start to its checks passing, the time a restore takes
  to readable data. Only a passed drill has an RTO.
* **Verdict** (:func:`verdict`): passed only if the document ran to success, its report says
  passed, and the set is within the policy's RPO bound.
* **Cleanup**: every volume and the instance carry ``vsa:drill=<drill id>``; the workflow deletes
  them whatever happened, and what it could not delete is named in ``leftovers``.
"""

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from vsa_core.arrays.callers import Caller
from vsa_core.arrays.spec import DEPLOYMENT_TAG, ArrayId, ArraySpec, DrillPolicy, InstanceId, VolumeId
from vsa_core.backups.sets import BackupId, BackupSet, SnapshotId
from vsa_core.errors import ConflictError, InvalidBackupError
from vsa_core.naming import deployment, launch_template_name

DrillState = Literal["running", "passed", "failed"]
DrillStage = Literal["restoring", "launching", "attaching", "checking", "cleaning", "done"]

DRILL_TAG = "vsa:drill"
"""The drill's volumes and instance carry ``vsa:drill=<drill id>``: what cleanup looks for, and
what the drill role's grants require."""
DRILL_ARRAY_TAG = "vsa:drill-of"
"""…and ``vsa:drill-of=<array id>``: never ``vsa:array``, so nothing mistakes a drill's volume
for one of the array's."""

DRILL_ID_PATTERN = r"^dr-[0-9]{8}T[0-9]{9}Z-[0-9a-f]{8}$"
_DRILL_ID = re.compile(DRILL_ID_PATTERN)
DrillId = Annotated[str, Field(pattern=DRILL_ID_PATTERN, description="dr-<UTC yyyymmddThhmmssmmm>Z-<8 hex>")]

REPORT_PROBLEMS_KEPT = 20
"""The drill record keeps this many of the report's problems (DynamoDB items are bounded)."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, defer_build=True)


def new_drill_id(now: datetime, entropy: str | None = None) -> str:
    """``dr-<UTC yyyymmddThhmmssmmm>Z-<8 hex>``: ids sort as their drills started. The suffix is
    random, or derived from ``entropy`` (a scheduled event's id) so a redelivery names the same."""
    if now.tzinfo is None:
        raise ValueError("new_drill_id needs an aware datetime (UTC)")
    at = now.astimezone(UTC)
    stamp = at.strftime("%Y%m%dT%H%M%S") + f"{at.microsecond // 1000:03d}Z"
    suffix = secrets.token_hex(4) if entropy is None else hashlib.sha256(entropy.encode()).hexdigest()[:8]
    return f"dr-{stamp}-{suffix}"


def is_drill_id(value: str) -> bool:
    return bool(_DRILL_ID.fullmatch(value))


class DrillVolume(_Strict):
    source_volume_id: VolumeId = Field(alias="sourceVolumeId")
    snapshot_id: SnapshotId = Field(alias="snapshotId")
    volume_id: VolumeId = Field(alias="volumeId")


class Drill(_Strict):
    """One restore drill of an array's backup set."""

    drill_id: DrillId = Field(alias="drillId")
    array_id: ArrayId = Field(alias="arrayId")
    backup_id: BackupId = Field(alias="backupId")
    trigger: Literal["api", "schedule"] = "api"
    state: DrillState = "running"
    stage: DrillStage = "restoring"
    started_at: AwareDatetime = Field(alias="startedAt")
    ended_at: AwareDatetime | None = Field(default=None, alias="endedAt")
    set_created_at: AwareDatetime = Field(
        alias="setCreatedAt", description="when the set's snapshots were taken"
    )
    checks_passed_at: AwareDatetime | None = Field(default=None, alias="checksPassedAt")
    max_rpo_hours: int | None = Field(default=None, alias="maxRpoHours", description="the policy's bound")
    volumes: tuple[DrillVolume, ...] = ()
    instance_id: InstanceId | None = Field(default=None, alias="instanceId")
    command_id: str | None = Field(default=None, alias="commandId")
    checks: dict[str, Any] | None = Field(default=None, description="drill-check's report")
    message: str | None = Field(
        default=None, description="why it failed and what to do, or what it waits for"
    )
    cleaned_up: bool | None = Field(
        default=None, alias="cleanedUp", description="its volumes and instance gone"
    )
    leftovers: tuple[str, ...] = Field(default=(), description="what cleanup could not delete (yet)")
    by: Caller | None = None

    @property
    def rpo_seconds(self) -> float:
        return (self.started_at - self.set_created_at).total_seconds()

    @property
    def rto_seconds(self) -> float | None:
        if self.state != "passed" or self.checks_passed_at is None:
            return None
        return (self.checks_passed_at - self.started_at).total_seconds()

    def summary(self) -> dict[str, Any]:
        """What the API lists: the record without its volumes, checks and caller."""
        reply = self.reply()
        for key in ("volumes", "checks", "by", "commandId"):
            reply.pop(key, None)
        return reply

    def reply(self) -> dict[str, Any]:
        """The record as the API shows it, with its RPO and RTO."""
        reply = self.model_dump(by_alias=True, mode="json")
        reply["rpoSeconds"] = round(self.rpo_seconds, 3)
        rto = self.rto_seconds
        reply["rtoSeconds"] = None if rto is None else round(rto, 3)
        return reply


def choose_set(sets: Sequence[BackupSet], wanted: str | None) -> BackupSet:
    """The set a drill restores: ``wanted`` (completed), else the newest completed one."""
    if wanted is not None:
        found = next((s for s in sets if s.backup_id == wanted), None)
        if found is None:
            raise InvalidBackupError(f"no backup set {wanted!r}: `vsactl backup list` names the array's sets")
        if found.state != "completed":
            raise ConflictError(f"backup set {wanted} is {found.state}: only a completed set can be drilled")
        return found
    completed = sorted((s for s in sets if s.state == "completed"), key=lambda s: s.created_at, reverse=True)
    if not completed:
        raise ConflictError("the array has no completed backup set to drill: take a backup first")
    return completed[0]


def point_in_time(backup: BackupSet) -> datetime:
    """When the set's data is from: the instant ``CreateSnapshots`` was called (the point in
    time lies between its call and its answer; the call bounds the data's age from above),
    else the set's creation."""
    if backup.snapshot_timing is not None:
        return datetime.fromtimestamp(backup.snapshot_timing.requested_at, UTC)
    return backup.created_at


def refuse_second(drills: Sequence[Drill]) -> None:
    """One drill of an array at a time: each costs an instance and a copy of every volume."""
    running = [d.drill_id for d in drills if d.state == "running"]
    if running:
        raise ConflictError(
            f"drill {running[0]} of this array is still running: wait for it (`vsactl backup drills`) "
            "before starting another"
        )


def drill_tags(drill: Drill, **more: str) -> dict[str, str]:
    """The tags of everything a drill creates."""
    return {
        DRILL_TAG: drill.drill_id,
        DRILL_ARRAY_TAG: drill.array_id,
        DEPLOYMENT_TAG: deployment(),
        "Name": f"{deployment()}-{drill.array_id}-{drill.drill_id}",
        **more,
    }


def is_drill_resource(tags: dict[str, str], drill_id: str) -> bool:
    """Only what this deployment created for this drill is ever deleted by its cleanup."""
    return tags.get(DRILL_TAG) == drill_id and tags.get(DEPLOYMENT_TAG) == deployment()


def last_json_line(output: str) -> dict[str, Any] | None:
    """drill-check's report: the last line of its output that is a JSON object."""
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                found = json.loads(line)
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def verdict(
    drill: Drill, status: str, report: dict[str, Any] | None, details: str = ""
) -> tuple[bool, str | None]:
    """``(passed, message)`` from the check command's Run Command status and drill-check's
    report, and the policy's RPO bound. The message says what failed and what to look at."""
    problems: list[str] = []
    if report is None:
        problems.append(
            f"drill-check gave no report (Run Command status {status}{': ' + details if details else ''}): "
            "its output is in the command's history on the drill instance"
        )
    elif report.get("status") != "passed":
        found = [str(p) for p in report.get("problems") or []][:3]
        problems.append(
            "the checks failed: " + ("; ".join(found) if found else f"status {report.get('status')!r}")
        )
    elif status != "Success":
        problems.append(f"drill-check reported passed but its command ended {status}")
    bound = drill.max_rpo_hours
    if bound is not None and drill.rpo_seconds > bound * 3600:
        problems.append(
            f"RPO {drill.rpo_seconds / 3600:.1f} h is over the bound of {bound} h: the newest completed set "
            "is too old (are the scheduled backups failing?)"
        )
    return (not problems, "; ".join(problems) or None)


def trimmed(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report as the record keeps it: its problems bounded."""
    if report is None:
        return None
    kept = dict(report)
    if isinstance(kept.get("problems"), list):
        kept["problems"] = kept["problems"][:REPORT_PROBLEMS_KEPT]
    return kept


def launch_params(spec: ArraySpec, drill: Drill, instance_profile_arn: str) -> dict[str, Any]:
    """RunInstances parameters of the drill instance: always from a launch template (the
    policy's, else the controllers', else the array's own, which the control plane keeps for
    controllers declared by instanceType and imageId), in the array's AZ, always with the
    deployment's drill instance profile (whatever the template names: the operator's command runs
    there with no more than Systems Manager's rights), tagged as the drill's, and idempotent (the
    drill id is the client token: a retried step launches nothing more)."""
    policy = (spec.backup.drill if spec.backup else None) or DrillPolicy()
    template = policy.launch_template or spec.controllers.launch_template
    if template is not None:
        ref = (
            {"LaunchTemplateId": template.launch_template_id}
            if template.launch_template_id
            else {"LaunchTemplateName": template.launch_template_name}
        )
        launch_template = {**ref, "Version": template.version}
    else:
        launch_template = {"LaunchTemplateName": launch_template_name(spec.array_id), "Version": "$Default"}
    tags = [{"Key": k, "Value": v} for k, v in drill_tags(drill).items()]
    params: dict[str, Any] = {
        "LaunchTemplate": launch_template,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": drill.drill_id,
        "IamInstanceProfile": {"Arn": instance_profile_arn},
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "Placement": {"AvailabilityZone": spec.availability_zone},
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    if policy.instance_type:
        params["InstanceType"] = policy.instance_type
    if policy.subnet_id:
        params["SubnetId"] = policy.subnet_id
    if policy.security_group_ids:
        params["SecurityGroupIds"] = list(policy.security_group_ids)
    return params


def command_parameter(command: str | None) -> str:
    """drill-check's ``Command``: the base64url of the operator's command, unpadded (SSM's
    allowedPattern then admits no quote or metacharacter of it); empty for none."""
    if not command:
        return ""
    return base64.urlsafe_b64encode(command.encode()).decode().rstrip("=")
