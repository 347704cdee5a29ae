"""Many arrays per deployment (issue #16 item 5): what one event costs in registry reads and time
with 10 arrays and with 1,000, on the local cloud's DynamoDB.

    make bench-arrays      # starts the local cloud if none runs on $PORT, then runs this

A registry table is created on the local cloud exactly as template.yaml declares it (keys, the
``instances`` index, TTL), seeded with 10 arrays, then with 990 more (each: its SPEC, 4 serving
controllers' slots, 30 scale decisions, 7 backup sets: the items ``tests/many_arrays.py`` writes
as the control plane does), and deleted at the end. At each size, a mix of events is replayed
through the core functions that handle them (``tests/many_arrays.World``):

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
the other services faked in-process. For comparison, two reads that do walk the table: the Scan
``find_slot`` made before the index (per state change, until this change), and ``registry.all()``
(GET /arrays and the every-minute demand publisher: every array, not an event).

Prints figures and the 1,000 / 10 ratios; asserts nothing (the machines here are shared).
"""

import argparse
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
from vsa_core.settings import get_settings  # noqa: E402

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
    recorder: Recorder, cases: Callable[[int], dict[str, Callable[[], Any]]], rounds: int
) -> dict[str, Any]:
    """Each case ``rounds`` times: its calls (the last round's), items, units and median time."""
    found: dict[str, dict[str, Any]] = {}
    for n in range(rounds):
        for name, run in cases(n).items():
            recorder.take()
            seconds, _ = many_arrays.timed(run)
            calls = recorder.take()
            entry = found.setdefault(name, {"seconds": [], "calls": calls})
            entry["seconds"].append(seconds)
            entry["calls"] = calls
    return {
        name: {
            "calls": e["calls"],
            "items": sum(c.items_read for c in e["calls"]),
            "units": sum(c.read_units for c in e["calls"]),
            "ms": 1000 * statistics.median(e["seconds"]),
        }
        for name, e in found.items()
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
    name = f"vsa-bench-arrays-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(**create_table_arguments(name))
    dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=time_to_live())
    os.environ.update(
        VSA_TABLE_NAME=name,
        VSA_BOOTSTRAP_STATE_MACHINE_ARN="arn:aws:states:us-east-1:000000000000:stateMachine:bench-bootstrap",
        VSA_DRAIN_STATE_MACHINE_ARN="arn:aws:states:us-east-1:000000000000:stateMachine:bench-drain",
    )
    get_settings.cache_clear()
    try:
        world = World(dynamodb, name)
        recorder = Recorder().attach(dynamodb)
        results: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        table_bytes, table_items = 0, 0
        for size, indexes in ((SMALL, range(SMALL)), (LARGE, range(SMALL, LARGE))):
            began = time.perf_counter()
            table_bytes += many_arrays.seed(dynamodb, name, indexes)
            table_items += len(indexes) * ITEMS_PER_ARRAY
            recorder.item_bytes = table_bytes / table_items
            recorder.take()
            console.print(
                f"{size} arrays: {len(indexes)} seeded in {time.perf_counter() - began:.1f} s; "
                f"the table holds {table_items} items, {table_bytes / 1e6:.1f} MB"
            )
            for run in events(world, size, args.rounds).values():  # warm up: first calls, pools
                run()
            hot = measure(recorder, lambda n, size=size: events(world, size, n), args.rounds)
            cold = measure(recorder, lambda n, size=size: baselines(world, size, n), 3)
            results[size] = (hot, cold)
        report(results[SMALL][0], results[LARGE][0], f"per event, {SMALL} → {LARGE} arrays (local cloud)")
        report(results[SMALL][1], results[LARGE][1], f"reads that walk the table, {SMALL} → {LARGE} arrays")
        per_op: dict[str, dict[int, list[float]]] = {}
        for size in (SMALL, LARGE):
            for entry in results[size][0].values():
                for key, seconds in by_operation(entry["calls"]).items():
                    per_op.setdefault(key, {}).setdefault(size, []).extend(seconds)
        console.print(
            "time per call, median ms: "
            + "; ".join(
                f"{key} {1000 * statistics.median(v[SMALL]):.1f} → {1000 * statistics.median(v[LARGE]):.1f}"
                for key, v in per_op.items()
                if SMALL in v and LARGE in v
            )
        )
    finally:
        if not args.keep:
            dynamodb.delete_table(TableName=name)


if __name__ == "__main__":
    main()
