"""ConsistentBackup steps that need more than one AWS call or a decision (one step per
invocation, ``step`` in the input); the workflow owns the order, the waiting (Wait states), the
SSM commands, the retries and the thaw on every path out.

- ``preflight``: a serving controller with every volume attached, hosts online, EBS limits →
  start / wait / refuse (``SnapshotLimitError``); ``PreflightError`` names what is missing;
- ``hosts_ready``: freeze-io's dry-run results → ``PreflightError`` naming each host that
  cannot freeze (nothing frozen yet);
- ``freeze``: freeze-io sent to every host at once (not waited for);
- ``snapshot``: once every host has frozen (or failed, or is late; else ``taken: false`` and the
  workflow asks again a second later), the one ``CreateSnapshots`` call, timed, recorded;
  thaw-io sent to every host the moment it returns (the workflow's Thaw waits for those
  commands, and sends any that failed);
- ``record_hosts``: the freeze-io / thaw-io reports of every host, recorded;
- ``progress``: the snapshots' states and progress, recorded; when to look again;
- ``finish``: the honest label (or failed, snapshots deleted);
- ``fail``: a caught error → the set failed with the reason, its snapshots deleted;
- ``retention``: the array's policy applied (whole sets, oldest first, capped);
  ``RetentionFailedError`` names every set AWS refused to delete;
- ``retention_failed``: that failure counted (``VSA/Backups RetentionFailures``) and recorded on
  the new set, which stays completed: a retention failure is not a failed backup.
"""

from typing import Any

from vsa_core.backups.aws_service import BackupService
from vsa_core.backups.steps import (
    Fail,
    Finish,
    Freeze,
    HostsReady,
    Preflight,
    Progress,
    RecordHosts,
    Retention,
    RetentionFailed,
    Snapshot,
)
from vsa_core.settings import BackupDocumentNames, BackupRetention, BackupSignals, StackMetrics


class StepSettings(BackupDocumentNames, BackupRetention, BackupSignals, StackMetrics):
    """What the steps read: the freeze and thaw documents, the signals' bucket, retention's
    bound, the metrics' stack."""


def run(request: Any, service: BackupService, settings: StepSettings) -> dict[str, Any]:
    """One step; the logic is ``BackupService``'s."""
    a, b = request.array_id, request.backup_id
    match request:
        case Preflight():
            return service.preflight(a, b)
        case HostsReady():
            return service.hosts_ready(request.checks)
        case Freeze():
            return service.freeze(b, request.hosts, settings.freeze_io_document, a)
        case Snapshot():
            return service.snapshot(
                a,
                b,
                request.controller,
                request.excluded,
                request.volumes,
                request.freezing,
                settings.thaw_io_document,
                request.freeze_timeout,
                request.previous,
            )
        case RecordHosts():
            return service.record_hosts(a, b, request.freezes, request.thaws)
        case Progress():
            return service.progress(a, b, request.last_wait)
        case Finish():
            return service.finish(a, b)
        case Fail():
            return service.fail(a, b, request.error, request.freezes, request.thaws)
        case Retention():
            array = service.array(a)
            if array.spec.backup is None:
                return {"skipped": "no backup policy: retention runs on request only"}
            by = service.retention_caller(a, b)
            return service.apply_retention(a, None, settings.retention_max_deletions, by)
        case RetentionFailed():
            return service.record_retention_failure(settings.stack_name, a, b, request.error)
    raise AssertionError(f"unknown step {request!r}")  # pragma: no cover - the model is closed
