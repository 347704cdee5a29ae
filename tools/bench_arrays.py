"""Many arrays per deployment (issue #16 item 5): what one event costs in registry reads and time
with 10 arrays and with 1,000, on the local cloud's DynamoDB.

    make bench-arrays      # starts the local cloud if none runs on $PORT, then runs this

Two registry tables are created on the local cloud exactly as template.yaml declares it (keys,
the ``instances`` index, TTL), one seeded with 10 arrays, the other with 1,000 (each: its SPEC,
4 serving controllers' slots, 30 scale decisions, 7 backup sets: the items
``tests/many_arrays.py`` writes as the control plane does), and deleted at the end. A mix of
events is replayed through the core functions that handle them (``tests/many_arrays.World``),
the two sizes taking turns event by event:

* an EC2 state change of a controller: on_controller_event (is it a controller?) then
  DrainController's Locate;
* an EC2 state change of any other instance of the region: on_controller_event only;
* a launch lifecycle action: on_controller_event, then BootstrapController's Prepare;
* a terminate lifecycle action: on_controller_event, then DrainController's Locate;
* an IOPS alarm: ScaleArray's ReadDemand and PlanScale (a scale-in: it reads the slots too).

Each event picks another array and instance every time. For every DynamoDB call: the operation,
the items it read (``ScannedCount`` for a Query or Scan) and its read request units by AWS's
rules from the items' sizes (moto reports a constant ``ConsumedCapacity`` per call, whatever it
read). Time is the event's wall time through those functions, DynamoDB on the local cloud and
the other services faked in-process. For comparison, two reads that do walk the table: a Scan
for the slot, which ``find_slot`` would make per state change without the index, and ``registry.all()``
(GET /arrays and the every-minute demand publisher: every array, not an event).

Prints figures and the 1,000 / 10 ratios; asserts nothing (the machines here are shared).
"""

import argparse
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core")]
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # the core's log lines, not the figures

from tests import many_arrays  # noqa: E402
from tests.infra.test_registry_table import create_table_arguments, time_to_live  # noqa: E402
from tests.many_arrays import Call, Recorder, World  # noqa: E402

console = Console(highlight=False, width=150)
SMALL, LARGE = 10, 1000
ITEMS_PER_ARRAY = 1 + many_arrays.CONTROLLERS + many_arrays.DECISIONS + many_arrays.BACKUPS


def events(world: World, arrays: int, n: int) -> dict[str, Callable[[], Any]]:
    """The n-th occurrence of each event among ``arrays`` arrays (another array each time)."""
    index = (n * 7919) % arrays  # a stride prime to the sizes: every array in turn, not in order
    slot = n % many_arrays.CONTROLLERS
    return {
        "EC2 state change, a controller": lambda: world.state_change(many_arrays.controller(index, slot)),
        "EC2 state change, another instance": lambda: world.state_change(many_arrays.foreign(n)),
        "launch lifecycle action": lambda: world.launch(index),
        "terminate lifecycle action": lambda: world.terminate(index),
        "IOPS alarm (ScaleArray's steps)": lambda: world.alarm(index),
    }


def baselines(world: World, arrays: int, n: int) -> dict[str, Callable[[], Any]]:
    index = (n * 7919) % arrays
    return {
        "before: find_slot by Scan (per state change)": lambda: many_arrays.scan_find_slot(
            world.dynamodb, world.table, many_arrays.controller(index, 1)
        ),
        "registry.all() (GET /arrays, publisher; not an event)": world.list_arrays,
    }


def measure(
    recorder: Recorder, cases: Callable[[int, int], dict[str, Callable[[], Any]]], rounds: int
) -> dict[int, dict[str, Any]]:
    """Each case ``rounds`` times at each size, the sizes taking turns (so the machine's load,
    which drifts, weighs on both alike): its calls (the last round's), items, units, median time."""
    found: dict[int, dict[str, dict[str, Any]]] = {SMALL: {}, LARGE: {}}
    for n in range(rounds):
        for size in (SMALL, LARGE):
            for name, run in cases(size, n).items():
                recorder.take()
                seconds, _ = many_arrays.timed(run)
                calls = recorder.take()
                entry = found[size].setdefault(name, {"seconds": [], "calls": calls})
                entry["seconds"].append(seconds)
                entry["calls"] = calls
    return {
        size: {
            name: {
                "calls": e["calls"],
                "items": sum(c.items_read for c in e["calls"]),
                "units": sum(c.read_units for c in e["calls"]),
                "ms": 1000 * statistics.median(e["seconds"]),
            }
            for name, e in by_name.items()
        }
        for size, by_name in found.items()
    }


def by_operation(calls: list[Call]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in calls:
        key = f"{c.operation}({c.index})" if c.index else c.operation
        out.setdefault(key, []).append(c.seconds)
    return out


def describe(calls: list[Call]) -> str:
    """``Query(instances) GetItem …``; a paginated Scan as ``Scan x51`` (51 pages)."""
    names = [f"{c.operation}({c.index})" if c.index else c.operation for c in calls]
    if len(names) > 1 and len(set(names)) == 1:
        return f"{names[0]} x{len(names)}"
    return " ".join(names)


def ratio(large: float, small: float) -> str:
    return f"{large / small:.2f}x" if small else "-"


def report(small: dict[str, Any], large: dict[str, Any], title: str) -> None:
    table = Table(title=title)
    for column in ("event", "DynamoDB calls", "items read", "read units", "ms (median)", "ratio"):
        table.add_column(column, justify="left" if column in ("event", "DynamoDB calls") else "right")
    for name in small:
        s, big = small[name], large[name]
        table.add_row(
            name,
            describe(s["calls"])
            if describe(s["calls"]) == describe(big["calls"])
            else f"{describe(s['calls'])} | {describe(big['calls'])}",
            f"{s['items']} → {big['items']}",
            f"{s['units']:g} → {big['units']:g}",
            f"{s['ms']:.1f} → {big['ms']:.1f}",
            f"items {ratio(big['items'], s['items'])}, time {ratio(big['ms'], s['ms'])}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=20, help="occurrences of each event per size (default 20)"
    )
    parser.add_argument("--keep", action="store_true", help="leave the table on the local cloud")
    args = parser.parse_args()
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint.startswith("http://127.0.0.1"):
        sys.exit(
            "bench-arrays runs against the local cloud: use `make bench-arrays` (AWS_ENDPOINT_URL unset)"
        )
    dynamodb = boto3.client("dynamodb")
    tables = {size: f"vsa-bench-arrays-{size}-{uuid.uuid4().hex[:6]}" for size in (SMALL, LARGE)}
    try:
        worlds, item_bytes = {}, {}
        for size, table in tables.items():
            dynamodb.create_table(**create_table_arguments(table))
            dynamodb.update_time_to_live(TableName=table, TimeToLiveSpecification=time_to_live())
            began = time.perf_counter()
            written = many_arrays.seed(dynamodb, table, range(size))
            item_bytes[size] = written / (size * ITEMS_PER_ARRAY)
            console.print(
                f"{size} arrays seeded in {time.perf_counter() - began:.1f} s: "
                f"{size * ITEMS_PER_ARRAY} items, {written / 1e6:.1f} MB"
            )
            worlds[size] = World(dynamodb, table)
        recorder = Recorder().attach(dynamodb)

        def hot(size: int, n: int) -> dict[str, Callable[[], Any]]:
            recorder.item_bytes = item_bytes[size]
            return events(worlds[size], size, n)

        def cold(size: int, n: int) -> dict[str, Callable[[], Any]]:
            recorder.item_bytes = item_bytes[size]
            return baselines(worlds[size], size, n)

        for size in (SMALL, LARGE):  # warm up: first calls, connection pools
            for run in hot(size, args.rounds).values():
                run()
        per_event = measure(recorder, hot, args.rounds)
        walking = measure(recorder, cold, 3)
        report(per_event[SMALL], per_event[LARGE], f"per event, {SMALL} → {LARGE} arrays (local cloud)")
        report(walking[SMALL], walking[LARGE], f"reads that walk the table, {SMALL} → {LARGE} arrays")
        per_op: dict[str, dict[int, list[float]]] = {}
        for size in (SMALL, LARGE):
            for entry in per_event[size].values():
                for key, seconds in by_operation(entry["calls"]).items():
                    per_op.setdefault(key, {}).setdefault(size, []).extend(seconds)
        console.print(
            "time per call (the last round's calls), median ms: "
            + "; ".join(
                f"{key} {1000 * statistics.median(v[SMALL]):.1f} → {1000 * statistics.median(v[LARGE]):.1f}"
                for key, v in per_op.items()
                if SMALL in v and LARGE in v
            )
        )
    finally:
        if not args.keep:
            for table in tables.values():
                with contextlib.suppress(dynamodb.exceptions.ResourceNotFoundException):
                    dynamodb.delete_table(TableName=table)


if __name__ == "__main__":
    main()
