"""The array spec, as much of it as the control plane acts on so far (issue #4 grows it)."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vsa_core.naming import ARRAY_ID_PATTERN

MULTI_ATTACH_LIMIT = 16
"""io2 Multi-Attach attaches one volume to at most 16 instances: the controller ceiling."""

R5B_CONTROLLER_IOPS = 260_000
"""Per-instance EBS IOPS ceiling of the r5b class (seed 004): one controller's worth."""

ArrayId = Annotated[
    str, Field(pattern=ARRAY_ID_PATTERN, description="lower-case letters, digits and '-', 3-32 chars")
]


class ArraySpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    spec_version: Literal[1] = Field(default=1, alias="specVersion")
    array_id: ArrayId = Field(alias="arrayId")
    availability_zone: str = Field(alias="availabilityZone", min_length=1)
    min_controllers: int = Field(alias="minControllers", ge=1, le=MULTI_ATTACH_LIMIT)
    max_controllers: int = Field(alias="maxControllers", ge=1, le=MULTI_ATTACH_LIMIT)
    per_controller_iops: int = Field(default=R5B_CONTROLLER_IOPS, alias="perControllerIops", gt=0)
    target_utilisation: float = Field(default=0.7, alias="targetUtilisation", gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _min_not_above_max(self) -> "ArraySpec":
        if self.min_controllers > self.max_controllers:
            raise ValueError(
                f"minControllers ({self.min_controllers}) is above maxControllers "
                f"({self.max_controllers}): lower minControllers or raise maxControllers"
            )
        return self


class RegisteredArray(BaseModel):
    """An array as the registry holds it: the declared spec plus the controller count last set."""

    model_config = ConfigDict(frozen=True)

    spec: ArraySpec
    desired_controllers: int = Field(ge=0, le=MULTI_ATTACH_LIMIT)
    version: int = Field(ge=1)
