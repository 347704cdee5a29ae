"""The requests of the BootstrapController / DrainController steps (pure models): one per step,
told apart by ``step``; what ``task_controller`` parses its event into."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from vsa_core.arrays.spec import ArrayId, InstanceId


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class Prepare(_Step):
    step: Literal["prepare"]
    array_id: ArrayId = Field(alias="arrayId")
    instance_id: InstanceId = Field(alias="instanceId")


class VolumeDevice(_Step):
    volume_id: str = Field(alias="VolumeId", pattern=r"^vol-[0-9a-f]{8,17}$")
    device: str = Field(alias="Device", pattern=r"^/dev/[a-z0-9]+$")


class Attach(_Step):
    step: Literal["attach"]
    instance_id: InstanceId = Field(alias="instanceId")
    volumes: tuple[VolumeDevice, ...]


class HostTarget(_Step):
    instance_id: InstanceId = Field(alias="instanceId")
    host_nqn: str = Field(alias="hostNqn", min_length=1)
    keys_secret_id: str = Field(default="none", alias="keysSecretId", min_length=1)
    """The host's own key secret (``none`` without authentication)."""


class Connect(_Step):
    """One document to every host: ``parameters`` are shared, each host adds ``HostNqn``."""

    step: Literal["connect"]
    instance_id: InstanceId = Field(alias="instanceId")  # the controller the paths go to
    document: str = Field(min_length=1)
    comment: str = Field(default="", max_length=100)
    timeout_seconds: int = Field(alias="timeoutSeconds", ge=30, le=2592000)
    parameters: dict[str, list[str]]
    hosts: tuple[HostTarget, ...] = Field(min_length=1)


class SentCommand(_Step):
    instance_id: InstanceId = Field(alias="instanceId")
    command_id: str = Field(alias="commandId", min_length=1)


class Commands(_Step):
    step: Literal["commands"]
    instance_id: InstanceId = Field(alias="instanceId")
    document: str = Field(min_length=1)
    since: datetime  # the connect step's clock just before it sent them (less a margin)
    commands: tuple[SentCommand, ...] = Field(min_length=1)


class Attachment(_Step):
    step: Literal["attachment"]
    array_id: ArrayId = Field(alias="arrayId")
    instance_id: InstanceId = Field(alias="instanceId")


class Node(_Step):
    step: Literal["node"]
    instance_id: InstanceId = Field(alias="instanceId")


class Detach(_Step):
    step: Literal["detach"]
    array_id: ArrayId = Field(alias="arrayId")
    instance_id: InstanceId = Field(alias="instanceId")


class Locate(_Step):
    step: Literal["locate"]
    instance_id: InstanceId = Field(alias="instanceId")
    array_id: ArrayId | None = Field(default=None, alias="arrayId")


class Request(
    RootModel[
        Annotated[
            Prepare | Attach | Attachment | Node | Connect | Commands | Detach | Locate,
            Field(discriminator="step"),
        ]
    ]
):
    pass
