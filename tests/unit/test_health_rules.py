"""The health check's rules (vsa_core.health.rules): no AWS."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vsa_core.health import rules
from vsa_core.health.rules import HostView, Serving

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
FRESH = NOW - timedelta(minutes=4)
AGE = timedelta(minutes=11)
VOLS = ["vol-0000000000000000a", "vol-0000000000000000b"]
C = [Serving(f"i-c{n}", f"10.0.0.{n}", NOW - timedelta(hours=1)) for n in range(4)]


def host(
    name: str, states: dict[str, str], at: datetime | None = FRESH, volumes: list[str] = VOLS
) -> HostView:
    """A host whose every volume has a path per address, in the given state."""
    return HostView(name, at, {v: list(states.items()) for v in volumes})


def test_a_controller_no_host_reaches_is_dead_witnessed_by_the_hosts_that_reach_another():
    hosts = [
        host(f"i-h{n}", {"10.0.0.0": "live", "10.0.0.1": "connecting", "10.0.0.2": "live"}) for n in range(3)
    ]
    found = rules.assess(C[:3], hosts, VOLS, NOW, AGE)
    assert found.dead == ["i-c1"]
    assert found.witnesses == {"i-c1": ["i-h0", "i-h1", "i-h2"]}
    assert found.hosts_short == {"i-h0": 2, "i-h1": 2, "i-h2": 2}
    assert found.min_live_paths == 2


def test_one_host_still_reaching_it_keeps_a_controller_alive():
    hosts = [
        host("i-h0", {"10.0.0.0": "live", "10.0.0.1": "connecting"}),
        host("i-h1", {"10.0.0.0": "live", "10.0.0.1": "live"}),
    ]
    found = rules.assess(C[:2], hosts, VOLS, NOW, AGE)
    assert found.dead == []
    assert found.hosts_short == {"i-h0": 1}


def test_a_fault_every_host_shares_is_no_controllers_fault():
    # every host has lost every path (their network, say): nobody witnesses anything
    hosts = [host(f"i-h{n}", {"10.0.0.0": "connecting", "10.0.0.1": "connecting"}) for n in range(2)]
    found = rules.assess(C[:2], hosts, VOLS, NOW, AGE)
    assert found.dead == []
    assert found.hosts_short == {"i-h0": 0, "i-h1": 0}


def test_a_lone_controller_is_never_judged_and_stale_or_missing_reports_judge_nothing():
    dark = {"10.0.0.0": "connecting"}
    assert rules.assess(C[:1], [host("i-h0", dark)], VOLS, NOW, AGE).dead == []
    old = host("i-h0", {"10.0.0.0": "live", "10.0.0.1": "connecting"}, at=NOW - timedelta(hours=1))
    none = host("i-h1", {}, at=None)
    found = rules.assess(C[:2], [old, none], VOLS, NOW, AGE)
    assert (found.dead, found.hosts_short, found.hosts_stale, found.hosts_reporting) == (
        [],
        {},
        ["i-h0", "i-h1"],
        0,
    )
    assert found.min_live_paths is None


def test_a_controller_serving_since_after_the_report_is_not_judged_by_it():
    newcomer = Serving("i-c9", "10.0.0.9", FRESH + timedelta(seconds=30))
    hosts = [host("i-h0", {"10.0.0.0": "live", "10.0.0.1": "live"})]
    found = rules.assess([*C[:2], newcomer], hosts, VOLS, NOW, AGE)
    assert (found.dead, found.hosts_short) == ([], {})


def test_a_path_missing_from_one_volume_only_makes_the_host_short_not_the_controller_dead():
    paths = {VOLS[0]: [("10.0.0.0", "live"), ("10.0.0.1", "live")], VOLS[1]: [("10.0.0.0", "live")]}
    found = rules.assess(C[:2], [HostView("i-h0", FRESH, paths)], VOLS, NOW, AGE)
    assert (found.dead, found.hosts_short) == ([], {"i-h0": 1})


def test_replacement_needs_two_runs_one_at_a_time_and_not_half_the_controllers():
    one_dead = rules.assess(
        C[:3],
        [host("i-h0", {"10.0.0.0": "live", "10.0.0.1": "connecting", "10.0.0.2": "live"})],
        VOLS,
        NOW,
        AGE,
    )
    first = rules.verdict(one_dead, {}, replacing=0)
    assert (first.replace, first.suspects) == (None, {"i-c1": 1})
    second = rules.verdict(one_dead, first.suspects, replacing=0)
    assert (second.replace, second.suspects) == ("i-c1", {})
    busy = rules.verdict(one_dead, first.suspects, replacing=1)
    assert busy.replace is None
    assert "already being replaced" in str(busy.held)
    # a controller that came back is forgotten: the count starts again
    healthy = rules.assess(
        C[:3], [host("i-h0", dict.fromkeys(("10.0.0.0", "10.0.0.1", "10.0.0.2"), "live"))], VOLS, NOW, AGE
    )
    assert rules.verdict(healthy, first.suspects, replacing=0).suspects == {}
    two_of_four = rules.assess(
        C,
        [
            host(
                "i-h0",
                {"10.0.0.0": "live", "10.0.0.1": "connecting", "10.0.0.2": "connecting", "10.0.0.3": "live"},
            )
        ],
        VOLS,
        NOW,
        AGE,
    )
    held = rules.verdict(two_of_four, {"i-c1": 5, "i-c2": 5}, replacing=0)
    assert held.replace is None
    assert "shared fault" in str(held.held)


@given(
    n_controllers=st.integers(1, 5),
    states=st.lists(
        st.lists(st.sampled_from(["live", "connecting", None]), min_size=5, max_size=5), max_size=6
    ),
)
def test_property_dead_means_no_witness_reaches_it_and_some_controller_stays_alive(
    n_controllers: int, states: list[list[str | None]]
):
    serving = (
        C[:n_controllers]
        + [Serving("i-c4", "10.0.0.4", NOW - timedelta(hours=1))][: max(0, n_controllers - 4)]
    )
    hosts = [
        host(f"i-h{i}", {c.address: s for c, s in zip(serving, row, strict=False) if s is not None})
        for i, row in enumerate(states)
    ]
    found = rules.assess(serving, hosts, VOLS, NOW, AGE)
    by_id = {c.instance_id: c for c in serving}
    live = {h.instance_id: {a for paths in h.paths.values() for a, s in paths if s == "live"} for h in hosts}
    for dead in found.dead:
        # no host reaches it, and each witness reaches another controller
        assert all(by_id[dead].address not in through for through in live.values())
        assert found.witnesses[dead]
        for witness in found.witnesses[dead]:
            assert live[witness] - {by_id[dead].address}
    # a controller some host reaches is never dead, so never all of them while any host sees one
    if any(live.values()):
        assert len(found.dead) < len(serving)
    for h in hosts:  # a host reaching every controller is never short
        if all(s == "live" for s in (dict(next(iter(h.paths.values())))).values()) and len(
            next(iter(h.paths.values()))
        ) == len(serving):
            assert h.instance_id not in found.hosts_short


@pytest.mark.parametrize(
    ("schedule", "last", "due"),
    [
        ("rate(1 day)", datetime(2026, 11, 23, 3, 0, tzinfo=UTC), datetime(2026, 11, 24, 3, 0, tzinfo=UTC)),
        ("rate(15 minutes)", NOW, NOW + timedelta(minutes=15)),
        (
            "cron(0 3 * * ? *)",
            datetime(2026, 11, 23, 3, 1, tzinfo=UTC),
            datetime(2026, 11, 24, 3, 0, tzinfo=UTC),
        ),
        # EventBridge's day-of-week: 1 is Sunday; 6#3 the third Friday
        ("cron(0 2 ? * 1 *)", NOW, datetime(2026, 11, 29, 2, 0, tzinfo=UTC)),
        ("cron(0 8 ? * 6#3 *)", NOW, datetime(2026, 12, 18, 8, 0, tzinfo=UTC)),
    ],
)
def test_the_next_backup_is_due_when_eventbridge_would_fire(schedule: str, last: datetime, due: datetime):
    assert rules.next_backup_due(schedule, last) == due


def test_a_backup_is_overdue_an_hour_after_a_missed_fire_time():
    last = datetime(2026, 11, 23, 3, 5, tzinfo=UTC)
    assert not rules.backup_overdue(
        "cron(0 3 * * ? *)", last, last, datetime(2026, 11, 24, 3, 59, tzinfo=UTC)
    )
    assert rules.backup_overdue("cron(0 3 * * ? *)", last, last, datetime(2026, 11, 24, 4, 0, tzinfo=UTC))
    # with no completed set yet, counted from when the policy was first seen
    since = datetime(2026, 11, 24, 11, 0, tzinfo=UTC)
    assert not rules.backup_overdue("rate(1 hour)", None, since, NOW + timedelta(minutes=59))
    assert rules.backup_overdue("rate(1 hour)", None, since, NOW + timedelta(hours=1))


def test_drift_starts_a_reconcile_on_its_second_run_and_not_again_within_the_backoff():
    kinds = ["no-path", "path-not-live"]
    first = rules.drift(kinds, 0, None, NOW, dead=[], run_state=None)
    assert (first.start, first.runs) == (False, 1)
    second = rules.drift(kinds, first.runs, None, NOW, dead=[], run_state=None)
    assert (second.start, second.runs) == (True, 0)
    assert "no-path" in second.why
    assert "path-not-live" not in second.why
    soon = rules.drift(kinds, 1, NOW - timedelta(minutes=10), NOW, dead=[], run_state=None)
    assert not soon.start
    later = rules.drift(kinds, 1, NOW - rules.DRIFT_BACKOFF, NOW, dead=[], run_state=None)
    assert later.start


def test_volume_owners_to_hand_over_after_a_converged_run_start_one_without_the_backoff():
    # a scale-out leaves the newcomer owning nothing: the next handover's work, not a failure
    recent = NOW - timedelta(minutes=10)
    owners = rules.drift([rules.OWNERS], 1, recent, NOW, dead=[], run_state="converged")
    assert owners.start
    # after a failed run, or with other drift beside it, the backoff holds
    assert not rules.drift([rules.OWNERS], 1, recent, NOW, dead=[], run_state="failed").start
    assert not rules.drift([rules.OWNERS, "no-path"], 1, recent, NOW, dead=[], run_state="converged").start


def test_no_drift_run_for_a_reconnecting_path_a_dead_controller_or_a_run_already_converging():
    assert rules.drift(["path-not-live", "no-report"], 5, None, NOW, dead=[], run_state=None) == rules.Drift(
        False, 0, "no drift"
    )
    assert not rules.drift(["not-exported"], 5, None, NOW, dead=["i-c1"], run_state=None).start
    busy = rules.drift(["not-exported"], 5, None, NOW, dead=[], run_state="converging")
    assert (busy.start, busy.runs) == (False, 6)
