"""What every AWS step of a backup is given: the registries, the arrays' AWS side, the
ConsistentBackup state machine, the EC2 / SSM / Step Functions clients and a clock (injected;
tests pass their own)."""

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.backups.aws_signals import Signals
from vsa_core.backups.signals import FREEZE_LEAD_SECONDS


@dataclass(frozen=True)
class BackupContext:
    registry: ArrayRegistry
    backups: BackupRegistry
    arrays: ArrayService
    ec2: Any
    ssm: Any
    sfn: Any = None
    cloudwatch: Any = None
    state_machine_arn: str = ""
    signals: Signals | None = None
    clock: Callable[[], float] = field(default=time.time)
    freeze_lead: float = FREEZE_LEAD_SECONDS
    """Seconds after the Freeze step's sends at which every host freezes (0: each at once)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def code(error: ClientError) -> str:
    return str(error.response["Error"].get("Code", ""))


def tag_dict(items: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or ()}


def dump(decisions: Iterable[Any]) -> list[dict[str, Any]]:
    return [d.model_dump(by_alias=True, mode="json") for d in decisions]
