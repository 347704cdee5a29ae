"""Benchmark the planner against the oracle and static-for-peak on every trace in traces/.

    make bench        # or: PYTHONPATH=layers/core .venv/bin/python tools/bench.py [--boot-minutes 5]

Prints figures only (it is not a test, and nothing here is timed). Per trace and policy:
controller-hours and their ratio to the oracle's, under-provisioned minutes (demand above the
serving controllers at 100%: IOPS starved) absolute and as a share of the trace, average
utilisation (total demand over total serving capacity at 100%), peak controllers, scalings and
cost. The target: planner <= 1.15 x the oracle's controller-hours with <= 1% under-provisioned
minutes on every trace; the last column says whether it holds. Planner rows: ``alarms`` (the
alarms as CloudWatch runs them: an event only on a change to ALARM), ``alarms-rearmed`` (the
same, with ScaleArray re-arming its alarms after every run) and ``every-minute``.
"""

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vsa_core.scaling.simulator import (
    DEFAULT_DRAIN_MINUTES,
    DEFAULT_PRICE_PER_HOUR,
    Result,
    default_spec,
    read_trace,
    simulate_oracle,
    simulate_planner,
    simulate_static,
)
from vsa_core.scaling.tuning import DEFAULT_BOOT_MINUTES

ROOT = Path(__file__).resolve().parents[1]
RATIO_TARGET = 1.15
UNDER_TARGET = 0.01


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", type=Path, default=ROOT / "traces")
    parser.add_argument("--boot-minutes", type=int, default=DEFAULT_BOOT_MINUTES)
    parser.add_argument("--drain-minutes", type=int, default=DEFAULT_DRAIN_MINUTES)
    parser.add_argument("--price-per-hour", type=float, default=DEFAULT_PRICE_PER_HOUR)
    args = parser.parse_args(argv)
    spec = default_spec()
    files = sorted(args.traces.glob("*.csv"))
    if not files:
        print(f"no traces (*.csv) in {args.traces}", file=sys.stderr)
        return 2
    table = Table(
        title=(
            f"Planner vs oracle vs static-for-peak: {spec.min_controllers}-{spec.max_controllers} "
            f"controllers x {spec.per_controller_iops:,} IOPS at {spec.target_utilisation:.0%}, "
            f"boot {args.boot_minutes} min, drain {args.drain_minutes} min, "
            f"${args.price_per_hour}/controller-hour"
        ),
        title_justify="left",
    )
    for column in [
        "Trace",
        "Policy",
        "Ctrl-hours",
        "x oracle",
        "Under min",
        "Under %",
        "Avg util",
        "Peak",
        "Scalings",
        "Cost $",
        "Target",
    ]:
        table.add_column(column, justify="left" if column in ("Trace", "Policy", "Target") else "right")
    holds = {"planner (alarms)": True, "planner (alarms-rearmed)": True}
    for path in files:
        demand = read_trace(path.read_text(encoding="utf-8"))
        delays = {"boot_minutes": args.boot_minutes, "drain_minutes": args.drain_minutes}
        oracle = simulate_oracle(spec, demand, price_per_hour=args.price_per_hour, **delays)
        results: list[Result] = [
            simulate_planner(spec, demand, trigger="alarms", price_per_hour=args.price_per_hour, **delays),
            simulate_planner(
                spec, demand, trigger="alarms-rearmed", price_per_hour=args.price_per_hour, **delays
            ),
            simulate_planner(
                spec, demand, trigger="every-minute", price_per_hour=args.price_per_hour, **delays
            ),
            oracle,
            simulate_static(spec, demand, price_per_hour=args.price_per_hour),
        ]
        for i, r in enumerate(results):
            ratio = r.controller_hours / oracle.controller_hours
            verdict = ""
            if r.policy.startswith("planner"):
                ok = ratio <= RATIO_TARGET and r.under_provisioned_share <= UNDER_TARGET
                if r.policy in holds:
                    holds[r.policy] = holds[r.policy] and ok
                verdict = "holds" if ok else "MISSED"
            table.add_row(
                f"{path.stem} ({r.minutes / 60:.0f} h)" if i == 0 else "",
                r.policy,
                f"{r.controller_hours:,.1f}",
                f"{ratio:.3f}",
                str(r.under_provisioned_minutes),
                f"{r.under_provisioned_share:.2%}",
                f"{r.average_utilisation:.1%}",
                str(r.peak_controllers),
                str(r.scalings),
                f"{r.cost:,.0f}",
                verdict,
                end_section=i == len(results) - 1,
            )
    Console(width=200).print(table)
    print(
        f"target: <= {RATIO_TARGET} x oracle controller-hours and <= {UNDER_TARGET:.0%} "
        "under-provisioned minutes on every trace"
    )
    for policy, ok in holds.items():
        print(f"  {policy}: {'holds' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
