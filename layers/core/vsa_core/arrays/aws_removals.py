"""An apply that removes volumes, on AWS: which volumes it removes (owned ones found by their
tags) and what the array's hosts report mounted from them (each host's last ``report-paths``
report, SSM Run Command's history: ``aws_reports``). The rules are ``removals``'."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from vsa_core.arrays import aws_observe, aws_reports, removals
from vsa_core.arrays.aws_observe import ArrayClients
from vsa_core.arrays.removals import Mount, Removed, Unknown
from vsa_core.arrays.spec import ArraySpec


@dataclass(frozen=True)
class MountCheck:
    """Where the hosts' mount reports are: the report-paths document (the health check sends
    it every ``period``), and how old a report may be to count (the health check's own bound)."""

    ssm: Any
    report_paths: str
    period: timedelta

    @property
    def max_age(self) -> timedelta:
        return 2 * self.period + timedelta(minutes=5)


def removed_volumes(clients: ArrayClients, before: ArraySpec, after: ArraySpec) -> list[Removed]:
    owned_before = tuple(v.name for v in before.new_volumes)
    owned_after = tuple(v.name for v in after.new_volumes)
    owned_ids: dict[str, str] = {}
    if set(owned_before) - set(owned_after):
        found = aws_observe.owned_volumes(clients, before.array_id)
        owned_ids = {name: str(v["VolumeId"]) for name, v in found.items()}
    return removals.removed_volumes(
        before.existing_volume_ids, after.existing_volume_ids, owned_before, owned_after, owned_ids
    )


def mounted(
    check: MountCheck, array_id: str, hosts: list[str], removed: list[Removed], now: datetime | None = None
) -> tuple[list[Mount], list[Unknown]]:
    """What the hosts have mounted from the removed volumes, as their last reports say."""
    if not removed or not hosts:
        return [], []
    when = now or datetime.now(UTC)
    read = aws_reports.last_reports(
        check.ssm, [(h, (check.report_paths,)) for h in hosts], array_id, (check.report_paths,), when
    )
    reports = dict(zip(hosts, read, strict=True))
    return removals.mounts_of_removed(array_id, removed, reports, now=when, max_age=check.max_age)
