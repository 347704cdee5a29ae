"""EBS snapshot lock as the EC2 API reference and the EBS User Guide describe it (neither moto nor
LocalStack's community edition implements it): LockSnapshot, UnlockSnapshot,
DescribeLockedSnapshots, and DeleteSnapshot refused for a locked snapshot.

* LockSnapshot (API reference, "LockSnapshot"): a snapshot ``pending`` or ``completed`` (EBS User
  Guide, "Lock an Amazon EBS snapshot"); ``LockMode`` governance or compliance; exactly one of
  ``LockDuration`` (1-36,500 days) and ``ExpirationDate``; ``CoolOffPeriod`` (1-72 hours) with
  compliance only. On a locked snapshot it modifies the lock: in governance, or in compliance
  within the cooling-off period, mode and duration may change; in compliance after it, only a
  longer duration or a later expiry, with no ``CoolOffPeriod``.
* Lock states (``LockState``): ``governance``; ``compliance-cooloff`` while the cooling-off period
  runs; ``compliance`` after it; ``expired`` once the lock's expiry has passed (the snapshot is not
  locked any more and can be deleted).
* UnlockSnapshot: governance, or compliance within the cooling-off period; never compliance after.
* DeleteSnapshot: refused while the lock has not expired. The API reference names no error code
  for that refusal: ``SnapshotLocked`` here is this model's; the product never depends on it (its
  retention reads the locks first and leaves a locked set alone).

Time is the local cloud's wall clock; a test that needs a lock to expire locks with an
``ExpirationDate`` moments ahead (the API takes any future date).
"""

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from localstack.aws.api import CommonServiceException

LOCKABLE_STATES = ("pending", "completed")
MAX_DAYS = 36_500
MAX_COOL_OFF_HOURS = 72


@dataclass
class Lock:
    mode: str
    created_on: datetime
    duration_start: datetime
    expires_on: datetime
    duration_days: int | None
    cool_off_hours: int | None
    cool_off_expires_on: datetime | None

    def state(self, now: datetime) -> str:
        if now >= self.expires_on:
            return "expired"
        if self.mode == "governance":
            return "governance"
        if self.cool_off_expires_on is not None and now < self.cool_off_expires_on:
            return "compliance-cooloff"
        return "compliance"

    def info(self, snapshot_id: str, owner_id: str, now: datetime) -> dict[str, Any]:
        found: dict[str, Any] = {
            "OwnerId": owner_id,
            "SnapshotId": snapshot_id,
            "LockState": self.state(now),
            "LockCreatedOn": self.created_on,
            "LockDurationStartTime": self.duration_start,
            "LockExpiresOn": self.expires_on,
        }
        if self.duration_days is not None:
            found["LockDuration"] = self.duration_days
        if self.cool_off_hours is not None:
            found["CoolOffPeriod"] = self.cool_off_hours
            found["CoolOffPeriodExpiresOn"] = self.cool_off_expires_on
        return found


LOCKS: dict[tuple[str, str, str], Lock] = {}
_GUARD = threading.Lock()


def _error(code: str, message: str) -> CommonServiceException:
    return CommonServiceException(code, message)


def _expiry(request: dict[str, Any], start: datetime) -> tuple[datetime, int | None]:
    days, date = request.get("LockDuration"), request.get("ExpirationDate")
    if (days is None) == (date is None):
        raise _error("InvalidParameterCombination", "Specify exactly one of LockDuration and ExpirationDate.")
    if days is not None:
        if not 1 <= int(days) <= MAX_DAYS:
            raise _error("InvalidParameterValue", f"LockDuration must be between 1 and {MAX_DAYS} days.")
        return start + timedelta(days=int(days)), int(days)
    expires = date if isinstance(date, datetime) else datetime.fromisoformat(str(date))
    expires = expires if expires.tzinfo else expires.replace(tzinfo=UTC)
    if expires <= start:
        raise _error("InvalidParameterValue", "ExpirationDate must be in the future.")
    return expires, None


def _cool_off(request: dict[str, Any], mode: str) -> int | None:
    hours = request.get("CoolOffPeriod")
    if hours is None:
        return None
    if mode != "compliance":
        raise _error("InvalidParameterCombination", "CoolOffPeriod applies to compliance mode only.")
    if not 1 <= int(hours) <= MAX_COOL_OFF_HOURS:
        raise _error(
            "InvalidParameterValue", f"CoolOffPeriod must be between 1 and {MAX_COOL_OFF_HOURS} hours."
        )
    return int(hours)


def _modification_refused(
    current: Lock, mode: str, expires: datetime, cool_off: int | None, now: datetime
) -> str:
    """Why a lock in compliance mode after its cooling-off period cannot take this change."""
    if current.state(now) != "compliance":
        return ""
    if mode != "compliance":
        return (
            "the lock mode of a snapshot locked in compliance mode cannot change after its cooling-off period"
        )
    if cool_off is not None:
        return "CoolOffPeriod cannot be given once a compliance lock's cooling-off period is over"
    if expires < current.expires_on:
        return "the lock duration of a snapshot locked in compliance mode can only be increased"
    return ""


def lock(key: tuple[str, str, str], snapshot_state: str, request: dict[str, Any]) -> dict[str, Any]:
    """LockSnapshot on the snapshot ``key`` (account, region, snapshot id)."""
    if snapshot_state not in LOCKABLE_STATES:
        raise _error(
            "IncorrectState",
            f"The snapshot '{key[2]}' is {snapshot_state}: only a pending or completed one can be locked.",
        )
    mode = str(request.get("LockMode"))
    if mode not in ("governance", "compliance"):
        raise _error("InvalidParameterValue", f"LockMode must be governance or compliance, not {mode}.")
    now = datetime.now(UTC)
    cool_off = _cool_off(request, mode)
    with _GUARD:
        current = LOCKS.get(key)
        live = current if current is not None and current.state(now) != "expired" else None
        expires, days = _expiry(request, now)
        if live is not None and (why := _modification_refused(live, mode, expires, cool_off, now)):
            raise _error("IncorrectState", f"The snapshot '{key[2]}' is locked: {why}.")
        kept = live if live is not None and mode == "compliance" and cool_off is None else None
        kept_cool_off = kept.cool_off_expires_on if kept is not None else None
        kept_hours = kept.cool_off_hours if kept is not None else None
        LOCKS[key] = Lock(
            mode=mode,
            created_on=live.created_on if live is not None else now,
            duration_start=now,
            expires_on=expires,
            duration_days=days,
            cool_off_hours=cool_off if cool_off is not None else kept_hours,
            cool_off_expires_on=now + timedelta(hours=cool_off) if cool_off is not None else kept_cool_off,
        )
        info = LOCKS[key].info(key[2], key[0], now)
    info.pop("OwnerId")
    return info


def unlock(key: tuple[str, str, str]) -> dict[str, Any]:
    now = datetime.now(UTC)
    with _GUARD:
        current = LOCKS.get(key)
        if current is None or current.state(now) == "expired":
            raise _error("IncorrectState", f"The snapshot '{key[2]}' is not locked.")
        if current.state(now) == "compliance":
            raise _error(
                "IncorrectState",
                f"The snapshot '{key[2]}' is locked in compliance mode and its cooling-off period is "
                "over: it cannot be unlocked.",
            )
        del LOCKS[key]
    return {"SnapshotId": key[2]}


def describe(account: str, region: str, snapshot_ids: list[str], states: list[str]) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    with _GUARD:
        found = [
            lock.info(snapshot_id, account, now)
            for (a, r, snapshot_id), lock in sorted(LOCKS.items())
            if (a, r) == (account, region) and (not snapshot_ids or snapshot_id in snapshot_ids)
        ]
    return [f for f in found if not states or f["LockState"] in states]


def refuse_deletion(key: tuple[str, str, str]) -> None:
    """DeleteSnapshot of a snapshot whose lock has not expired is refused."""
    now = datetime.now(UTC)
    with _GUARD:
        current = LOCKS.get(key)
        state = current.state(now) if current is not None else None
    if current is not None and state != "expired":
        until = current.expires_on.isoformat()
        raise _error(
            "SnapshotLocked",
            f"The snapshot '{key[2]}' is locked ({state}) until {until}: it cannot be deleted.",
        )


def forget(key: tuple[str, str, str]) -> None:
    with _GUARD:
        LOCKS.pop(key, None)
