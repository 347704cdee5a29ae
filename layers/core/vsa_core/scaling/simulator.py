"""Replay a per-minute IOPS trace through the planner, and through two references. Pure.

What is modelled, minute by minute (one trace sample = one minute of demand, in IOPS):

- **planner**: the control plane. ``trigger="alarms"`` (the default) runs ScaleArray when one of
  the array's two CloudWatch alarms changes to ALARM, as CloudWatch runs them: thresholds from
  ``reconcile.alarm_thresholds`` at the current desired count, ``DatapointsToAlarm`` of
  ``EvaluationPeriods`` one-minute datapoints from ``reconcile``; evaluated every minute and,
  after a run changed the count (PutMetricAlarm moved both thresholds), at once on the datapoints
  already held. Only a change of state is an event: an alarm that stays in ALARM (its run held,
  or the low alarm is still breached under the next count's threshold) starts nothing more.
  ``trigger="alarms-rearmed"`` (the deployed trigger; with ``forecast`` the deployed path,
  ``MODELS["deployed"]``, which ``compare`` and ``vsactl simulate`` replay by default): the
  same, with ScaleArray re-arming the alarm that started each run (SetAlarmState OK) after the
  pause ``rules.rearm_after`` gives that run's decision (the very function ScaleArray's
  PlanScale answers with), so an alarm still in breach fires again at its next evaluation
  after it. ``trigger="every-minute"`` runs ScaleArray
  every minute. Each run plans with the clock, the last scale-out and scale-in, the changes of
  the count in the last hour (the churn limit), the controllers in flight, the last
  ``RECENT_MINUTES`` of demand (``sustained_minutes`` = the low alarm's window), the deployed
  trend lead (``tuning.planner_inputs``: the product's boot allowance, whatever
  ``boot_minutes`` the replay models), and
  ``scale_in_headroom`` (default ``SCALE_IN_HYSTERESIS``, the low alarm's margin).
- **oracle**: knows the whole trace and serves every minute at the target utilisation with
  exactly ``ceil(demand / (perControllerIops x targetUtilisation))`` controllers (clamped to
  [min, max]), paying the same boot and drain delays: a controller is billed from ``boot``
  minutes before it must serve until ``drain`` minutes after it stops, and is kept through a gap
  when the gap is no longer than boot + drain (cheaper than draining and booting again). Levels
  are independent, so this is the fewest controller-hours of any schedule that never runs above
  target under the same delays (a lower bound for any such schedule: the planner may do better
  only by running above target).
- **static**: provisioned for the trace's peak at target, all the time.

Every controller bills from its launch: booting (``boot_minutes``, not yet serving), serving,
draining (``drain_minutes`` after a scale-in, already not serving: its paths are being
disconnected). A minute is **under-provisioned** when its demand exceeds what the serving
controllers deliver at 100% (``capacity.deliverable_iops``: ``serving x perControllerIops``, and
never more than the volumes' provisioned IOPS when ``volume_iops`` is given): IOPS actually
starved, not merely above target. Average utilisation is the trace's total demand over its total
serving capacity at 100%. At minute 0 each policy starts with its controllers already serving.

``volume_iops`` (the volumes' provisioned IOPS in total; default None: not modelled) is what the
array can deliver at most, whatever its controllers (io2 Multi-Attach): the planner gets it as
ScaleArray's PlanScale does, and the oracle and static-for-peak never run a controller beyond
``capacity.volume_controllers`` either (the same functions).
"""

import csv
import io
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from vsa_core.alarm_tuning import (
    HIGH_DATAPOINTS_TO_ALARM,
    HIGH_EVALUATION_PERIODS,
    LOW_DATAPOINTS_TO_ALARM,
    LOW_EVALUATION_PERIODS,
    SCALE_IN_HYSTERESIS,
)
from vsa_core.arrays.capacity import (
    controllers_needed,
    deliverable_iops,
    owner_controllers,
    volume_controllers,
)
from vsa_core.arrays.plan import alarm_thresholds
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT, ArraySpec
from vsa_core.scaling import forecast as forecasting
from vsa_core.scaling.planner import CHURN_LIMIT, REVERSAL_MINUTES, PlanInput, ScaleDecision, plan
from vsa_core.scaling.rules import rearm_after
from vsa_core.scaling.tuning import DEFAULT_BOOT_MINUTES, planner_inputs

Trigger = Literal["alarms", "alarms-rearmed", "every-minute"]
Model = Literal["deployed", "alarms-rearmed", "alarms", "every-minute"]


@dataclass(frozen=True)
class ModelChoice:
    """What the replay models: how ScaleArray is started, and whether it plans with the
    forecast floor."""

    trigger: Trigger
    forecast: bool
    description: str


MODELS: dict[Model, ModelChoice] = {
    "deployed": ModelChoice(
        "alarms-rearmed",
        True,
        "as deployed: ScaleArray started by the alarms, re-armed after every run, planning with "
        "the forecast floor the health check builds (from the trace's own history) and its "
        "scheduled look-ahead",
    ),
    "alarms-rearmed": ModelChoice(
        "alarms-rearmed", False, "the alarms re-armed after every run, without the forecast floor"
    ),
    "alarms": ModelChoice(
        "alarms", False, "the alarms never re-armed (events only on a change of state), no forecast floor"
    ),
    "every-minute": ModelChoice(
        "every-minute", False, "ScaleArray every minute, whatever the alarms say, no forecast floor"
    ),
}
"""The models ``vsactl simulate --model`` replays; ``deployed`` is the default."""

RECENT_MINUTES = 15
"""How many one-minute demand samples before the current one ScaleArray reads (GetMetricData)
and gives the planner as ``recent_demand``."""

REARM_SECONDS = 60
"""ScaleArray's base re-arm pause as deployed (``AlarmRearmSeconds``)."""
DEFAULT_DRAIN_MINUTES = 2
"""Disconnect the controller's path on every host, then terminate."""
DEFAULT_PRICE_PER_HOUR = 1.512
"""USD per controller-hour: a parameter (set it to the launch template's instance price)."""
EPOCH = datetime(2026, 1, 5, tzinfo=UTC)
"""Minute 0 of every replay (a Monday, 00:00 UTC): only differences of it matter."""


def spread_volumes(count: int = MULTI_ATTACH_LIMIT) -> list[dict[str, str]]:
    """``count`` existing volumes (spec form): an array whose IO is spread so that, with one owner
    per volume, as many controllers carry it."""
    return [{"volumeId": f"vol-{i:017x}"} for i in range(count)]


def default_spec() -> ArraySpec:
    """The array simulated when no spec is given: min 2, max 16 controllers of 260,000 IOPS, 70%
    target utilisation, the model's default cooldowns (scale-out 60 s, scale-in 180 s), and the
    defaults of everything else: with one owner controller per volume (``fencing``), 16 volumes,
    so that every controller can carry IO."""
    return ArraySpec.model_validate(
        {
            "arrayId": "simulated",
            "availabilityZone": "us-east-1a",
            "volumes": spread_volumes(),
            "controllers": {"instanceType": "r5b.24xlarge", "imageId": "ami-00000000000000000"},
            "minControllers": 2,
            "maxControllers": MULTI_ATTACH_LIMIT,
            "perControllerIops": 260_000,
            "targetUtilisation": 0.7,
        }
    )


def read_trace(text: str) -> tuple[float, ...]:
    """IOPS per minute from CSV text with the header ``minute,iops`` and minutes 0, 1, 2, … in order."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [c.strip() for c in rows[0]] != ["minute", "iops"]:
        raise ValueError("a trace is CSV with the header 'minute,iops'")
    demand: list[float] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            minute, iops = int(row[0]), float(row[1])
        except (IndexError, ValueError) as e:
            raise ValueError(f"line {line}: expected 'minute,iops' numbers, got {','.join(row)!r}") from e
        if minute != len(demand):
            raise ValueError(
                f"line {line}: minute {minute}, expected {len(demand)} (one row a minute, in order)"
            )
        if not iops >= 0 or iops == float("inf"):
            raise ValueError(f"line {line}: IOPS must be a non-negative number, got {row[1]}")
        demand.append(iops)
    if not demand:
        raise ValueError("the trace has no minutes")
    return tuple(demand)


def write_trace(demand: Sequence[float]) -> str:
    """The CSV text ``read_trace`` reads (IOPS rounded to whole numbers)."""
    return "minute,iops\n" + "".join(f"{minute},{round(iops)}\n" for minute, iops in enumerate(demand))


@dataclass(frozen=True)
class Result:
    """One policy's replay of a trace: per minute, controllers serving and controllers billed."""

    policy: str
    demand: tuple[float, ...]
    serving: tuple[int, ...]
    billed: tuple[int, ...]
    per_controller_iops: int
    price_per_hour: float
    scalings: int = 0
    """Scale-outs plus scale-ins (0 for the references' bookkeeping)."""
    decisions: tuple[ScaleDecision, ...] = field(default=(), repr=False)
    """Every decision that changed the count (planner only)."""
    volume_iops: int | None = None
    """The volumes' provisioned IOPS in total (None: not modelled)."""

    @property
    def minutes(self) -> int:
        return len(self.demand)

    @property
    def controller_hours(self) -> float:
        return sum(self.billed) / 60

    @property
    def cost(self) -> float:
        return self.controller_hours * self.price_per_hour

    @property
    def average_utilisation(self) -> float:
        capacity = sum(deliverable_iops(s, self.per_controller_iops, self.volume_iops) for s in self.serving)
        return sum(self.demand) / capacity if capacity else 0.0

    @property
    def under_provisioned_minutes(self) -> int:
        return sum(
            d > deliverable_iops(s, self.per_controller_iops, self.volume_iops)
            for d, s in zip(self.demand, self.serving, strict=True)
        )

    @property
    def under_provisioned_share(self) -> float:
        return self.under_provisioned_minutes / self.minutes

    @property
    def peak_controllers(self) -> int:
        return max(self.billed)

    @property
    def scalings_per_hour(self) -> float:
        return self.scalings / (self.minutes / 60)

    @property
    def busiest_hour(self) -> int:
        """The most scalings in one clock hour of the replay (churn: the planner's hysteresis,
        ``planner.SETTLE_MINUTES``, bounds the flaps in it)."""
        per_hour: dict[str, int] = {}
        for decision in self.decisions:
            hour = (decision.now or "")[:13]
            per_hour[hour] = per_hour.get(hour, 0) + 1
        return max(per_hour.values(), default=0)

    @property
    def reversals(self) -> int:
        """Scale-outs that came within ``planner.REVERSAL_MINUTES`` of the scale-in before them
        (flaps)."""
        flaps = 0
        for before, after in itertools.pairwise(self.decisions):
            if before.action == "scale-in" and after.action == "scale-out" and before.now and after.now:
                gap = datetime.fromisoformat(after.now) - datetime.fromisoformat(before.now)
                flaps += gap <= timedelta(minutes=REVERSAL_MINUTES)
        return flaps


def _needed(spec: ArraySpec, demand: float, volume_iops: int | None = None) -> int:
    ceiling = min(spec.max_controllers, MULTI_ATTACH_LIMIT)
    if spec.fencing == "reservations":
        ceiling = min(ceiling, owner_controllers(len(spec.volumes)))  # as the planner's bounds
    if volume_iops is not None:
        ceiling = min(
            ceiling, volume_controllers(volume_iops, spec.per_controller_iops, spec.target_utilisation)
        )
    return max(
        spec.min_controllers,
        min(ceiling, controllers_needed(demand, spec.per_controller_iops, spec.target_utilisation)),
    )


@dataclass(frozen=True)
class RunState:
    """What a ScaleArray run reads besides the demand: the desired count, its clock, the last
    scale-out and scale-in, the controllers booting or draining, the changes of the count in
    the last hour (the run's recorded decisions)."""

    desired: int
    now: datetime
    last_scale_out_at: datetime | None = None
    last_scale_in_at: datetime | None = None
    in_flight: int = 0
    recent_scalings: tuple[datetime, ...] = ()


def run_decision(  # noqa: PLR0913 (the trace, the minute, the run's state, and the replay's options)
    spec: ArraySpec,
    demand: Sequence[float],
    t: int,
    state: RunState,
    *,
    scale_in_headroom: float = SCALE_IN_HYSTERESIS,
    volume_iops: int | None = None,
    floor: forecasting.Floor | None = None,
    by_high_alarm: bool = True,
) -> ScaleDecision:
    """The decision of a ScaleArray run whose newest minute of demand is minute ``t`` of the
    trace, as PlanScale makes it: that minute as the demand, the ``RECENT_MINUTES`` before it as
    the recent demand (ReadDemand's GetMetricData window), the deployed tuning
    (``planner_inputs`` at the deployed boot allowance, whatever boot the replay models: the
    product does not know how long a controller boots), the volumes' IOPS, the floor, and
    whether the high alarm started the run (``PlanInput.by_high_alarm``)."""
    tuning = planner_inputs(spec)
    return plan(
        PlanInput(
            spec,
            demand[t],
            state.desired,
            now=state.now,
            last_scale_out_at=state.last_scale_out_at,
            last_scale_in_at=state.last_scale_in_at,
            in_flight=state.in_flight,
            recent_scalings=state.recent_scalings,
            recent_demand=demand[max(0, t - RECENT_MINUTES) : t],
            lead_minutes=tuning["lead_minutes"],
            scale_in_headroom=scale_in_headroom,
            sustained_minutes=tuning["sustained_minutes"],
            volume_iops=volume_iops,
            forecast=floor,
            by_high_alarm=by_high_alarm,
        )
    )


class Floors:
    """The forecast floor at each minute of a trace as the health check builds it: the trace's
    own history in ``BUCKET_MINUTES`` buckets, the last ``HISTORY_DAYS`` of it before the minute,
    looking the deployed boot allowance plus one look-ahead period ahead."""

    def __init__(self, spec: ArraySpec, demand: Sequence[float]) -> None:
        self._spec = spec
        self._first, self._history = forecasting.buckets(demand, EPOCH + timedelta(minutes=len(demand)))
        self._keep = forecasting.HISTORY_DAYS * 24 * 60 // forecasting.BUCKET_MINUTES
        self._horizon = forecasting.horizon_minutes(DEFAULT_BOOT_MINUTES, forecasting.LOOKAHEAD_MINUTES)

    def at(self, t: int) -> forecasting.Floor:
        now = EPOCH + timedelta(minutes=t)
        end = forecasting.bucket_index(now) - self._first
        start = max(0, end - self._keep)
        return forecasting.floor(
            self._first + start,
            self._history[start : max(0, end)],
            now,
            horizon_minutes=self._horizon,
            per_controller_iops=self._spec.per_controller_iops,
            target_utilisation=self._spec.target_utilisation,
            min_controllers=self._spec.min_controllers,
        )


# The minute loop replays the whole control plane (boot and drain queues, the alarms and their
# re-arming, the look-ahead, the planner) over state every stage of it updates, and each keyword is
# an option of `vsactl simulate` and the benchmark. Not split yet: splitting it needs a simulation
# state object, checked against `make bench` giving the same figures.
def simulate_planner(  # noqa: C901, PLR0913, PLR0915
    spec: ArraySpec,
    demand: Sequence[float],
    *,
    boot_minutes: int = DEFAULT_BOOT_MINUTES,
    drain_minutes: int = DEFAULT_DRAIN_MINUTES,
    price_per_hour: float = DEFAULT_PRICE_PER_HOUR,
    trigger: Trigger = "alarms",
    scale_in_headroom: float = SCALE_IN_HYSTERESIS,
    volume_iops: int | None = None,
    forecast: bool = False,
) -> Result:
    """The control plane replayed on ``demand`` (see the module's docstring for the model).

    ``forecast``: the forecast floor as deployed (``vsa_core.scaling.forecast.floor``, over the
    last ``HISTORY_DAYS`` of the trace before the minute): every run plans with it, and every
    ``LOOKAHEAD_MINUTES`` the look-ahead starts a run (as the high alarm's) when the floor is
    above the desired count."""
    if boot_minutes < 0 or drain_minutes < 0:
        raise ValueError("boot and drain take 0 or more minutes")
    serving = _needed(spec, demand[0], volume_iops)
    desired = serving  # what the registry holds: serving + booting
    booting: list[int] = []  # minute each serves from
    draining: list[int] = []  # minute each is gone at
    last_out: datetime | None = None
    last_in: datetime | None = None
    serving_log: list[int] = []
    billed_log: list[int] = []
    changes: list[ScaleDecision] = []
    changed_at: list[datetime] = []  # when each change was decided: the churn limit's window
    alarms = Alarms(spec, demand)
    rearm_at: dict[str, int] = {}  # alarm kind -> minute ScaleArray sets it back to OK
    floors = Floors(spec, demand)
    scheduled: dict[int, tuple[str, forecasting.Floor]] = {}  # minute -> a look-ahead's run due then

    def floor_at(t: int) -> forecasting.Floor | None:
        return floors.at(t) if forecast else None

    for t in range(len(demand)):
        serving += sum(1 for ready in booting if ready <= t)
        booting = [ready for ready in booting if ready > t]
        draining = [gone for gone in draining if gone > t]
        for kind, due in list(rearm_at.items()):
            if due <= t:
                alarms.rearm(kind)
                del rearm_at[kind]
        # one ScaleArray run per event (the scaling lock serialises them); a run that changes the
        # count moves the thresholds, and CloudWatch re-evaluates the datapoints it holds at once
        fired = ["every-minute"] if trigger == "every-minute" else alarms.evaluate(t, desired)
        looking = t % forecasting.LOOKAHEAD_MINUTES == 0
        now = EPOCH + timedelta(minutes=t)
        floor = floor_at(t) if forecast and (fired or looking) else None
        if floor is not None and looking and not fired:
            # the scheduled look-ahead starts ScaleArray as the high alarm would (a surge ahead)
            # or the low one (a cycle's fall: a run a minute from the fall to the next look-ahead),
            # exactly as the health check decides
            started, _ = forecasting.lookahead(
                floor, desired, spec.max_controllers, None, now, spec.min_controllers
            )
            scheduled = {}
            if started is not None:
                for run in forecasting.lookahead_runs(floor, started, desired, now):
                    scheduled[int((run - EPOCH).total_seconds() // 60)] = (started, floor)
        lookahead_run = False
        if not fired and t in scheduled:
            kind_due, floor = scheduled[t]
            fired, lookahead_run = [kind_due], True
        if floor is not None:  # what PlanScale does with the stored floor and ReadDemand's minutes
            floor = floor.in_force(now, demand[t], demand[max(0, t - RECENT_MINUTES) : t])
        for _ in range(_RUNS_PER_MINUTE):
            if not fired:
                break
            kind = fired.pop(0)
            now = EPOCH + timedelta(minutes=t)
            state = RunState(
                desired,
                now,
                last_out,
                last_in,
                in_flight=len(booting) + len(draining),
                recent_scalings=tuple(changed_at[-CHURN_LIMIT:]),
            )
            decision = run_decision(
                spec,
                demand,
                t,
                state,
                scale_in_headroom=scale_in_headroom,
                volume_iops=volume_iops,
                floor=floor,
                # every-minute runs stand for no alarm: they plan as the alarms' runs did before
                by_high_alarm=trigger == "every-minute" or (kind == "high" and not lookahead_run),
            )
            lookahead_run = False  # the runs after it in this minute are the alarms' own
            added = decision.desired_controllers - desired
            if added > 0:
                if boot_minutes == 0:
                    serving += added
                else:
                    booting += [t + boot_minutes] * added
                last_out = now
            elif added < 0:
                removed = min(-added, serving)  # never cancels a boot: nothing scales while one is in flight
                serving -= removed
                if drain_minutes:
                    draining += [t + drain_minutes] * removed
                last_in = now
            if added:
                changes.append(decision)
                changed_at.append(now)
            desired = decision.desired_controllers
            if trigger == "alarms-rearmed":
                rearm_at[kind] = t + rearm_minutes(decision)
            if added and trigger != "every-minute":
                fired += alarms.evaluate(t, desired)
        serving_log.append(serving)
        billed_log.append(serving + len(booting) + len(draining))
    return Result(
        policy="planner (deployed)" if forecast and trigger == "alarms-rearmed" else f"planner ({trigger})",
        demand=tuple(demand),
        serving=tuple(serving_log),
        billed=tuple(billed_log),
        per_controller_iops=spec.per_controller_iops,
        price_per_hour=price_per_hour,
        scalings=len(changes),
        decisions=tuple(changes),
        volume_iops=volume_iops,
    )


_RUNS_PER_MINUTE = 3
"""At most this many ScaleArray runs in one simulated minute (an event, then the events of the
re-evaluation after the thresholds moved): a run that scales is followed by holds (in flight)."""


def rearm_minutes(decision: ScaleDecision | None, base_seconds: int = REARM_SECONDS) -> int:
    """Whole minutes after a run its alarm is back to OK (``rules.rearm_after``, at least the
    next evaluation)."""
    return max(1, math.ceil(rearm_after(decision, base_seconds) / 60))


class Alarms:
    """The array's two CloudWatch alarms as CloudWatch runs them: each is OK or ALARM; once a
    minute, and right after PutMetricAlarm changed its threshold, it compares the datapoints it
    holds with its threshold: ALARM when at least ``DatapointsToAlarm`` of the last
    ``EvaluationPeriods`` breach, OK otherwise. A missing minute (``None``) is treated as the
    product configures it (``arrays.plan.alarm_params``): not breaching for the high alarm,
    breaching for the low one above minControllers (no IO), not breaching at it. Only a change of
    state emits an event, and only a change to ALARM starts ScaleArray: an alarm that stays in
    ALARM starts nothing more, unless ScaleArray re-arms it (SetAlarmState OK: the next
    evaluation goes back to ALARM if the datapoints still breach)."""

    def __init__(self, spec: ArraySpec, demand: Sequence[float | None]) -> None:
        self._spec, self._demand = spec, demand
        self.in_alarm = {"high": False, "low": False}

    def breaching(self, kind: str, t: int, desired: int) -> bool:
        """Whether ``kind``'s condition holds at minute ``t`` for ``desired`` controllers."""
        high, low = alarm_thresholds(self._spec, desired)
        periods, datapoints = (
            (HIGH_EVALUATION_PERIODS, HIGH_DATAPOINTS_TO_ALARM)
            if kind == "high"
            else (LOW_EVALUATION_PERIODS, LOW_DATAPOINTS_TO_ALARM)
        )
        window = self._demand[max(0, t - periods + 1) : t + 1]
        if kind == "high":
            hits = sum(1 for d in window if d is not None and d > high)
        else:
            hits = sum(1 for d in window if (d is None and low > 0) or (d is not None and d < low))
        return hits >= datapoints

    def evaluate(self, t: int, desired: int) -> list[str]:
        """Evaluate both alarms at minute ``t`` for ``desired`` controllers: the alarms that
        changed to ALARM (each an event)."""
        fired = []
        for kind in ("high", "low"):
            in_alarm = self.breaching(kind, t, desired)
            if in_alarm and not self.in_alarm[kind]:
                fired.append(kind)
            self.in_alarm[kind] = in_alarm
        return fired

    def rearm(self, kind: str) -> None:
        """SetAlarmState OK on ``kind`` (an alarm already OK stays OK)."""
        self.in_alarm[kind] = False


def simulate_oracle(
    spec: ArraySpec,
    demand: Sequence[float],
    *,
    boot_minutes: int = DEFAULT_BOOT_MINUTES,
    drain_minutes: int = DEFAULT_DRAIN_MINUTES,
    price_per_hour: float = DEFAULT_PRICE_PER_HOUR,
    volume_iops: int | None = None,
) -> Result:
    """Perfect foresight under the same delays (see the module's docstring)."""
    n = len(demand)
    needed = [_needed(spec, d, volume_iops) for d in demand]
    serving = [0] * n
    billed = [0] * n
    start_count = needed[0]
    for level in range(1, max(needed) + 1):
        runs: list[list[int]] = []  # [start, end) where this level must serve
        for t, count in enumerate(needed):
            if count >= level:
                if runs and runs[-1][1] == t:
                    runs[-1][1] = t + 1
                else:
                    runs.append([t, t + 1])
        merged: list[list[int]] = []
        for run in runs:
            if merged and run[0] - merged[-1][1] <= boot_minutes + drain_minutes:
                merged[-1][1] = run[1]  # keep it through the gap: cheaper than drain + boot
            else:
                merged.append(run)
        for start, end in merged:
            already_running = start == 0 and level <= start_count
            bill_from = start if already_running else max(0, start - boot_minutes)
            bill_to = end if end == n else min(n, end + drain_minutes)
            for t in range(start, end):
                serving[t] += 1
            for t in range(bill_from, bill_to):
                billed[t] += 1
    return Result(
        policy="oracle",
        demand=tuple(demand),
        serving=tuple(serving),
        billed=tuple(billed),
        per_controller_iops=spec.per_controller_iops,
        price_per_hour=price_per_hour,
        volume_iops=volume_iops,
    )


def simulate_static(
    spec: ArraySpec,
    demand: Sequence[float],
    *,
    price_per_hour: float = DEFAULT_PRICE_PER_HOUR,
    volume_iops: int | None = None,
) -> Result:
    """Sized once for the trace's peak at target utilisation (what an on-premises array does)."""
    peak = _needed(spec, max(demand), volume_iops)
    return Result(
        policy="static for peak",
        demand=tuple(demand),
        serving=(peak,) * len(demand),
        billed=(peak,) * len(demand),
        per_controller_iops=spec.per_controller_iops,
        price_per_hour=price_per_hour,
        volume_iops=volume_iops,
    )


@dataclass(frozen=True)
class Comparison:
    planner: Result
    oracle: Result
    static: Result

    @property
    def results(self) -> tuple[Result, Result, Result]:
        return (self.planner, self.oracle, self.static)


# The same keyword options as `simulate_planner`, passed on to the planner, the oracle and
# static-for-peak so the three see the same delays and price.
def compare(  # noqa: PLR0913
    spec: ArraySpec,
    demand: Sequence[float],
    *,
    boot_minutes: int = DEFAULT_BOOT_MINUTES,
    drain_minutes: int = DEFAULT_DRAIN_MINUTES,
    price_per_hour: float = DEFAULT_PRICE_PER_HOUR,
    model: Model = "deployed",
    volume_iops: int | None = None,
) -> Comparison:
    """The planner (as ``model`` says, by default as deployed), the oracle and static-for-peak
    on one trace, with the same delays and price."""
    if not demand:
        raise ValueError("the trace has no minutes")
    chosen = MODELS[model]
    return Comparison(
        planner=simulate_planner(
            spec,
            demand,
            boot_minutes=boot_minutes,
            drain_minutes=drain_minutes,
            price_per_hour=price_per_hour,
            trigger=chosen.trigger,
            volume_iops=volume_iops,
            forecast=chosen.forecast,
        ),
        oracle=simulate_oracle(
            spec,
            demand,
            boot_minutes=boot_minutes,
            drain_minutes=drain_minutes,
            price_per_hour=price_per_hour,
            volume_iops=volume_iops,
        ),
        static=simulate_static(spec, demand, price_per_hour=price_per_hour, volume_iops=volume_iops),
    )
