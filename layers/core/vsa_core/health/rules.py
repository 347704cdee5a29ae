"""The health check's rules, pure: what the hosts' fresh reports say about the array's paths
and its controllers, whether a backup is overdue, and which controller (if any) to have Auto
Scaling replace.

The health check runs on a schedule (every ``HealthCheckMinutes``). Each run reads the hosts'
newest reports (report-paths, sent by the previous run, or a later connect-path or
disconnect-path), judges them here, and sends report-paths again for the next run: a report
is at most one period plus delivery old, and every judgement rests on one taken after the
previous run's.

**A dead controller** is a serving controller through which no host with a fresh report has a
live path to any of the array's volumes, while at least one of them (a *witness*) has a live
path through another serving controller. So:

- a fault every host shares (their network, the array's volumes) is not a controller fault:
  with every controller dark on a host, that host witnesses nothing;
- a host that sees nothing at all (just added, not connected yet, offline) witnesses nothing;
- a single serving controller is never judged (nobody can witness against it).

A controller is replaced only when judged dead on ``CONFIRMATIONS`` consecutive runs (each on
reports taken after the run before: a path blinking through a reconnect is not a dead
controller), one at a time per array (none while another is being replaced), and never when
half or more of the serving controllers look dead at once (a shared fault is likelier). The
group launches the replacement; the lost controller's drain takes its dead path off the hosts.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

CONFIRMATIONS = 2
"""Consecutive runs a controller must be judged dead on before it is replaced."""
OVERDUE_GRACE = timedelta(hours=1)
"""How long after a scheduled backup time a completed set may still be missing: the workflow's
freeze, snapshot and completion take minutes; a set still missing an hour later is overdue."""


@dataclass(frozen=True)
class Serving:
    """A serving controller: its address, and since when it serves (its slot's ``since``)."""

    instance_id: str
    address: str
    since: datetime | None = None


@dataclass(frozen=True)
class HostView:
    """One host's newest report of the array: per volume, each path's address and state."""

    instance_id: str
    reported_at: datetime | None
    paths: Mapping[str, Sequence[tuple[str, str]]]
    """volume id -> (address, state) of each path."""


@dataclass(frozen=True)
class Assessment:
    """What one run saw of an array."""

    serving: int
    hosts_reporting: int
    """hosts with a fresh report"""
    hosts_stale: list[str]
    """hosts with no report, or one older than the freshness bound"""
    hosts_short: dict[str, int]
    """host -> fewest live paths of any volume, where fewer than the serving controllers"""
    dead: list[str]
    """serving controllers no witness host reaches (see the module's docstring)"""
    witnesses: dict[str, list[str]] = field(default_factory=dict)
    """dead controller -> the hosts that witnessed it"""

    @property
    def min_live_paths(self) -> int | None:
        """The fewest live paths of any fresh-reporting host (None: no host reported)."""
        return None if not self.hosts_reporting else min([*self.hosts_short.values(), self.serving])


def _live_through(host: HostView) -> set[str]:
    """The addresses through which the host has a live path to at least one volume."""
    return {address for paths in host.paths.values() for address, state in paths if state == "live"}


def assess(
    serving: Sequence[Serving],
    hosts: Iterable[HostView],
    volumes: Sequence[str],
    now: datetime,
    max_age: timedelta,
) -> Assessment:
    """``volumes``: the array's volume ids. A report older than ``max_age`` (or none) is stale
    and judges nothing; a report taken before a controller began serving judges nothing about
    that controller (the host had not been asked to connect to it yet)."""
    fresh: list[HostView] = []
    stale: list[str] = []
    for host in hosts:
        if host.reported_at is None or now - host.reported_at > max_age:
            stale.append(host.instance_id)
        else:
            fresh.append(host)

    def known(host: HostView) -> list[Serving]:
        """The serving controllers the host's report can speak of."""
        assert host.reported_at is not None
        return [c for c in serving if c.since is None or c.since <= host.reported_at]

    short: dict[str, int] = {}
    reach: dict[str, set[str]] = {}
    for host in fresh:
        expected = known(host)
        addresses = {c.address for c in expected}
        live = [
            sum(1 for where, state in host.paths.get(volume, ()) if state == "live" and where in addresses)
            for volume in volumes
        ]
        fewest = min(live, default=len(expected))
        if fewest < len(expected):
            short[host.instance_id] = fewest
        reach[host.instance_id] = _live_through(host) & addresses
    dead: list[str] = []
    witnesses: dict[str, list[str]] = {}
    if len(serving) > 1:
        for controller in sorted(serving, key=lambda c: c.instance_id):
            judges = [host.instance_id for host in fresh if controller in known(host)]
            if any(controller.address in reach[h] for h in judges):
                continue  # some host reaches it: whatever the others see, it serves
            seen_by = [h for h in judges if reach[h] - {controller.address}]
            if seen_by:
                dead.append(controller.instance_id)
                witnesses[controller.instance_id] = sorted(seen_by)
    return Assessment(
        serving=len(serving),
        hosts_reporting=len(fresh),
        hosts_stale=sorted(stale),
        hosts_short=short,
        dead=dead,
        witnesses=witnesses,
    )


@dataclass(frozen=True)
class Verdict:
    replace: str | None
    """the controller to mark Unhealthy this run, or None"""
    suspects: dict[str, int]
    """controller -> consecutive runs judged dead (what the next run starts from)"""
    held: str | None = None
    """why a confirmed dead controller was not replaced (in words), or None"""


def verdict(assessment: Assessment, suspects_before: Mapping[str, int], replacing: int) -> Verdict:
    """Which dead controller to replace now. ``suspects_before``: the previous run's counts;
    ``replacing``: the array's controllers already on their way out (Terminating*, or marked
    Unhealthy and not yet gone): one replacement at a time."""
    suspects = {c: suspects_before.get(c, 0) + 1 for c in assessment.dead}
    confirmed = sorted(c for c, runs in suspects.items() if runs >= CONFIRMATIONS)
    if not confirmed:
        return Verdict(None, suspects)
    if replacing:
        return Verdict(None, suspects, f"{confirmed[0]} is dead, but a controller is already being replaced")
    if len(assessment.dead) > 1 and 2 * len(assessment.dead) >= assessment.serving:
        return Verdict(
            None,
            suspects,
            f"{len(assessment.dead)} of {assessment.serving} serving controllers look dead at once: a shared "
            "fault is likelier than theirs, so none is replaced automatically",
        )
    return Verdict(confirmed[0], {c: n for c, n in suspects.items() if c != confirmed[0]})


def next_backup_due(schedule: str, after: datetime) -> datetime:
    """When the schedule next fires after ``after`` (UTC): ``rate(N unit)`` counts from
    ``after``; ``cron(…)`` is EventBridge's six-field cron (aws-croniter)."""
    expression = schedule.strip()
    if expression.startswith("rate(") and expression.endswith(")"):
        amount, unit = expression[5:-1].split()
        seconds = {"minute": 60, "hour": 3600, "day": 86400}[unit.rstrip("s")]
        return after + timedelta(seconds=int(amount) * seconds)
    if expression.startswith("cron(") and expression.endswith(")"):
        from aws_croniter import AwsCroniter  # only the health check needs it: imported here

        found: list[Any] = AwsCroniter(expression[5:-1]).get_next(after)
        return found[0] if isinstance(found[0], datetime) else after
    raise ValueError(f"schedule {schedule!r}: not rate(…) or cron(…)")


def backup_overdue(schedule: str, last_completed: datetime | None, since: datetime, now: datetime) -> bool:
    """Whether a completed set is missing: the schedule fired after the newest completed set
    (or, with none, after ``since``: the policy's start) at least ``OVERDUE_GRACE`` ago."""
    return next_backup_due(schedule, last_completed or since) + OVERDUE_GRACE <= now


DRIFT_RUNS = 2
"""Consecutive runs the data plane must differ from the spec before a ReconcileArray starts."""
DRIFT_BACKOFF = timedelta(minutes=30)
"""The least time between two runs the health check starts for one array: a difference a run
cannot fix (a host that refuses) is not retried every few minutes; its failure alarms."""
OWNERS = "owners"
"""The health check's difference for volume owners not evenly split over the serving controllers."""
NOT_DRIFT = frozenset({"no-report", "path-not-live"})
"""Differences that are not drift: a node that never reported (nothing to converge from) and a
path reconnecting (a controller's health, judged above, not the spec's)."""


@dataclass(frozen=True)
class Drift:
    start: bool
    """whether to start ReconcileArray now"""
    runs: int
    """consecutive runs with drift (what the next run starts from)"""
    why: str
    """in words: what differs, or why nothing starts"""


def drift(
    kinds: Sequence[str],
    runs_before: int,
    last_started: datetime | None,
    now: datetime,
    dead: Sequence[str],
    run_state: str | None,
) -> Drift:
    """Whether the array's data plane has drifted from its spec long enough, and nothing else
    is already at it, for the health check to start a ReconcileArray run. ``kinds``: the kinds
    of the differences the status names (``vsa_core.arrays.dataplane``)."""
    real = sorted({k for k in kinds if k not in NOT_DRIFT})
    if not real:
        return Drift(False, 0, "no drift")
    runs = runs_before + 1
    what = ", ".join(real)
    if run_state == "converging":
        return Drift(False, runs, f"drift ({what}); a ReconcileArray run is already converging")
    if dead:
        return Drift(False, runs, f"drift ({what}); a dead controller is the health check's first")
    if runs < DRIFT_RUNS:
        return Drift(False, runs, f"drift ({what}) on {runs} run(s); starting at {DRIFT_RUNS}")
    # an uneven split of volume owners is the next handover's work (a scale-out, a replacement),
    # not a difference the last run failed to fix: no backoff after a run that converged
    handover = real == [OWNERS] and run_state == "converged"
    if last_started is not None and now - last_started < DRIFT_BACKOFF and not handover:
        return Drift(False, runs, f"drift ({what}); the last drift run started {last_started.isoformat()}")
    return Drift(True, 0, f"drift ({what}) on {runs} runs: ReconcileArray started")
