"""The requests of the ReconcileArray steps (pure models): one per step, told apart by
``step``; what ``task_reconcile`` parses its event into."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from vsa_core.arrays.spec import ArrayId
from vsa_core.reconcile.plan import Phase

ExecutionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,80}$")]


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    array_id: ArrayId = Field(alias="arrayId")
    owner: ExecutionName
    """The execution: the array lock's holder."""


class DocumentNames(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    configure_target: str = Field(alias="configureTarget", min_length=1)
    connect_path: str = Field(alias="connectPath", min_length=1)
    disconnect_path: str = Field(alias="disconnectPath", min_length=1)


class Node(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    configfs_root: str = Field(alias="configfsRoot", min_length=1)
    device_dir: str = Field(alias="deviceDir", min_length=1)
    modprobe_command: str = Field(alias="modprobeCommand", min_length=1)
    nvme_command: str = Field(alias="nvmeCommand", min_length=1)
    nvme_config: str = Field(alias="nvmeConfig", min_length=1)
    sysfs_root: str = Field(alias="sysfsRoot", min_length=1)
    aws_command: str = Field(default="aws", alias="awsCommand", min_length=1)
    boot_id_file: str = Field(default="/proc/sys/kernel/random/boot_id", alias="bootIdFile", min_length=1)


class Lock(_Step):
    step: Literal["lock"]


class Create(_Step):
    """Create the owned volumes the stored spec declares that do not exist yet (before the lock:
    creating a volume touches no controller and no host), then put the IOPS alarms over every
    volume."""

    step: Literal["create"]


class Start(_Step):
    step: Literal["start"]
    phase: Phase
    documents: DocumentNames
    node: Node


class Poll(_Step):
    step: Literal["poll"]
    phase: Phase
    started: dict[str, Any]
    """What the phase's ``start`` answered (the commands it sent)."""


class Verify(_Step):
    step: Literal["verify"]
    documents: DocumentNames | None = None
    """The node documents, whose last reports say what size each node sees (without them the
    verify judges AWS only)."""


class HandOver(_Step):
    """DrainController's handover of a leaving controller's volumes (``fencing: reservations``),
    before any host lets go of its paths: the survivors take its share, a live one releasing it
    first, a lost one (``fence``) fenced by every taker first. ``owner`` is the drain's execution
    (no lock: a drain runs beside ReconcileArray, which waits for it)."""

    step: Literal["handover"]
    instance_id: str = Field(alias="instanceId", pattern=r"^i-[0-9a-f]{8,17}$")
    slot: int = Field(ge=0, le=15)
    address: str
    fence: bool
    wave: int = Field(default=1, ge=1, le=2)
    documents: DocumentNames
    node: Node


class HandOverPoll(_Step):
    step: Literal["handoverPoll"]
    started: dict[str, Any]
    """What ``handover`` answered (the commands it sent, the owners and the wave)."""


class StartHandover(_Step):
    """BootstrapController's last step on an array with fencing (``owner``: its execution): the
    controller now serving owns no volume yet; ReconcileArray's export phase hands it its share,
    the givers releasing first."""

    step: Literal["startHandover"]
    instance_id: str = Field(alias="instanceId", pattern=r"^i-[0-9a-f]{8,17}$")


AnyStep = Lock | Create | Start | Poll | Verify | HandOver | HandOverPoll | StartHandover


class Request(RootModel[Annotated[AnyStep, Field(discriminator="step")]]):
    pass
