"""The array spec: what an operator declares once (``vsactl apply -f array.yaml``).

Everything here is plain, validated data; the messages of every validation error say what to
fix. Field names are camelCase on the wire (YAML, JSON, the API) and snake_case in Python.
"""

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vsa_core.arrays import limits

# re-exported: the id types are the spec's too (vsa_core.arrays.ids says why they live apart)
from vsa_core.arrays.ids import ArrayId as ArrayId
from vsa_core.arrays.ids import InstanceId as InstanceId
from vsa_core.arrays.ids import Nqn as Nqn
from vsa_core.arrays.ids import VolumeId as VolumeId
from vsa_core.instances import default_controller_iops

MULTI_ATTACH_LIMIT = 16
"""io2 Multi-Attach attaches one volume to at most 16 instances: the controller ceiling."""

R5B_CONTROLLER_IOPS = 260_000
"""Per-instance EBS IOPS ceiling of the largest r5b sizes (r5b.24xlarge, r5b.metal; seed 004). No
longer a default: ``perControllerIops`` defaults from the instance type
(``vsa_core.instances``)."""

ARRAY_TAG = "vsa:array"
"""Everything the control plane creates carries ``vsa:array=<id>``."""

DEPLOYMENT_TAG = "vsa:deployment"
"""…and ``vsa:deployment=<deployment>`` (``vsa_core.naming.deployment``): the policies let a
deployment act only on what carries its own, so two deployments in one account never touch each
other's resources, even for arrays of the same id."""

OWNED_TAG = "vsa:owned"
"""Volumes the control plane created (and may delete, on request) carry ``vsa:owned=true``."""

MAX_VOLUMES = 26
"""Every controller attaches every volume. r5b and most Nitro instances have a shared limit of 28
attachments for EBS volumes, network interfaces and NVMe instance store (Amazon EBS volume limits
for Amazon EC2 instances, EBS user guide): 28 less the root volume and the primary interface."""
MAX_HOSTS = 256
"""Ours, not AWS's: every bootstrap connects each host (one SendCommand per host from one
step); 256 keeps that step and the spec's registry item (DynamoDB: 400 KB) well inside bounds."""
MAX_SECURITY_GROUPS = 16
"""Security groups per network interface: 5 by default, adjustable to at most 16 (Amazon VPC
quotas, VPC user guide)."""
IO2_MAX_IOPS = limits.IO2_MAX_IOPS
"""io2 Block Express: at most 256,000 IOPS per volume (Amazon EBS volume types)."""
MAX_CONTROLLER_IOPS = MAX_VOLUMES * IO2_MAX_IOPS
"""No controller serves more IOPS than its volumes can give."""
NVME_TCP_PORT = 4420
"""The port configure-target's nvmet listens on (its Port parameter's default) and hosts connect to."""

STORED: Mapping[str, bool] = MappingProxyType({"stored": True})
"""The validation context of a spec read back from the registry (``ArraySpec.model_validate(
item, context=STORED)``): the checks against AWS's rules (``vsa_core.arrays.limits``) are not
applied to it. They were applied when the API stored it, as they then stood; a rule made
stricter later must not make an array the registry holds unreadable (GET, DELETE, the health
check), and the next PUT of its spec meets today's rules."""


def _stored(info: ValidationInfo) -> bool:
    return isinstance(info.context, Mapping) and info.context.get("stored") is True


SECURITY_GROUP_ID = r"^sg-[0-9a-f]{8,17}$"
INSTANCE_PROFILE_NAME = r"^[A-Za-z0-9+=,.@_-]{1,128}$"
"""An IAM instance profile name (IAM API reference, InstanceProfileName: [\\w+=,.@-]+, 1-128)."""
LAUNCH_TEMPLATE_NAME = r"^[A-Za-z0-9._/-]{3,128}$"
"""A launch template name (EC2 API reference: [a-zA-Z0-9\\(\\)\\.\\-/_]+, 3-128), less the
parentheses: no string this API stores carries a shell metacharacter."""
CLOUDWATCH_NAME = r"^[A-Za-z0-9._/#@+=-][A-Za-z0-9._/#:@+=-]{0,254}$"
"""A metric name or a dimension's name or value (CloudWatch: 1-255 ASCII characters, not starting
with ':'), narrowed to characters no shell reads specially."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ExistingVolume(_Strict):
    """An io2 Multi-Attach volume that already exists; the control plane never deletes it."""

    volume_id: VolumeId = Field(alias="volumeId")


class NewVolume(_Strict):
    """A volume the control plane creates (io2, Multi-Attach), tags as owned, and deletes only
    when the array is deleted with ``deleteVolumes``. io2 throughput follows from its IOPS (EBS
    takes no throughput setting for io2), so there is none to declare."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,30}$", description="unique within the array")
    size_gib: StrictInt = Field(
        alias="sizeGiB", ge=limits.IO2_MIN_GIB, le=limits.IO2_MAX_GIB, description="the volume's size in GiB"
    )
    iops: StrictInt = Field(
        ge=limits.IO2_MIN_IOPS,
        le=limits.IO2_MAX_IOPS,
        description="the volume's provisioned IOPS: at most 1,000 per GiB (io2)",
    )

    @model_validator(mode="after")
    def _iops_per_gib(self) -> "NewVolume":
        per_gib = limits.IO2_IOPS_PER_GIB
        if self.iops > self.size_gib * per_gib:
            raise ValueError(
                f"volume {self.name}: io2 allows at most {per_gib:,} IOPS per GiB; {self.iops} IOPS needs "
                f"sizeGiB >= {-(-self.iops // per_gib)}"
            )
        return self


Volume = ExistingVolume | NewVolume


class LaunchTemplateRef(_Strict):
    launch_template_id: str | None = Field(
        default=None,
        alias="launchTemplateId",
        pattern=r"^lt-[0-9a-f]+$",
        description="the launch template's id (give this or launchTemplateName, not both)",
    )
    launch_template_name: str | None = Field(
        default=None,
        alias="launchTemplateName",
        pattern=LAUNCH_TEMPLATE_NAME,
        description="the launch template's name (give this or launchTemplateId, not both)",
    )
    version: str = Field(
        default="$Latest",
        pattern=r"^(\$Latest|\$Default|\d+)$",
        description="the version controllers launch from: a version number, $Latest or $Default",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> "LaunchTemplateRef":
        if (self.launch_template_id is None) == (self.launch_template_name is None):
            raise ValueError("launchTemplate: give exactly one of launchTemplateId or launchTemplateName")
        return self


class ControllerSettings(_Strict):
    """How controllers launch: an existing launch template, or the parts of one (the control
    plane then creates and owns the launch template ``vsa-<id>-controller``)."""

    launch_template: LaunchTemplateRef | None = Field(
        default=None,
        alias="launchTemplate",
        description="an existing launch template the controllers launch from, instead of instanceType "
        "and imageId (perControllerIops is then required)",
    )
    instance_type: str | None = Field(
        default=None,
        alias="instanceType",
        pattern=r"^[a-z0-9-]+\.[a-z0-9]+$",
        description="the controllers' EC2 instance type, with imageId (instead of launchTemplate); "
        "perControllerIops defaults from it",
    )
    image_id: str | None = Field(
        default=None,
        alias="imageId",
        pattern=r"^ami-[0-9a-f]{8,17}$",
        description="the controllers' AMI: Linux with the SSM agent, with instanceType (instead of "
        "launchTemplate)",
    )
    subnet_id: str | None = Field(
        default=None,
        alias="subnetId",
        pattern=r"^subnet-[0-9a-f]{8,17}$",
        description="the subnet controllers launch in, in availabilityZone (default: the Availability "
        "Zone's default subnet)",
    )
    security_group_ids: tuple[Annotated[str, Field(pattern=SECURITY_GROUP_ID)], ...] = Field(
        default=(),
        alias="securityGroupIds",
        max_length=MAX_SECURITY_GROUPS,
        description="the controllers' security groups: port 4420 (NVMe/TCP) open only to the array's hosts",
    )
    instance_profile: str | None = Field(
        default=None,
        alias="instanceProfile",
        pattern=INSTANCE_PROFILE_NAME,
        description="IAM instance profile name (SSM agent needs one)",
    )

    @field_validator("security_group_ids")
    @classmethod
    def _once_each(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({g for g in value if value.count(g) > 1})
        if twice:
            raise ValueError(f"securityGroupIds listed more than once: {', '.join(twice)}")
        return value

    @model_validator(mode="after")
    def _template_or_parts(self) -> "ControllerSettings":
        parts = {
            "instanceType": self.instance_type,
            "imageId": self.image_id,
        }
        if self.launch_template is not None:
            given = [k for k, v in parts.items() if v is not None]
            if given:
                raise ValueError(
                    "controllers: give either launchTemplate or instanceType + imageId, not both "
                    f"({', '.join(given)})"
                )
            return self
        missing = [k for k, v in parts.items() if v is None]
        if missing:
            raise ValueError(
                "controllers: give a launchTemplate, or instanceType and imageId (missing: "
                + ", ".join(missing)
                + ")"
            )
        return self


MOUNTPOINT_PATTERN = re.compile(r"/[A-Za-z0-9._+@:=-][A-Za-z0-9._/+@:=-]{0,254}")
"""One mountpoint, as documents/freeze-io.yaml's Mountpoints allowedPattern takes each item
(tests/infra/test_documents.py holds the two to each other)."""
MAX_MOUNTPOINTS = 64
"""The most mountpoints freeze-io takes in one call (its pattern: one, then up to 63 more)."""


class Host(_Strict):
    """A client host: it connects a path to every controller and, for application-consistent
    backups, has its listed mountpoints frozen."""

    instance_id: InstanceId = Field(alias="instanceId")
    host_nqn: Nqn | None = Field(
        default=None,
        alias="hostNqn",
        description="the NQN the host connects with; default: one derived from the instance id "
        "(connect-path passes it explicitly, so the controllers' allowed-host list always matches)",
    )
    mountpoints: tuple[str, ...] = Field(
        default=(),
        max_length=MAX_MOUNTPOINTS,
        description="absolute paths of the host's mountpoints to freeze: letters, digits and "
        "._+@:=-/, at most 255 characters each, at most 64 (freeze-io's own Mountpoints pattern)",
    )

    @field_validator("mountpoints")
    @classmethod
    def _as_freeze_io_takes_them(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # Accepted here exactly as freeze-io's Mountpoints parameter accepts each of them, so a
        # spec the API stores never fails at backup time: no shell metacharacters, newlines or
        # commas (the document joins the list with commas).
        bad = [m for m in value if m == "/" or not MOUNTPOINT_PATTERN.fullmatch(m)]
        if bad:
            raise ValueError(
                "mountpoints must be absolute paths other than '/', of letters, digits and ._+@:=-/ "
                f"(at most 255 characters each): not {', '.join(repr(m) for m in bad)}"
            )
        twice = sorted({m for m in value if value.count(m) > 1})
        if twice:
            raise ValueError(f"mountpoints listed more than once: {', '.join(twice)}")
        return value


class BackupLock(_Strict):
    """EBS snapshot lock on every snapshot of each completed set (EBS User Guide, "Amazon EBS
    snapshot lock concepts"): nobody deletes the set before the lock expires, retention included."""

    mode: Literal["governance", "compliance"] = Field(
        description="governance: a principal allowed ec2:UnlockSnapshot can unlock it; compliance: "
        "nobody can, once its cooling-off period is over (not even the account's root user)",
    )
    days: StrictInt = Field(ge=1, le=36_500, description="how long each set stays locked, in days")
    cool_off_hours: StrictInt | None = Field(
        default=None,
        alias="coolOffHours",
        ge=1,
        le=72,
        description="compliance only: the hours after locking during which it can still be unlocked",
    )

    @model_validator(mode="after")
    def _cool_off_for_compliance(self) -> "BackupLock":
        if self.cool_off_hours is not None and self.mode != "compliance":
            raise ValueError("coolOffHours applies to mode compliance only: remove it, or use compliance")
        return self


DRILL_COMMAND_MAX_BYTES = 4000
"""An operator's drill command, in UTF-8 bytes: its base64url (drill-check's Command parameter
takes at most 8,000 characters) stays well inside the document's bound."""


def _recurring(value: str, what: str, one_off: str) -> str:
    """``value`` as EventBridge Scheduler's CreateSchedule takes it (``limits.schedule_problem``),
    and recurring: ``at(…)`` fires once and then does nothing more."""
    problem = limits.schedule_problem(value)
    if problem is None and limits.schedule_kind(value) == "at":
        problem = f"at(…) fires once, and {what} recurs: use rate(…) or cron(…), or {one_off}"
    if problem is not None:
        raise ValueError(f"schedule {value!r}: {problem}; e.g. {limits.SCHEDULE_EXAMPLES}")
    return value


class DrillPolicy(_Strict):
    """Restore drills: a backup set restored to new volumes, attached to a short-lived instance
    in the array's AZ, checked (each filesystem mounted read-only and checked read-only, then the
    operator's command), the outcome recorded with its RPO and RTO, everything cleaned up."""

    schedule: str | None = Field(
        default=None,
        description="an EventBridge Scheduler expression, in UTC, like the backup schedule's (rate(7 days), "
        "cron(0 5 ? * SUN *)); default: drills on demand only (POST /arrays/{arrayId}/drills)",
        max_length=limits.SCHEDULE_EXPRESSION_MAX,
    )
    launch_template: LaunchTemplateRef | None = Field(
        default=None,
        alias="launchTemplate",
        description="the launch template the drill instance launches from (default: the controllers' "
        "launch template, or the one the control plane keeps for their instanceType and imageId); it "
        "always gets the deployment's drill instance profile, whatever the template names",
    )
    instance_type: str | None = Field(
        default=None,
        alias="instanceType",
        pattern=r"^[a-z0-9-]+\.[a-z0-9]+$",
        description="the drill instance's type (default: the template's, or the controllers')",
    )
    subnet_id: str | None = Field(
        default=None,
        alias="subnetId",
        pattern=r"^subnet-[0-9a-f]{8,17}$",
        description="a subnet in availabilityZone (default: the launch template's, else the Availability "
        "Zone's default subnet)",
    )
    security_group_ids: tuple[Annotated[str, Field(pattern=SECURITY_GROUP_ID)], ...] = Field(
        default=(),
        alias="securityGroupIds",
        max_length=MAX_SECURITY_GROUPS,
        description="the drill instance's security groups (default: the template's); it needs only "
        "outbound HTTPS to Systems Manager",
    )
    command: str | None = Field(
        default=None,
        min_length=1,
        description="an operator's shell command (bash) run on the drill instance once every filesystem "
        "is mounted read-only, their mountpoints in $VSA_DRILL_MOUNTS (e.g. an application's own "
        f"verify); it must exit 0 within commandTimeoutSeconds. At most {DRILL_COMMAND_MAX_BYTES} bytes",
    )
    command_timeout_seconds: StrictInt = Field(
        default=300, alias="commandTimeoutSeconds", ge=1, le=3600, description="the command's time limit"
    )
    max_rpo_hours: StrictInt | None = Field(
        default=None,
        alias="maxRpoHours",
        ge=1,
        le=8760,
        description="a drill fails when the set it restores is older than this many hours (its RPO), and "
        "the drill RPO alarm fires (default: no bound)",
    )

    @field_validator("schedule")
    @classmethod
    def _expression(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or _stored(info):
            return value
        return _recurring(value, "a drill schedule", "POST /arrays/{arrayId}/drills for a one-off drill")

    @field_validator("command")
    @classmethod
    def _command_size(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > DRILL_COMMAND_MAX_BYTES:
            raise ValueError(
                f"drill command: {len(value.encode())} bytes, at most {DRILL_COMMAND_MAX_BYTES}: put a "
                "longer check in a script on the drill instance's image and call it"
            )
        return value


REGION_PATTERN = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}$"
"""An AWS Region code (us-east-1, eu-central-2, us-gov-west-1)."""
COPY_ROLE_PATH = "/vsa-backup-copy/"
"""A role another account gives the backup copies must be under this path: the copy steps may
assume only such roles (and only where that account's trust policy lets them)."""
MAX_COPY_DESTINATIONS = 3


class BackupCopy(_Strict):
    """Every completed set copied, as one set with its labels, to another Region (and optionally
    another account): the disaster-recovery copy (EBS User Guide, "Copy an Amazon EBS snapshot")."""

    region: str = Field(
        pattern=REGION_PATTERN, description="the destination Region (not the deployment's own)"
    )
    retention: StrictInt | None = Field(
        default=None, ge=1, le=1000, description="copied sets kept there (default: the policy's retention)"
    )
    kms_key_id: str | None = Field(
        default=None,
        alias="kmsKeyId",
        pattern=r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key/[a-zA-Z0-9-]{1,64}|alias/[a-zA-Z0-9/_-]{1,250})$",
        description="a KMS key ARN in the destination Region the copies are encrypted with (default: "
        "the destination's default EBS encryption, else as the source)",
    )
    account_id: str | None = Field(
        default=None,
        alias="accountId",
        pattern=r"^[0-9]{12}$",
        description="copy into another account (with roleArn): each snapshot is shared with it for "
        "the copy, then unshared",
    )
    role_arn: str | None = Field(
        default=None,
        alias="roleArn",
        pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/vsa-backup-copy/[A-Za-z0-9+=,.@_-]{1,64}$",
        description=f"the role in accountId the copy steps assume there (path {COPY_ROLE_PATH}; its trust "
        "policy names the deployment's copy role)",
    )

    @model_validator(mode="after")
    def _account_and_role(self) -> "BackupCopy":
        if (self.account_id is None) != (self.role_arn is None):
            raise ValueError(
                "copies: give accountId and roleArn together (the role in that account copies there)"
            )
        if self.role_arn is not None and f":{self.account_id}:" not in self.role_arn:
            raise ValueError(f"copies: roleArn {self.role_arn} is not in accountId {self.account_id}")
        if self.kms_key_id is not None and f":kms:{self.region}:" not in self.kms_key_id:
            raise ValueError(
                f"copies: kmsKeyId {self.kms_key_id} is not a key of the destination {self.region}"
            )
        return self


class BackupPolicy(_Strict):
    schedule: str = Field(
        description="an EventBridge Scheduler expression, in UTC: rate(value unit) (rate(1 day), "
        "rate(12 hours)) or cron(minutes hours day-of-month month day-of-week year) with exactly one "
        "of the two day fields ? (cron(0 3 * * ? *): 03:00 every day)",
        max_length=limits.SCHEDULE_EXPRESSION_MAX,
    )
    mode: Literal["crash", "application"] = Field(
        default="crash",
        description="crash: every volume snapshotted at one point in time; application: the hosts' "
        "mountpoints frozen around the snapshots (every host must list mountpoints)",
    )
    retention: StrictInt = Field(default=7, ge=1, le=1000, description="backup sets to keep")
    freeze_timeout_seconds: StrictInt = Field(
        default=10,
        alias="freezeTimeoutSeconds",
        ge=1,
        le=60,
        description="application mode: a host thaws by itself after this many seconds, whatever happens",
    )
    lock: BackupLock | None = Field(
        default=None,
        description="lock each completed set's snapshots (EBS snapshot lock); retention never deletes "
        "a set before its lock expires (default: no lock)",
    )
    drill: DrillPolicy | None = Field(
        default=None,
        description="restore drills: prove the sets restore, with their RPO and RTO (default: none)",
    )
    copies: tuple[BackupCopy, ...] = Field(
        default=(),
        max_length=MAX_COPY_DESTINATIONS,
        description="copy every completed set to these Regions (and accounts): disaster recovery "
        f"(at most {MAX_COPY_DESTINATIONS})",
    )

    @field_validator("copies")
    @classmethod
    def _once_each(cls, value: tuple[BackupCopy, ...]) -> tuple[BackupCopy, ...]:
        places = [(c.region, c.account_id) for c in value]
        twice = sorted({f"{r}{'/' + a if a else ''}" for r, a in places if places.count((r, a)) > 1})
        if twice:
            raise ValueError(f"copies: {', '.join(twice)} listed more than once")
        return value

    @field_validator("schedule")
    @classmethod
    def _expression(cls, value: str, info: ValidationInfo) -> str:
        """What EventBridge Scheduler's CreateSchedule takes, and recurring (``_recurring``): a
        policy's next backups would silently never come after an ``at(…)``; POST
        /arrays/{id}/backups takes a one-off backup."""
        if _stored(info):
            return value
        return _recurring(value, "a backup policy", "POST /arrays/{arrayId}/backups for a one-off backup")


class DemandMetric(_Strict):
    """A custom demand signal the hosts publish (e.g. their own IOPS counters): the array's
    demand is the metric's ``statistic`` over one minute, read as IOPS. With each host putting
    its IOPS once a minute under the same dimensions, ``Sum`` is the array's IOPS."""

    namespace: str = Field(
        pattern=r"^[A-Za-z0-9._/#:-]{1,255}$",
        description="not AWS/…: those belong to AWS services; not starting with ':'",
    )
    metric_name: str = Field(alias="metricName", pattern=CLOUDWATCH_NAME, description="the metric's name")
    dimensions: dict[
        Annotated[str, Field(pattern=CLOUDWATCH_NAME)], Annotated[str, Field(pattern=CLOUDWATCH_NAME)]
    ] = Field(default_factory=dict, max_length=30, description="at most 30 (CloudWatch's limit)")
    statistic: Literal["Sum", "Average", "Maximum"] = Field(
        default="Sum", description="how one minute's data points make the array's demand"
    )

    @field_validator("namespace")
    @classmethod
    def _not_aws(cls, value: str, info: ValidationInfo) -> str:
        if value.startswith(":") and not _stored(info):
            # CloudWatch API reference, Metric: Namespace pattern [^:].*
            raise ValueError(
                f"demandMetric namespace {value!r}: CloudWatch takes no namespace starting with ':'"
            )
        if value.startswith("AWS/"):
            raise ValueError(
                f"demandMetric namespace {value!r}: AWS/ namespaces are AWS's own; leave demandMetric "
                "out to use the volumes' AWS/EBS metrics"
            )
        return value


_UNKNOWN_IOPS = 0
"""``perControllerIops`` left out and no default for it: ``ArraySpec`` refuses the spec (the
field's own bounds are not applied to a default, so the sentinel reaches the model's check)."""


def _default_controller_iops(controllers: object) -> int:
    """The default of ``perControllerIops``: the controllers' instance type's sustained EBS IOPS,
    or ``_UNKNOWN_IOPS`` (a launch template's type is not in the spec; a type not in the table)."""
    if isinstance(controllers, ControllerSettings) and controllers.instance_type is not None:
        return default_controller_iops(controllers.instance_type) or _UNKNOWN_IOPS
    return _UNKNOWN_IOPS


def _no_default_iops(controllers: ControllerSettings) -> str:
    if controllers.instance_type is None:
        return (
            "perControllerIops is required with controllers.launchTemplate (the instance type is in "
            "the launch template, not the spec): set it to the type's sustained EBS IOPS (baseline "
            "IOPS in AWS's Amazon EBS-optimized instances table), e.g. 260000 for r5b.24xlarge"
        )
    return (
        f"perControllerIops: no default for instance type {controllers.instance_type} (not in the "
        "control plane's table of EBS-optimized instance types): set perControllerIops to its "
        "sustained EBS IOPS (baseline IOPS in AWS's Amazon EBS-optimized instances table)"
    )


class ArraySpec(_Strict):
    spec_version: Literal[1] = Field(default=1, alias="specVersion", description="the spec format: 1")
    array_id: ArrayId = Field(alias="arrayId")
    availability_zone: str = Field(
        alias="availabilityZone",
        pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$",
        description="where the controllers and volumes live (and ideally the hosts); an array never moves",
    )
    volumes: tuple[Volume, ...] = Field(
        min_length=1, max_length=MAX_VOLUMES, description="at most 26: every controller attaches each"
    )
    controllers: ControllerSettings
    min_controllers: StrictInt = Field(
        alias="minControllers",
        ge=1,
        le=MULTI_ATTACH_LIMIT,
        description="never fewer serving controllers: each host's paths to the array",
    )
    max_controllers: StrictInt = Field(
        alias="maxControllers",
        ge=1,
        le=MULTI_ATTACH_LIMIT,
        description="never more controllers (io2 Multi-Attach attaches a volume to at most 16); at "
        "least minControllers",
    )
    per_controller_iops: StrictInt = Field(
        default_factory=lambda fields: _default_controller_iops(fields.get("controllers")),
        alias="perControllerIops",
        gt=0,
        le=MAX_CONTROLLER_IOPS,
        description="one controller's IOPS; default: the instance type's sustained (baseline) EBS "
        "IOPS from the Amazon EBS-optimized instances table (required with a launchTemplate, or "
        "for a type the table does not list)",
    )
    target_utilisation: StrictFloat = Field(
        default=0.7,
        alias="targetUtilisation",
        gt=0.0,
        le=1.0,
        description="the share of perControllerIops each controller is planned to carry: controllers = "
        "demand / (perControllerIops x targetUtilisation), rounded up",
    )
    scale_out_cooldown_seconds: StrictInt = Field(
        default=60,
        alias="scaleOutCooldownSeconds",
        ge=0,
        le=86400,
        description="no scale-out this many seconds after the last one",
    )
    scale_in_cooldown_seconds: StrictInt = Field(
        default=180,
        alias="scaleInCooldownSeconds",
        ge=0,
        le=86400,
        description="no scale-in this many seconds after the last scale-out or scale-in",
    )
    hosts: tuple[Host, ...] = Field(default=(), max_length=MAX_HOSTS)
    allow_any_host: StrictBool = Field(
        default=False,
        alias="allowAnyHost",
        description="export to any host NQN (default: only the declared hosts' NQNs)",
    )
    authentication: Literal["none", "dh-hmac-chap"] = Field(
        default="dh-hmac-chap",
        description="NVMe in-band authentication: dh-hmac-chap (default for a new array) gives each "
        "host a key of its own and the array a controller key, both ways (a host without its key "
        "is refused; a host checks the controllers); none admits the listed host NQNs without a "
        "key. An array stored before this setting existed keeps none until its spec says otherwise",
    )
    fencing: Literal["none", "reservations"] = Field(
        default="reservations",
        description="how a lost controller is kept from writing once another serves its volumes: "
        "reservations (default for a new array) gives each volume one owner controller (ANA: "
        "optimized there, inaccessible elsewhere, so a host queues its IO while the owner is lost "
        "instead of resending it), each controller an NVMe reservation key per boot on every volume, "
        "and a survivor preempts the lost owner's key before it serves the volume (io2 Multi-Attach "
        "on Nitro); a volume's IOPS are then at most its owner's. none serves every volume through "
        "every controller (round-robin): a controller cut off with writes in flight can land them "
        "after the host has rewritten the blocks elsewhere (silent corruption). An array stored "
        "with none keeps none until its spec says reservations; reservations cannot go back",
    )
    demand_metric: DemandMetric | None = Field(
        default=None,
        alias="demandMetric",
        description="a metric the hosts publish, in IOPS, instead of the volumes' AWS/EBS metrics",
    )
    backup: BackupPolicy | None = Field(
        default=None, description="scheduled backups (default: none; POST /arrays/{arrayId}/backups any time)"
    )

    @field_validator("spec_version", mode="before")
    @classmethod
    def _exactly_one(cls, value: object) -> object:
        # a Literal is compared by equality, so True (== 1) would pass: only the integer 1 does
        if type(value) is not int:
            raise ValueError(f"specVersion must be the number 1, not {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "ArraySpec":
        if self.per_controller_iops == _UNKNOWN_IOPS:
            raise ValueError(_no_default_iops(self.controllers))
        if self.min_controllers > self.max_controllers:
            raise ValueError(
                f"minControllers ({self.min_controllers}) is above maxControllers "
                f"({self.max_controllers}): lower minControllers or raise maxControllers"
            )
        seen: set[str] = set()
        for volume in self.volumes:
            key = volume.volume_id if isinstance(volume, ExistingVolume) else volume.name
            if key in seen:
                raise ValueError(f"volume {key} is listed twice")
            seen.add(key)
        hosts = [h.instance_id for h in self.hosts]
        if len(hosts) != len(set(hosts)):
            raise ValueError("a host is listed twice")
        nqns = [h.host_nqn for h in self.hosts if h.host_nqn]
        twice = sorted({n for n in nqns if nqns.count(n) > 1})
        if twice:
            raise ValueError(
                f"hostNqn {', '.join(twice)} is given to more than one host: each host connects with "
                "its own NQN (and, with dh-hmac-chap, its own key)"
            )
        if self.authentication == "dh-hmac-chap" and self.allow_any_host:
            raise ValueError(
                "allowAnyHost admits any host NQN, and dh-hmac-chap authenticates each declared host "
                "with its own key: list the hosts and set allowAnyHost false, or set authentication: "
                "none to admit any host without a key"
            )
        if self.backup and self.backup.mode == "application":
            bare = [h.instance_id for h in self.hosts if not h.mountpoints]
            if not self.hosts or bare:
                raise ValueError(
                    "backup mode application freezes the hosts' mountpoints: list mountpoints for every "
                    f"host ({', '.join(bare) or 'no hosts declared'})"
                )
        return self

    @property
    def existing_volume_ids(self) -> tuple[str, ...]:
        return tuple(v.volume_id for v in self.volumes if isinstance(v, ExistingVolume))

    @property
    def new_volumes(self) -> tuple[NewVolume, ...]:
        return tuple(v for v in self.volumes if isinstance(v, NewVolume))


UNSAID_KEPT = ("authentication", "fencing")
"""The settings whose default is for new arrays only: an array running with ``none`` keeps it
until a spec names the setting (``dh-hmac-chap``, ``reservations``)."""


def keep_unsaid(current: ArraySpec | None, spec: ArraySpec) -> ArraySpec:
    """``spec`` with the settings of ``UNSAID_KEPT`` it does not mention kept as ``current`` has
    them. Only ``none`` can be kept over a default, and none fits every spec the default fits."""
    if current is None:
        return spec
    kept = {
        name: getattr(current, name)
        for name in UNSAID_KEPT
        if name not in spec.model_fields_set and getattr(current, name) != getattr(spec, name)
    }
    if not kept:
        return spec
    return ArraySpec.model_validate({**spec.model_dump(by_alias=True, exclude_unset=True), **kept})


class Deletion(BaseModel):
    """Set on the registry item when DELETE starts the DeleteArray workflow."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    execution_name: str = Field(alias="executionName")
    delete_volumes: bool = Field(alias="deleteVolumes")
    requested_at: str = Field(alias="requestedAt")


class RegisteredArray(BaseModel):
    """An array as the registry holds it: the declared spec plus the controller count last set."""

    model_config = ConfigDict(frozen=True)

    spec: ArraySpec
    desired_controllers: int = Field(ge=0, le=MULTI_ATTACH_LIMIT)
    version: int = Field(ge=1)
    deleting: Deletion | None = None
    delete_failure: str | None = None
    """Why the DeleteArray workflow failed (JSON {Error, Cause}); DELETE again to retry."""
    last_scale_out_at: str | None = None
    """When ScaleArray last added controllers (ISO 8601): the scale-out cooldown runs from it."""
    last_scale_in_at: str | None = None
    """When ScaleArray last removed a controller (ISO 8601): the scale-in cooldown runs from it."""
    pending_host_removals: tuple[str, ...] = ()
    """Hosts an apply dropped from the spec that ReconcileArray has not disconnected yet."""
    pending_volume_deletions: tuple[str, ...] = ()
    """Owned volumes an apply asked to delete (``deleteRemovedVolumes``) that ReconcileArray
    has not deleted yet: it deletes each once it is detached from every controller."""
    reconcile: dict[str, str] | None = None
    """The last ReconcileArray run as recorded: execution, state (converging, converged,
    failed, stopped: by a DELETE), step, version, startedAt, updatedAt, error."""
    forecast_floor: dict[str, Any] | None = None
    """The forecast floor the health check last stored (``vsa_core.scaling.forecast.stored``:
    controllers, iops, period, reason, horizon_minutes, computedAt); None before its first run."""
    scaling_lock_until: int | None = None
    """Epoch seconds until which a ScaleArray run holds the array's scaling lock (None: free)."""
    roll_surge: int = Field(default=0, ge=0, le=1)
    """1 while ReconcileArray's roll has one controller more up than the array's count (the new
    one serving before the outdated one drains): an apply keeps the group one above it."""
    rekey_stages: dict[str, dict[str, str]] = Field(default_factory=dict)
    """A key rotation's progress (``keysRotation``): controller instance id → {stage, address}
    (``vsa_core.arrays.keys.Stage``); empty without a rotation. Kept here, not in the keys'
    secret: a rotation moves it 6 times a controller, and Secrets Manager asks for no more than
    one new version of a secret every 10 minutes."""
    owners: dict[str, int] = Field(default_factory=dict)
    """With ``fencing: reservations``: each volume's owner slot as every serving controller was
    last told (``owners``; ``vsa_core.controllers.ownership``); empty before the first handover."""
    owners_handover: dict[str, Any] | None = None
    """A handover under way (``ownersHandover``): ``after`` (the owners it moves to) and ``wave``
    (1: the live givers release; 2: the takers serve). Kept so that a run that stopped part way
    resumes the same order, never serving a volume through a taker before its giver released it."""
    applying: int | None = None
    """The version an apply stored and has not finished making so (its AWS changes, its
    ReconcileArray run): set with the spec in one write, removed when that apply ends. Still
    there later, that apply stopped part way (API Gateway's 29 s past and the
    Lambda ended at its timeout, a crash): the next apply of the same spec finishes it."""

    restored_from: str | None = None
    """The backup set a restore registered this array from (``restoredFrom``), until its first
    apply ends: it carries ``applying`` (so that applying the registered spec as it is makes
    everything, whatever the diff), and nothing of it is made yet. That is waiting for the
    operator's apply, not an apply that stopped part way."""

    def awaiting_first_apply(self) -> bool:
        """Registered by a restore and not applied yet (``restored_from``)."""
        return self.restored_from is not None and self.unfinished_apply() is not None

    def unfinished_apply(self) -> int | None:
        """The version whose apply has not finished (under way, or stopped part way), if any;
        None while the array is being deleted (nothing to finish). Any mark left counts, not only
        one equal to ``version``: ScaleArray bumps the version when it sets the desired count
        (``ADD version :one``), which must not hide an apply that stopped before it."""
        if self.applying is None or self.deleting is not None:
            return None
        return self.applying
