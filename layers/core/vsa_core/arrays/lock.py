"""The array lock: what it protects, who holds it, for how long, who waits and who skips. Pure.

One lock per array, a lease on the array's registry item (``pk=ARRAY#<id>, sk=SPEC``): the
attribute ``scalingLock`` names the holder (its Step Functions execution name) and
``scalingLockUntil`` (epoch seconds) ends the lease. (The names predate ReconcileArray; they
are kept so an array locked by a running ScaleArray across a deploy stays locked.)

**What it protects**: changes of the array's controller set and data plane that must not
interleave: ScaleArray (sets the group's desired capacity, hence starts bootstraps and drains)
and ReconcileArray (attaches, exports, connects, disconnects, detaches the spec's volumes and
hosts on the serving controllers, and its roll sets the group's capacity and terminates
outdated controllers). With it, a scale never launches or drains a controller in the middle of
a reconcile or a roll, and two reconciles never send the same documents at once.

**Who holds it**: exactly one execution at a time. Taking it is one conditional write
(:data:`ACQUIRE_CONDITION`): free, expired, or already ours (a retried state); releasing it is
conditional on still holding it (:data:`RELEASE_CONDITION`), so a holder whose lease ran out
and was taken over never releases the new holder's lock.

**Leases**: a ScaleArray run takes seconds and holds :data:`SCALE_LEASE_SECONDS`; a
ReconcileArray run takes minutes and holds :data:`RECONCILE_LEASE_SECONDS`, renewed by every
step (a step runs only while its execution holds the lease: a lost lease fails the step with
``LockLostError``). A crashed holder blocks the array for at most one lease, never for good.

**Who waits, who skips**: ScaleArray *skips* when the lock is busy (a few jittered retries,
then it ends ``skipped`` and re-arms its alarm, so a breach that persists fires again after
the holder is done: a scale decision made while the controllers change would be made on stale
data). ReconcileArray *waits* (up to :data:`RECONCILE_WAIT_SECONDS`): a stored spec must
converge, and waiting is free in a Step Functions Wait.

**Bootstrap and drain do not take it.** They are driven by Auto Scaling lifecycle hooks, which
time out (ABANDON / CONTINUE) if a workflow waits, and each acts on one controller, serialised
by the controller's slot. Instead the lock holders respect them: ScaleArray's planner holds
while a controller boots or drains, and ReconcileArray's first phase waits until none does. A
bootstrap that read the spec before an apply stored a new one can still finish after
ReconcileArray planned: its final check finds the serving controller short of a volume and runs
the phases again (bounded rounds).
"""

from dataclasses import dataclass

HOLDER_ATTRIBUTE = "scalingLock"
UNTIL_ATTRIBUTE = "scalingLockUntil"

ACQUIRE_UPDATE = f"SET {HOLDER_ATTRIBUTE} = :me, {UNTIL_ATTRIBUTE} = :until"
ACQUIRE_CONDITION = (
    f"attribute_exists(pk) AND (attribute_not_exists({HOLDER_ATTRIBUTE}) OR "
    f"{UNTIL_ATTRIBUTE} < :now OR {HOLDER_ATTRIBUTE} = :me)"
)
RENEW_UPDATE = f"SET {UNTIL_ATTRIBUTE} = :until"
RENEW_CONDITION = f"{HOLDER_ATTRIBUTE} = :me"
RELEASE_UPDATE = f"REMOVE {HOLDER_ATTRIBUTE}, {UNTIL_ATTRIBUTE}"
RELEASE_CONDITION = f"{HOLDER_ATTRIBUTE} = :me"

SCALE_LEASE_SECONDS = 600
"""ScaleArray's lease: far above a run's seconds, so a crashed run blocks scaling for ten
minutes, never for good."""
RECONCILE_LEASE_SECONDS = 900
"""ReconcileArray's lease, renewed by each of its steps: above its longest step and wait
(a Run Command poll round, a Lambda's 120 s) by far, so only a crashed run lets it lapse."""
RECONCILE_WAIT_SECONDS = 1800
"""How long ReconcileArray waits for the lock before it fails saying who holds it."""


@dataclass(frozen=True)
class Lease:
    """The lock as read: its holder (an execution name) and when its lease ends."""

    holder: str | None
    until: int

    def free_for(self, owner: str, now: int) -> bool:
        """Whether ``owner`` may take the lock at ``now`` (the same rule as ACQUIRE_CONDITION)."""
        return self.holder is None or self.until < now or self.holder == owner

    def describe(self, now: int) -> str:
        if self.holder is None:
            return "free"
        if self.until < now:
            return f"held by {self.holder}, lease expired {now - self.until} s ago"
        return f"held by {self.holder} for {self.until - now} s more"
