"""What the controller steps are given: the registry, the arrays' AWS side, EC2 and SSM clients."""

from dataclasses import dataclass
from typing import Any

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService

ATTACHED_STATES = ("attaching", "attached")


@dataclass(frozen=True)
class ControllerContext:
    registry: ArrayRegistry
    arrays: ArrayService
    ec2: Any
    ssm: Any
