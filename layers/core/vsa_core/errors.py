"""Named domain errors. Step Functions ``Retry``/``Catch`` match them by class name
(``errorType`` of a Lambda error is the exception's class name), and the API maps them to
HTTP status codes in one place."""


class VsaError(Exception):
    """Base of every error the control plane raises on purpose."""


class ArrayNotFoundError(VsaError):
    """The array id is not in the registry."""


class InvalidSpecError(VsaError):
    """An array spec that cannot be applied; the message says what to fix."""


class InvalidEventError(VsaError):
    """An event that does not have the shape or content the trigger expects."""


class ConflictError(VsaError):
    """The request conflicts with the array's current state (a concurrent apply won, a bootstrap,
    drain or backup is running, maxControllers below the serving controllers); the message says
    why and what to do."""


class ControllerGoneError(VsaError):
    """A bootstrap step found its controller no longer running (its lifecycle action ended, or
    it was terminated): BootstrapController undoes what it did at once."""


class FencingError(VsaError):
    """Volume ownership cannot move without risking a stale write (a lost owner whose
    reservation key is unknown, a handover that would serve a volume twice): nothing moves, and
    the message says what is missing."""


class TeardownPendingError(VsaError):
    """A teardown step found AWS still letting go (the group still exists, an owned volume is
    still attached). Not a failure: the DeleteArray workflow retries it with backoff."""


class ReconcileError(VsaError):
    """AWS refused a step of converging on a stored spec (throttling, a limit, a permission):
    the spec is stored; applying it again resumes the convergence. The API answers 502."""


class VolumeCreationError(VsaError):
    """ReconcileArray's ``create`` step could not create every owned volume the stored spec
    declares (a quota, a permission, an unsupported size): the message says which it created,
    which were there already and which remain, with AWS's reason; applying again resumes."""


class LockLostError(VsaError):
    """A workflow step found its execution no longer holds the array lock (its lease ran out and
    another run took it): the step does nothing and the workflow stops, saying who holds it."""


class RollBlockedError(VsaError):
    """ReconcileArray's roll cannot replace an outdated controller without going below the
    array's bounds (16 controllers, io2 Multi-Attach's limit, with minControllers 16); the
    message says what to change."""


class BackupNotFoundError(VsaError):
    """The backup set id is not recorded for the array."""


class DrillNotFoundError(VsaError):
    """The drill id is not recorded for the array."""


class DrillStepError(VsaError):
    """A RestoreDrill step found the drill cannot go on (a restored volume in error, the drill
    instance gone or never reaching Systems Manager): the drill fails with the reason and is
    cleaned up."""


class CopyError(VsaError):
    """A backup set cannot be copied to a destination as the policy asks (a Region the stack may
    not copy into, a destination the policy no longer names): the copy fails with the reason; the
    set itself is good."""


class InvalidBackupError(VsaError):
    """A backup or restore request that cannot be done as asked; the message says what to fix."""


class PreflightError(VsaError):
    """The ConsistentBackup workflow's checks failed before anything was frozen or snapshotted
    (no serving controller, a host offline, a mountpoint that cannot be frozen, a volume not
    attached): the set fails fast with the reason."""


class SnapshotLimitError(VsaError):
    """EBS would refuse the snapshots (at most 5 pending per io2 volume, one per volume every
    15 s) and the set cannot wait longer: the message says why and when to retry."""


class SnapshotSetError(VsaError):
    """CreateSnapshots did not snapshot exactly the array's volumes."""


class RestoreError(VsaError):
    """AWS refused a step of a restore: what it had created was deleted again and nothing was
    registered, so restoring again starts clean. The API answers 502."""


class RetentionFailedError(VsaError):
    """Retention could not delete a set that the policy says goes (AWS refused a DeleteSnapshot,
    say a snapshot an AMI was registered from): the backup that ran it is still good. The
    message names every set and AWS's refusal; the sets stay and the next run tries again."""
