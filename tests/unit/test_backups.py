"""Backup sets: ids, tags, honest consistency labels, set state, retention and the EBS pending-
snapshot limit. Examples first, then the invariants as properties."""

from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from vsa_core.arrays.spec import ARRAY_TAG, OWNED_TAG, BackupLock
from vsa_core.backups.sets import (
    BACKUP_TAG,
    IN_PROGRESS,
    BackupSet,
    HostFreeze,
    SetLock,
    SetState,
    SnapshotRequest,
    SnapshotTiming,
    VolumeSnapshot,
    backup_id_time,
    consistency,
    host_freeze,
    may_delete_snapshot,
    new_backup_id,
    parse_progress,
    retention_plan,
    set_state,
    snapshot_limits,
    snapshot_tags,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
T0 = 1_750_000_000.0  # epoch seconds: the hosts' instants below are relative to it


# ---------------------------------------------------------------- ids and tags


def test_backup_id_shape_and_time():
    backup_id = new_backup_id(datetime(2025, 6, 1, 12, 3, 4, 567_890, tzinfo=UTC))
    assert backup_id.startswith("bk-20250601T120304567Z-")
    assert len(backup_id) == len("bk-20250601T120304567Z-") + 8
    assert backup_id_time(backup_id) == datetime(2025, 6, 1, 12, 3, 4, 567_000, tzinfo=UTC)


def test_backup_id_from_entropy_is_repeatable_and_naive_times_are_refused():
    assert new_backup_id(NOW, "key-1") == new_backup_id(NOW, "key-1") != new_backup_id(NOW, "key-2")
    with pytest.raises(ValueError, match="aware"):
        new_backup_id(datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="not a backup id"):
        backup_id_time("bk-yesterday")


instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2999, 12, 31), timezones=st.just(UTC)
)


@given(first=instants, second=instants)
def test_backup_ids_sort_as_their_times(first: datetime, second: datetime):
    a, b = new_backup_id(first), new_backup_id(second)
    first_ms, second_ms = (
        first.replace(microsecond=first.microsecond // 1000 * 1000),
        second.replace(microsecond=second.microsecond // 1000 * 1000),
    )
    if first_ms < second_ms:
        assert a < b
    elif first_ms > second_ms:
        assert a > b
    assert backup_id_time(a) == first_ms


def test_snapshot_tags_and_what_may_be_deleted():
    tags = snapshot_tags("demo", "bk-20250601T120000000Z-0123abcd", "before upgrade")
    assert tags == {
        ARRAY_TAG: "demo",
        "vsa:deployment": "vsa",
        BACKUP_TAG: "bk-20250601T120000000Z-0123abcd",
        OWNED_TAG: "true",
        "Name": "vsa-demo-bk-20250601T120000000Z-0123abcd",
        "vsa:label": "before upgrade",
    }
    assert may_delete_snapshot(tags, "demo", "bk-20250601T120000000Z-0123abcd")
    assert not may_delete_snapshot(tags, "other", "bk-20250601T120000000Z-0123abcd")
    assert not may_delete_snapshot(tags, "demo", "bk-20250601T120000000Z-ffffffff")
    assert not may_delete_snapshot({**tags, OWNED_TAG: "false"}, "demo", "bk-20250601T120000000Z-0123abcd")
    # another deployment's set of an array of the same id is never this one's to delete
    assert not may_delete_snapshot(
        {**tags, "vsa:deployment": "staging"}, "demo", "bk-20250601T120000000Z-0123abcd"
    )


def test_backup_set_validates_its_fields_and_speaks_camel_case():
    backup = BackupSet.model_validate(
        {
            "backupId": "bk-20250601T120000000Z-0123abcd",
            "arrayId": "demo",
            "mode": "application",
            "label": "nightly",
            "createdAt": "2025-06-01T12:00:00Z",
            "snapshots": [{"volumeId": "vol-0123456789abcdef0", "snapshotId": "snap-0123456789abcdef0"}],
        }
    )
    assert backup.state == "requested"
    assert backup.in_progress
    assert backup.model_dump(by_alias=True, mode="json")["snapshots"][0]["state"] == "pending"
    for bad in (
        {"label": "it's"},
        {"backupId": "bk-1"},
        {"mode": "app"},
        {"createdAt": "2025-06-01T12:00:00"},
    ):
        with pytest.raises(ValidationError):
            BackupSet.model_validate({**backup.model_dump(by_alias=True), **bad})


def test_parse_progress():
    assert [parse_progress(p) for p in (None, "", "0%", "45%", "100%")] == [0, 0, 0, 45, 100]


# ---------------------------------------------------------------- host reports and consistency

FREEZE_REPORT = {  # the shape freeze-io prints last (documents/freeze-io.sh)
    "document": "freeze-io",
    "backupId": "bk-20250601T120000000Z-0123abcd",
    "status": "frozen",
    "timeoutSeconds": 10,
    "armedAt": T0,
    "watchdogDeadline": T0 + 10,
    "watchdogPid": 4242,
    "freezeStartedAt": T0 + 0.02,
    "frozeAt": T0 + 0.08,
    "mountpoints": [{"mountpoint": "/data", "device": "/dev/nvme1n1", "fstype": "xfs", "frozeAt": T0 + 0.08}],
}
THAW_REPORT = {  # the shape thaw-io prints last (documents/thaw-io.sh)
    "document": "thaw-io",
    "backupId": "bk-20250601T120000000Z-0123abcd",
    "status": "thawed",
    "thawStartedAt": T0 + 1.5,
    "thawedAt": T0 + 1.55,
    "watchdog": "cancelled",
    "watchdogFired": False,
    "watchdogFiredAt": None,
    "mountpoints": [{"mountpoint": "/data", "result": "thawed", "thawedAt": T0 + 1.55, "detail": ""}],
}
SNAPSHOT = SnapshotTiming(requestedAt=T0 + 0.5, returnedAt=T0 + 1.0)


def host(instance: str = "i-0123456789abcdef0", **changes: Any) -> HostFreeze:
    return host_freeze(instance, {**FREEZE_REPORT, **changes.pop("freeze", {})}, {**THAW_REPORT, **changes})


def test_host_freeze_from_the_documents_reports():
    good = host()
    assert good.froze_at == T0 + 0.08
    assert good.thawed_at == T0 + 1.55
    assert good.window_seconds == pytest.approx(1.53)
    assert good.error is None
    failed = host_freeze(
        "i-0123456789abcdef0", {"status": "failed", "reason": "/data is a tmpfs filesystem"}, THAW_REPORT
    )
    assert failed.froze_at is None
    assert failed.error == "freeze-io: /data is a tmpfs filesystem"
    lost = host_freeze("i-0123456789abcdef0", None, None, error="SSM: Undeliverable")
    assert lost.error == "SSM: Undeliverable"


def test_application_consistent_when_every_host_froze_around_the_snapshot():
    label, reason = consistency("application", [host(), host("i-0123456789abcdef1")], 10, SNAPSHOT)
    assert label == "application-consistent"
    assert "all 2 host(s)" in reason


def test_a_thaw_on_the_snapshot_signal_is_application_consistent_and_an_early_one_is_not():
    signalled = host("i-0123456789abcdef1", thawedBy="signal", watchdog="thawed-on-signal")
    assert signalled.thawed_by == "signal"
    label, reason = consistency("application", [host(), signalled], 10, SNAPSHOT)
    assert label == "application-consistent"
    assert "1 on the snapshot's signal, 1 by thaw-io" in reason
    # a marker written before CreateSnapshots returned (never by the product; forged, say) is caught
    early = host(thawedBy="signal", thawStartedAt=T0 + 0.9, thawedAt=T0 + 0.95)
    label, reason = consistency("application", [early], 10, SNAPSHOT)
    assert label == "crash-consistent"
    assert "began to thaw" in reason


@pytest.mark.parametrize(
    ("hosts", "snapshot", "why"),
    [
        ([], SNAPSHOT, "no hosts to freeze"),
        ([host(), host_freeze("i-0123456789abcdef1", {"status": "failed", "reason": "EBUSY"}, THAW_REPORT)],
         SNAPSHOT, "i-0123456789abcdef1: freeze-io: EBUSY"),
        ([host(watchdogFired=True, watchdog="fired")], SNAPSHOT, "thawed by its watchdog"),
        ([host_freeze("i-0123456789abcdef0", FREEZE_REPORT, None)], SNAPSHOT, "did not report thawing"),
        ([host(thawedAt=T0 + 12)], SNAPSHOT, "over the 10 s window"),
        ([host()], SnapshotTiming(requestedAt=T0 + 0.05, returnedAt=T0 + 1), "before the last host froze"),
        ([host()], SnapshotTiming(requestedAt=T0 + 0.5, returnedAt=T0 + 1.6), "began to thaw"),
        ([host()], None, "no record of when the snapshot was taken"),
    ],
    ids=["no-hosts", "one-failed", "watchdog", "no-thaw", "too-long", "early", "late", "no-timing"],
)  # fmt: skip
def test_crash_consistent_with_the_reason(hosts: list[HostFreeze], snapshot: SnapshotTiming | None, why: str):
    label, reason = consistency("application", hosts, 10, snapshot)
    assert label == "crash-consistent"
    assert why in reason


def test_crash_mode_is_crash_consistent_whatever_the_hosts_did():
    assert consistency("crash", [host()], 10, SNAPSHOT)[0] == "crash-consistent"


host_records = st.builds(
    HostFreeze,
    instanceId=st.sampled_from(["i-0123456789abcdef0", "i-0123456789abcdef1", "i-0123456789abcdef2"]),
    freezeStartedAt=st.none() | st.floats(T0, T0 + 2),
    frozeAt=st.none() | st.floats(T0, T0 + 3),
    thawStartedAt=st.none() | st.floats(T0 + 1, T0 + 20),
    thawedAt=st.none() | st.floats(T0 + 1, T0 + 20),
    watchdogFired=st.booleans(),
    error=st.none() | st.just("failed"),
)


@given(
    hosts=st.lists(host_records, max_size=4),
    requested=st.floats(T0, T0 + 5),
    took=st.floats(0, 5),
    window=st.floats(1, 60),
)
def test_application_consistent_only_when_every_condition_holds(
    hosts: list[HostFreeze], requested: float, took: float, window: float
):
    snapshot = SnapshotTiming(requestedAt=requested, returnedAt=requested + took)
    label, reason = consistency("application", hosts, window, snapshot)
    if label == "application-consistent":
        assert hosts
        for h in hosts:
            assert h.error is None
            assert not h.watchdog_fired
            assert h.froze_at is not None
            assert h.froze_at <= snapshot.requested_at
            assert h.thaw_started_at is not None
            assert snapshot.returned_at <= h.thaw_started_at
            assert h.window_seconds is not None
            assert h.window_seconds <= window
    else:
        assert reason
    assert consistency("crash", hosts, window, snapshot)[0] == "crash-consistent"


# ---------------------------------------------------------------- set state


def snap(state: str, n: int = 0) -> VolumeSnapshot:
    return VolumeSnapshot.model_validate(
        {"volumeId": f"vol-{n:017x}", "snapshotId": f"snap-{n:017x}", "state": state}
    )


def test_set_state_examples():
    assert set_state([snap("completed"), snap("completed", 1)]) == "completed"
    assert set_state([snap("completed"), snap("pending", 1)]) == "pending"
    assert set_state([snap("pending"), snap("error", 1)]) == "failed"
    assert set_state([]) == "failed"


@given(st.lists(st.sampled_from(["pending", "completed", "error", "recoverable", "recovering"]), min_size=1))
def test_any_error_fails_the_set_and_only_all_completed_completes_it(states: list[str]):
    result = set_state([snap(s, i) for i, s in enumerate(states)])
    assert (result == "failed") == ("error" in states)
    assert (result == "completed") == all(s == "completed" for s in states)


# ---------------------------------------------------------------- retention


def backup_set(minutes_ago: int, state: SetState, n: int = 0) -> BackupSet:
    created = NOW - timedelta(minutes=minutes_ago, milliseconds=n)
    return BackupSet(
        backupId=new_backup_id(created, entropy=str(n)),
        arrayId="demo",
        mode="crash",
        state=state,
        createdAt=created,
    )


def test_retention_keeps_the_newest_completed_and_lists_why():
    sets = [
        backup_set(10, "completed", 1),
        backup_set(20, "completed", 2),
        backup_set(30, "snapshotting", 3),
        backup_set(40, "completed", 4),
        backup_set(50, "failed", 5),
        backup_set(60 * 48, "failed", 6),
        backup_set(60 * 72, "completed", 7),
    ]
    plan = retention_plan(sets, keep=2, max_deletions_per_run=2, now=NOW)
    by_id = {d.backup_id: d for d in plan.decisions}
    assert [d.backup_id for d in plan.decisions] == [s.backup_id for s in reversed(sets)]  # oldest first
    assert [d.backup_id for d in plan.deletions] == [sets[6].backup_id, sets[5].backup_id]
    assert [d.backup_id for d in plan.deferred] == [sets[3].backup_id]
    assert "over this run's cap of 2" in by_id[sets[3].backup_id].reason
    assert by_id[sets[2].backup_id].action == "keep"
    assert "in progress" in by_id[sets[2].backup_id].reason
    assert by_id[sets[4].backup_id].action == "keep"
    assert "to look at" in by_id[sets[4].backup_id].reason
    assert by_id[sets[0].backup_id].action == by_id[sets[1].backup_id].action == "keep"


def test_retention_resumes_an_interrupted_deletion_and_refuses_nonsense():
    interrupted = backup_set(100, "deleting")
    assert (
        retention_plan([interrupted], 1, 5, NOW)
        .deletions[0]
        .reason.startswith("its deletion was interrupted")
    )
    with pytest.raises(ValueError, match="at least 1"):
        retention_plan([], 0, 5, NOW)
    other = backup_set(1, "completed", 9).model_copy(update={"array_id": "other"})
    with pytest.raises(ValueError, match="per array"):
        retention_plan([backup_set(1, "completed"), other], 1, 5, NOW)
    with pytest.raises(ValueError, match="listed twice"):
        retention_plan([interrupted, interrupted], 1, 5, NOW)


set_lists = st.lists(
    st.tuples(st.integers(0, 60 * 24 * 30), st.sampled_from(get_args(SetState))), max_size=25
).map(lambda specs: [backup_set(minutes, state, n) for n, (minutes, state) in enumerate(specs)])


@given(sets=set_lists, keep=st.integers(1, 10), cap=st.integers(0, 10))
def test_retention_invariants(sets: list[BackupSet], keep: int, cap: int):
    plan = retention_plan(sets, keep=keep, max_deletions_per_run=cap, now=NOW)
    by_id = {s.backup_id: s for s in sets}
    deleted = {d.backup_id for d in plan.deletions}
    # every set is decided once
    assert sorted(d.backup_id for d in plan.decisions) == sorted(by_id)
    # never a set in progress
    assert not any(by_id[b].state in IN_PROGRESS for b in deleted)
    # never more than the cap
    assert len(deleted) <= cap
    # never fewer than keep completed sets left (or all of them, if fewer)
    completed = [s for s in sets if s.state == "completed"]
    left = [s for s in completed if s.backup_id not in deleted]
    assert len(left) >= min(keep, len(completed))
    # oldest first: each deleted set is older than every candidate left for a later run, and
    # each deleted completed set is older than every completed set kept
    age = {s.backup_id: (s.created_at, s.backup_id) for s in sets}
    for d in deleted:
        assert all(age[d] < age[later.backup_id] for later in plan.deferred)
        if by_id[d].state == "completed":
            assert all(age[d] < age[k.backup_id] for k in left)
    # whole sets only: a decision names a set, never part of one
    assert all(d.action in {"delete", "keep", "defer"} for d in plan.decisions)


# ---------------------------------------------------------------- EBS pending-snapshot limit

VOLUMES = ("vol-00000000000000001", "vol-00000000000000002")


def request(n: int) -> SnapshotRequest:
    return SnapshotRequest(backupId=f"bk-{n}", volumeIds=VOLUMES)


def test_a_set_starts_under_the_limit_and_counts_towards_it():
    decisions = snapshot_limits({VOLUMES[0]: 3}, [request(1), request(2), request(3)])
    assert [d.action for d in decisions] == ["start", "start", "queue"]
    assert f"{VOLUMES[0]} has 5 pending snapshot(s); EBS allows 5 per io2 volume" in decisions[2].message


def test_beyond_the_queue_a_set_is_refused_with_what_to_do():
    decisions = snapshot_limits({VOLUMES[1]: 5}, [request(1), request(2), request(3)], max_queued=1)
    assert [d.action for d in decisions] == ["queue", "refuse", "refuse"]
    assert "retry after the pending snapshots complete" in decisions[1].message
    assert [d.action for d in snapshot_limits({VOLUMES[1]: 5}, [request(1)], max_queued=0)] == ["refuse"]


def test_first_come_first_served():
    # a set that would fit does not overtake one already waiting
    waiting = SnapshotRequest(backupId="bk-big", volumeIds=VOLUMES)
    small = SnapshotRequest(backupId="bk-small", volumeIds=("vol-00000000000000009",))
    decisions = snapshot_limits({VOLUMES[0]: 5}, [waiting, small], max_queued=2)
    assert [d.action for d in decisions] == ["queue", "queue"]
    assert "behind bk-big" in decisions[1].message


@given(
    pending=st.dictionaries(st.sampled_from(VOLUMES), st.integers(0, 5)),
    count=st.integers(0, 8),
    max_queued=st.integers(0, 3),
)
def test_started_sets_never_exceed_the_limit(pending: dict[str, int], count: int, max_queued: int):
    decisions = snapshot_limits(pending, [request(n) for n in range(count)], max_queued=max_queued)
    started = sum(d.action == "start" for d in decisions)
    for volume in VOLUMES:
        assert pending.get(volume, 0) + started <= 5
    assert sum(d.action == "queue" for d in decisions) <= max_queued


def test_retention_keeps_a_locked_set_until_its_lock_expires_and_says_until_when():
    # Given three completed sets, the two oldest locked: one still for a day, one expired an hour ago
    newest, locked, expired = (
        backup_set(10, "completed", 1),
        backup_set(20, "completed", 2),
        backup_set(30, "completed", 3),
    )
    locked = locked.model_copy(update={"lock": SetLock(mode="compliance", until=NOW + timedelta(days=1))})
    expired = expired.model_copy(update={"lock": SetLock(mode="governance", until=NOW - timedelta(hours=1))})
    # When retention keeps 1
    plan = retention_plan([newest, locked, expired], keep=1, max_deletions_per_run=5, now=NOW)
    # Then the set locked for another day stays, saying until when; the expired lock holds nothing
    by_id = {d.backup_id: d for d in plan.decisions}
    assert by_id[locked.backup_id].action == "keep"
    assert (
        f"locked (compliance) until {(NOW + timedelta(days=1)).isoformat()}" in by_id[locked.backup_id].reason
    )
    assert [d.backup_id for d in plan.deletions] == [expired.backup_id]
    # and a lock never makes retention keep fewer than it should (the newest stays anyway)
    assert by_id[newest.backup_id].action == "keep"


def test_a_backup_lock_takes_a_cooling_off_period_in_compliance_mode_only():
    assert (
        BackupLock.model_validate({"mode": "compliance", "days": 30, "coolOffHours": 24}).cool_off_hours == 24
    )
    with pytest.raises(ValidationError, match="coolOffHours applies to mode compliance only"):
        BackupLock.model_validate({"mode": "governance", "days": 30, "coolOffHours": 24})
    for wrong in (
        {"mode": "governance", "days": 0},
        {"mode": "compliance", "days": 36_501},
        {"mode": "legal-hold", "days": 1},
    ):
        with pytest.raises(ValidationError):
            BackupLock.model_validate(wrong)
