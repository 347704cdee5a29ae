"""The simulator: hand examples, the references, and ``vsactl simulate``."""

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from vsactl.main import SimulationModel, app

from vsa_core.alarm_tuning import SCALE_IN_HYSTERESIS
from vsa_core.scaling.planner import CHURN_LIMIT, CHURN_WINDOW_MINUTES, ScaleDecision, controllers_needed
from vsa_core.scaling.simulator import (
    EPOCH,
    MODELS,
    RunState,
    compare,
    default_spec,
    read_trace,
    run_decision,
    simulate_oracle,
    simulate_planner,
    simulate_static,
    write_trace,
)
from vsa_core.scaling.tuning import planner_inputs

ROOT = Path(__file__).resolve().parents[2]
SPEC = default_spec()  # 2..16 controllers of 260,000 IOPS at 70%: one serves 182,000 at target
PER = 260_000


@pytest.mark.parametrize("trigger", ["alarms", "every-minute"])
def test_a_flat_trace_needs_no_scaling(trigger: str):
    # Given 3 hours of a steady 500,000 IOPS (3 controllers at target)
    demand = [500_000.0] * 180
    # When replayed
    result = simulate_planner(SPEC, demand, trigger=trigger)  # type: ignore[arg-type]
    # Then the planner keeps 3 controllers throughout, never starved
    assert result.scalings == 0
    assert set(result.serving) == {3}
    assert result.controller_hours == pytest.approx(9.0)
    assert result.under_provisioned_minutes == 0


def test_a_step_up_is_served_after_the_boot_delay():
    # Given 30 minutes at 300,000 IOPS (2 controllers), then a step to 1,000,000 (6 at target)
    demand = [300_000.0] * 30 + [1_000_000.0] * 60
    # When planned every minute with a 5-minute boot
    result = simulate_planner(SPEC, demand, trigger="every-minute", boot_minutes=5)
    # Then the scale-out is decided at minute 30 and serves from minute 35
    assert result.serving[34] == 2
    assert result.serving[35] == 6
    assert result.billed[30] == 6  # booting controllers are billed
    # And exactly the 5 boot minutes are starved (1,000,000 > 2 x 260,000)
    assert result.under_provisioned_minutes == 5
    assert result.decisions[0].action == "scale-out"


def test_with_alarms_the_step_is_seen_after_two_minutes():
    demand = [300_000.0] * 30 + [1_000_000.0] * 60
    result = simulate_planner(SPEC, demand, trigger="alarms", boot_minutes=5)
    # high alarm in ALARM at minute 31 (2 of 2 minutes above: 30, 31), then the 5-minute boot
    assert result.serving[35] == 2
    assert result.serving[36] == 6
    assert result.under_provisioned_minutes == 6


def test_a_replay_plans_with_the_deployed_tuning_whatever_boot_it_models():
    # Given a climb of 40,000 IOPS a minute from 300,000 (a trend the planner leads)
    demand = [300_000.0] * 20 + [300_000.0 + 40_000.0 * i for i in range(1, 30)]
    deployed_lead = planner_inputs(SPEC)["lead_minutes"]  # what PlanScale leads by
    for boot in (1, 2, 5, 9):
        # When replayed with controllers that boot in `boot` minutes
        result = simulate_planner(SPEC, demand, trigger="every-minute", boot_minutes=boot)
        # Then every decision led the trend as the deployed PlanScale does (the product does
        # not know how long a controller boots: only the replayed serving time changes)
        assert result.decisions
        assert {d.lead_minutes for d in result.decisions} == {deployed_lead}, boot


def test_a_run_decides_on_its_newest_minute_and_the_minutes_before_it():
    # Given a trace, and a run whose newest minute of demand is minute 40
    demand = [100_000.0 + 10_000.0 * i for i in range(60)]
    state = RunState(desired=2, now=EPOCH + timedelta(minutes=40, seconds=17))
    decision = run_decision(SPEC, demand, 40, state)
    # Then it took minute 40 as the demand and the 15 minutes before it as the recent demand
    assert decision.demand_iops == demand[40]
    assert decision.recent_samples == 15
    assert decision.sustained_iops == demand[40]
    assert decision.now == state.now.isoformat()
    # And a run at the trace's first minute has no recent demand
    assert run_decision(SPEC, demand, 0, state).recent_samples == 0


def test_an_alarm_left_in_alarm_starts_nothing_more_unless_scalearray_re_arms_it():
    # Given an array whose scale-in cooldown is 15 minutes, at 9 controllers since long ago
    slow = SPEC.model_copy(update={"scale_in_cooldown_seconds": 900})
    # And 30 minutes needing 9, a short bump needing 10 (a scale-out, which starts the scale-in
    # cooldown), then 3 hours at 200,000 IOPS (2 serve it)
    demand = [1_500_000.0] * 30 + [1_700_000.0] * 3 + [200_000.0] * 180
    # When the low alarm goes to ALARM within the cooldown, ScaleArray holds: the datapoints stay
    # below the threshold, the alarm stays in ALARM, and CloudWatch sends no new event
    deployed = simulate_planner(slow, demand, trigger="alarms")
    assert deployed.serving[-1] > slow.min_controllers
    assert [d.action for d in deployed.decisions] == ["scale-out"]
    # Re-armed after every run (SetAlarmState OK), it fires again once the cooldown is over: to min
    rearmed = simulate_planner(slow, demand, trigger="alarms-rearmed")
    assert rearmed.serving[-1] == slow.min_controllers
    assert rearmed.decisions[0].action == "scale-out"
    assert all(d.action == "scale-in" for d in rearmed.decisions[1:])


def test_controller_hours_on_a_hand_example():
    # Given 120 minutes: 60 at 2 controllers' worth, then 60 needing 4
    demand = [300_000.0] * 60 + [600_000.0] * 60
    # When the oracle serves it with a 5-minute boot and a 2-minute drain
    oracle = simulate_oracle(SPEC, demand, boot_minutes=5, drain_minutes=2)
    # Then it runs 2 for 120 minutes and 2 more from minute 55 (booting) to the end: 65 minutes each
    assert oracle.serving[:60] == (2,) * 60
    assert oracle.serving[60:] == (4,) * 60
    assert oracle.billed[55] == 4
    assert oracle.controller_hours == pytest.approx((2 * 120 + 2 * 65) / 60)
    assert oracle.cost == pytest.approx(oracle.controller_hours * 1.512)
    # And static-for-peak runs 4 all the time
    static = simulate_static(SPEC, demand)
    assert static.controller_hours == pytest.approx(8.0)
    assert static.peak_controllers == 4
    # Average utilisation: total demand over total serving capacity at 100%
    assert oracle.average_utilisation == pytest.approx((300_000 + 600_000) * 60 / ((2 + 4) * 60 * PER))


def test_the_oracle_keeps_a_controller_through_a_gap_shorter_than_boot_plus_drain():
    # Given a demand that needs a third controller twice, 4 minutes apart
    demand = [300_000.0] * 20 + [500_000.0] * 10 + [300_000.0] * 4 + [500_000.0] * 10 + [300_000.0] * 20
    oracle = simulate_oracle(SPEC, demand, boot_minutes=5, drain_minutes=2)
    # Then it keeps it (4 minutes < 5 + 2): one boot, one drain
    assert oracle.serving[30:34] == (3,) * 4
    assert oracle.controller_hours == pytest.approx((2 * 64 + (5 + 24 + 2)) / 60)


@pytest.mark.parametrize("name", ["diurnal-oltp", "spiky-batch", "slow-ramp", "flash-crowd"])
def test_on_every_trace_the_oracle_is_no_dearer_than_static_nor_than_the_planner_at_target(name: str):
    demand = read_trace((ROOT / "traces" / f"{name}.csv").read_text(encoding="utf-8"))
    comparison = compare(SPEC, demand)
    assert comparison.oracle.controller_hours <= comparison.static.controller_hours
    assert comparison.oracle.under_provisioned_minutes == 0
    assert comparison.static.under_provisioned_minutes == 0
    # the oracle serves every minute at target with exactly what that needs
    for d, s in zip(demand, comparison.oracle.serving, strict=True):
        assert s * PER * 0.7 >= d
    assert max(comparison.planner.billed) <= 16


def test_traces_round_trip_and_bad_traces_say_what_is_wrong():
    assert read_trace(write_trace([1.0, 2.0, 3.0])) == (1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="header"):
        read_trace("t,v\n0,1\n")
    with pytest.raises(ValueError, match="expected 1"):
        read_trace("minute,iops\n0,1\n2,1\n")
    with pytest.raises(ValueError, match="non-negative"):
        read_trace("minute,iops\n0,-5\n")
    with pytest.raises(ValueError, match="no minutes"):
        read_trace("minute,iops\n")


def test_vsactl_simulate_prints_the_figures_and_writes_a_png(tmp_path: Path):
    # Given a trace with a step up
    trace = tmp_path / "step.csv"
    trace.write_text(write_trace([300_000.0] * 60 + [1_000_000.0] * 120 + [300_000.0] * 60), encoding="utf-8")
    plot = tmp_path / "out.png"
    # When simulated
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--boot-minutes",
            "5",
            "--price-per-hour",
            "2",
            "--plot",
            str(plot),
        ],
    )
    # Then the three policies' figures are printed, the planner's as deployed (the default model,
    # named in the output), and the plot is a PNG
    assert result.exit_code == 0, result.output
    assert "model deployed: as deployed" in result.output
    for text in ("planner (deployed)", "oracle", "static for peak", "Ctrl-hours", "x oracle", "Under min"):
        assert text in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_vsactl_simulate_json_and_a_spec_file(tmp_path: Path):
    trace = tmp_path / "flat.csv"
    trace.write_text(write_trace([500_000.0] * 60), encoding="utf-8")
    spec_file = tmp_path / "array.yaml"
    spec_file.write_text(
        "arrayId: sim\navailabilityZone: us-east-1a\nvolumes: [{volumeId: vol-0a1b2c3d4e5f60001}]\n"
        "controllers: {instanceType: r5b.24xlarge, imageId: ami-0a1b2c3d4e5f60001}\n"
        "minControllers: 4\nmaxControllers: 6\n",
        encoding="utf-8",
    )
    asked = ["simulate", "--trace", str(trace), "--spec", str(spec_file), "--model", "every-minute"]
    result = CliRunner().invoke(app, [*asked, "-o", "json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    planner = answer["results"][0]
    assert answer["model"] == "every-minute"
    assert planner["policy"] == "planner (every-minute)"
    assert planner["controller_hours"] == pytest.approx(4.0)  # the floor of 4 for an hour
    assert planner["under_provisioned_minutes"] == 0


def test_vsactl_simulates_the_deployed_path_by_default(tmp_path: Path):
    # Given four days of a recurring afternoon surge: a history the forecast floor learns from
    day = [200_000.0] * 840 + [1_400_000.0] * 120 + [200_000.0] * 480
    trace = tmp_path / "daily.csv"
    trace.write_text(write_trace(day * 4), encoding="utf-8")
    # When simulated with no model named, and with each model named
    default = json.loads(CliRunner().invoke(app, ["simulate", "--trace", str(trace), "-o", "json"]).output)
    asked = ["simulate", "--trace", str(trace), "-o", "json", "--model"]
    named = {model: json.loads(CliRunner().invoke(app, [*asked, model]).output) for model in MODELS}
    # Then the default is the deployed path: the same figures as the simulator run with the deployed
    # trigger and the forecast floor, and not those of the same trigger without the floor
    assert set(MODELS) == {m.value for m in SimulationModel}
    assert default["model"] == "deployed"
    assert default["results"] == named["deployed"]["results"]
    deployed = simulate_planner(default_spec(), day * 4, trigger="alarms-rearmed", forecast=True)
    assert default["results"][0]["controller_hours"] == pytest.approx(deployed.controller_hours)
    without_floor = named["alarms-rearmed"]["results"][0]["controller_hours"]
    assert without_floor != pytest.approx(deployed.controller_hours)


def test_vsactl_simulate_refuses_a_bad_trace(tmp_path: Path):
    trace = tmp_path / "bad.csv"
    trace.write_text("when,load\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["simulate", "--trace", str(trace)])
    assert result.exit_code == 2
    assert "minute,iops" in result.output


def _scale_ins_past_the_churn_limit(decisions: tuple[ScaleDecision, ...]) -> list[int]:
    """The scale-ins (their index) that came after ``CHURN_LIMIT`` changes in the hour before."""
    changed = [datetime.fromisoformat(d.now or "") for d in decisions]
    hour = timedelta(minutes=CHURN_WINDOW_MINUTES)
    return [
        i
        for i, d in enumerate(decisions)
        if d.action == "scale-in" and len([at for at in changed[:i] if changed[i] - at < hour]) >= CHURN_LIMIT
    ]


def test_a_ramp_every_twenty_minutes_never_scales_in_for_a_seventh_change_in_an_hour():
    # Given 4 hours of a 5-minute climb from 200,000 to 3,000,000 IOPS and a 5-minute fall back,
    # every 20 minutes (the planner without the churn limit scaled in 21 times past it here)
    climb = [200_000 + 2_800_000 * p / 5 for p in range(5)]
    demand = (climb + [3_000_000 - 2_800_000 * p / 5 for p in range(5)] + [200_000.0] * 10) * 12
    result = simulate_planner(SPEC, demand, trigger="alarms-rearmed")
    # Then every scale-in waited until it was at most the sixth change in its hour
    assert _scale_ins_past_the_churn_limit(result.decisions) == []
    # while the array still climbs with every cycle (scale-outs are never held)
    assert sum(d.action == "scale-out" for d in result.decisions) >= 12


@settings(max_examples=40, deadline=None)
@given(
    demand=st.lists(st.floats(0.0, 3_500_000.0, allow_nan=False), min_size=1, max_size=240),
    trigger=st.sampled_from(["alarms", "alarms-rearmed", "every-minute"]),
)
def test_every_replayed_decision_keeps_the_planner_invariants(demand: list[float], trigger: str):
    result = simulate_planner(SPEC, demand, trigger=trigger)  # type: ignore[arg-type]
    assert max(result.billed) <= 16
    assert min(result.serving) >= 0
    for d in result.decisions:
        # nothing changes while a controller boots or drains; every decision says why
        assert d.in_flight == 0
        assert d.reason
        assert SPEC.min_controllers <= d.desired_controllers <= 16
        if d.action == "scale-in":
            # never below what the current demand, or any minute of the low alarm's window, needs
            assert d.desired_controllers < d.current_controllers
            assert d.desired_controllers >= min(d.needed_controllers, 16)
            assert d.sustained_iops is None or d.desired_controllers >= min(
                controllers_needed(
                    d.sustained_iops, d.per_controller_iops, d.target_utilisation * SCALE_IN_HYSTERESIS
                ),
                16,
            )
    # no scale-in is the seventh change of the count within an hour (scale-outs are never held)
    assert _scale_ins_past_the_churn_limit(result.decisions) == []
