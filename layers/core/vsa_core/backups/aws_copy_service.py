"""Backup copies as one entry point: each step of the CopyBackupSet workflow is one function of
``aws_copies`` given this object's :class:`~vsa_core.backups.aws_copies.CopyContext`."""

from collections.abc import Callable
from typing import Any

import boto3

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.backups import aws_copies
from vsa_core.backups.aws_copies import CopyContext
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.clients import RETRY_CONFIG, client, regional_client
from vsa_core.settings import CopyRegions, Registry, StackMetrics
from vsa_core.steps import on_context


def ec2_in(region: str, credentials: dict[str, str] | None) -> Any:
    """An EC2 client in ``region`` (with an assumed role's keys in another account)."""
    if credentials is None:
        return regional_client("ec2", region)
    return boto3.client("ec2", region_name=region, config=RETRY_CONFIG, **credentials)  # type: ignore[call-overload]


class CopyService:
    def __init__(
        self,
        *,
        table_name: str,
        region: str,
        allowed_regions: tuple[str, ...],
        stack: str,
        allowed_accounts: tuple[str, ...] = (),
        ec2_in: Callable[[str, dict[str, str] | None], Any] = ec2_in,
    ) -> None:
        self.ctx = CopyContext(
            arrays=ArrayRegistry(table_name),
            backups=BackupRegistry(table_name),
            ec2=client("ec2"),
            sts=client("sts"),
            cloudwatch=client("cloudwatch"),
            region=region,
            allowed_regions=allowed_regions,
            allowed_accounts=allowed_accounts,
            stack=stack,
            ec2_in=ec2_in,
        )

    start = on_context(aws_copies.start)
    progress = on_context(aws_copies.progress)
    retention = on_context(aws_copies.retention)
    fail = on_context(aws_copies.fail)
    summary = on_context(aws_copies.summary)


class CopyStepSettings(Registry, CopyRegions, StackMetrics):
    """The registry table, the Regions copies may go to, the metrics' stack."""


def from_settings(settings: CopyStepSettings) -> CopyService:
    return CopyService(
        table_name=settings.table_name,
        region=str(client("ec2").meta.region_name),
        allowed_regions=settings.copy_regions,
        allowed_accounts=settings.copy_accounts,
        stack=settings.stack_name,
    )
