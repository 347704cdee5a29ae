"""Fence-then-promote, run after run on real kernels: does any run leave a stale block?

    make dataplane-fencing-runs RUNS=50        (root; the QEMU tier's prerequisites)
    python tools/fencing_runs.py [--runs 50]

The scenario of ``tests/dataplane/test_stale_writes.py``'s second test, repeated on one lab
(``.dataplane/run-fencing``: two controllers and a host, Debian's 6.12 under QEMU TCG). Each run:
the volume owned by c0 (its ANA group optimized there, inaccessible on c1); the data-integrity
checker writing stamped blocks through the host's multipath device; c0 starts holding its writes
below nvmet and, with writes held, its link goes down; once the host has given that path up, c0
is fenced and only then c1 serves the group; the host writes on through c1, the writer stops, c0's
held writes are sent on (refused: c0 is fenced), and the read-back counts the stale blocks. Then
c0 is unfenced, reconnected and made the owner again for the next run.

**The lab's fence is a stand-in**: c0 exports the volume through two device-mapper layers, a
``delay`` device (the held writes) over a ``linear`` one, the gate. Fencing c0 loads the gate
with an ``error`` table, so every write c0 sends on from then fails, as EBS refuses a preempted
registrant's IO with a Reservation Conflict; QEMU's shared image has no reservations (docs/
dataplane.md, "What the lab cannot show"). The test's own stand-in (QEMU's ``drive_del``) cannot
be undone, so it allows one run per lab boot; the gate allows any number.

Every tenth run (``--control-every``) is a control: c1 is promoted without c0 being fenced, as
round-robin would, and it must find stale blocks, or the harness could not have seen them in the
fenced runs either.

Every run is appended to ``.dataplane/fencing-runs.jsonl`` (the runs of earlier invocations stay
there: the count is over all of them); the summary is printed at the end. Figures, then one
verdict: the exit status is 1 if any fenced run found a stale, torn or misplaced block, or the
writer saw an error, or a control run found no stale block.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core")]

from tests.dataplane import test_stale_writes as scenario  # noqa: E402
from tests.dataplane.lab import STATE, Lab, fresh_lab, kernel_package, missing_prerequisites, qemu_version  # noqa: E402

GATE = "vsa-gate"
DELAYED = scenario.DELAYED
RUNS_FILE = STATE / "fencing-runs.jsonl"
FIRST_BLOCK = 4096
BLOCKS = 512
BY_ID = f"nvme-Amazon_Elastic_Block_Store_{scenario.VOLUME.replace('-', '')}"


def build_stack(lab: Lab) -> None:
    """c0's export: the delay device over the gate over its EBS device; configure-target finds it
    under DeviceDir by the EBS device's own name. The guest has no udev: dmsetup makes the nodes."""
    device = f"/dev/disk/by-id/{BY_ID}"
    script = (
        f"set -e; modprobe dm-delay; size=$(blockdev --getsz {device});"
        f' dmsetup create {GATE} --table "0 $size linear {device} 0"; dmsetup mknodes {GATE};'
        f' dmsetup create {DELAYED} --table "0 $size delay /dev/mapper/{GATE} 0 0 /dev/mapper/{GATE} 0 0";'
        f" dmsetup mknodes {DELAYED}; mkdir -p {scenario.DELAYED_DIR};"
        f" ln -sfn /dev/mapper/{DELAYED} {scenario.DELAYED_DIR}/{BY_ID}"
    )
    lab.controller(0).sh(script, timeout=180, name="stack").ok()


def hold(lab: Lab, milliseconds: int) -> None:
    """c0's delay device holds each write ``milliseconds`` (reloading it first sends on what it
    holds, through the gate: refused while c0 is fenced)."""
    below = f"/dev/mapper/{GATE}"
    script = (
        f"set -e; size=$(blockdev --getsz {below}); dmsetup suspend {DELAYED};"
        f' dmsetup load {DELAYED} --table "0 $size delay {below} 0 0 {below} 0 {milliseconds}";'
        f" dmsetup resume {DELAYED}"
    )
    lab.controller(0).sh(script, timeout=180, name="hold").ok()


def gate(lab: Lab, fenced: bool) -> None:
    """The stand-in fence: the gate errors every IO (fenced) or passes it to the EBS device.
    Nothing is in flight in the gate when it is suspended: the delay device above holds it."""
    device = f"/dev/disk/by-id/{BY_ID}"
    table = '"0 $size error"' if fenced else f'"0 $size linear {device} 0"'
    script = (
        f"set -e; size=$(blockdev --getsz {device}); dmsetup suspend {GATE};"
        f" dmsetup load {GATE} --table {table}; dmsetup resume {GATE}"
    )
    lab.controller(0).sh(script, timeout=180, name="fence" if fenced else "unfence").ok()


def owned_by_c0(lab: Lab) -> str:
    """c1 inaccessible first, then c0 optimized (a handover's order); both paths live: the head."""
    scenario.configure(lab, 1, Owners="0")
    scenario.configure(lab, 0, Owners="0")
    scenario.connect(lab, 0)
    scenario.connect(lab, 1)
    scenario.wait_for_paths(lab, {0: ("live", "optimized"), 1: ("live", "inaccessible")}, timeout=180)
    return scenario.head_device(lab)


def one_run(lab: Lab, number: int, fence: bool = True) -> dict[str, Any]:
    device = owned_by_c0(lab)
    lab.host.sh(
        f"dd if=/dev/zero of={device} bs=4096 seek={FIRST_BLOCK} count={BLOCKS} oflag=direct status=none",
        timeout=180,
        name="zero",
    ).ok()
    name = f"run{number}"
    stop, state = lab.host.dir / f"{name}.stop", lab.host.dir / f"{name}.json"
    writer = lab.host.submit(
        f"python3 {scenario.CHECKER} write {device} --state {state} --first {FIRST_BLOCK}"
        f" --blocks {BLOCKS} --threads 8 --until-file {stop} --writer {name}",
        name=f"checker-{name}",
    )
    scenario.wait_for_writes(lab, 200, timeout=180, name=name)
    hold(lab, scenario.HOLD_MS)
    held = scenario.wait_for_held_writes(lab, timeout=180)
    lab.controller(0).qmp("set_link", name="link0", up=False)
    cut_at, cut = time.monotonic(), scenario.checker_state(lab, name)["writes"]
    scenario.wait_until_path_down(lab, 0, timeout=180)
    down_at = time.monotonic()
    if fence:
        gate(lab, fenced=True)
    fenced_at = time.monotonic()
    scenario.configure(lab, 1, Owners="0", Serving="1,0")
    promoted_at = time.monotonic()
    scenario.wait_for_paths(lab, {1: ("live", "optimized")}, timeout=180)
    scenario.wait_for_writes(lab, cut + scenario.AFTER_FAILOVER, timeout=900, name=name)
    stop.touch()
    summary = json.loads(lab.host.wait(writer, timeout=300).ok().stdout)
    hold(lab, 0)  # c0's held writes sent on: into the fenced gate
    verified = lab.host.sh(
        f"python3 {scenario.CHECKER} verify {device} --state {state}", timeout=300, name=f"verify-{name}"
    )
    report = json.loads(verified.stdout)
    # back to the start: c1 inaccessible again, c0 unfenced, reachable, reconnected
    scenario.configure(lab, 1, Owners="0")
    gate(lab, fenced=False)
    lab.controller(0).qmp("set_link", name="link0", up=True)
    return {
        "run": number,
        "fenced": fence,
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "heldWhenCut": held,
        "pathDownSeconds": round(down_at - cut_at, 1),
        "fenceToPromotedSeconds": round(promoted_at - fenced_at, 1),
        **{k: summary[k] for k in ("writes", "errorCount", "longestGapSeconds")},
        **{k: report[k] for k in (*scenario.COUNTS, "unknownCount")},
    }


def bad(run: dict[str, Any]) -> bool:
    """A fenced run with any stale, torn or misplaced block or a writer error; a control run (not
    fenced) without a stale block: then the harness could not see the hazard it is there for."""
    if not run.get("fenced", True):
        return run["staleCount"] == 0 or bool(run["tornCount"] or run["misplacedCount"])
    return any(run[k] for k in ("staleCount", "tornCount", "misplacedCount", "errorCount"))


def summarize(every: list[dict[str, Any]]) -> str:
    runs = [r for r in every if r.get("fenced", True)]
    controls = [r for r in every if not r.get("fenced", True)]
    gaps = sorted(r["longestGapSeconds"] for r in runs)
    downs = sorted(r["pathDownSeconds"] for r in runs)
    lines = [
        f"fenced runs: {len(runs)} (in {RUNS_FILE.relative_to(ROOT)})",
        f"fenced runs with a stale, torn or misplaced block, or a writer error: {sum(bad(r) for r in runs)}",
        f"stale blocks in all: {sum(r['staleCount'] for r in runs)}"
        f" of {sum(r['ackedBlocks'] for r in runs)} acknowledged blocks read back",
        f"writes held below c0 when its link went down: {sum(r['heldWhenCut'] for r in runs)} in all",
        f"the application's longest stall (writer's longest gap): median {statistics.median(gaps):.1f} s,"
        f" worst {gaps[-1]:.1f} s",
        f"link cut -> the host gave the path up: median {statistics.median(downs):.1f} s,"
        f" worst {downs[-1]:.1f} s",
        f"control runs (promoted without the fence): {len(controls)}, each expected to find stale blocks;"
        f" found them: {sum(not bad(r) for r in controls)}; stale blocks in all:"
        f" {sum(r['staleCount'] for r in controls)}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument(
        "--control-every",
        type=int,
        default=10,
        help="every Nth run promotes c1 without fencing c0, and must find stale blocks (0: never)",
    )
    args = parser.parse_args()
    missing = missing_prerequisites()
    if missing:
        print(f"fencing runs need {', '.join(missing)} (bash tools/dataplane-install.sh, as root)")
        return 1
    lab = fresh_lab("run-fencing", 2, scenario.VOLUME)
    try:
        lab.boot_all()
        build_stack(lab)
        kernel, qemu = kernel_package(), qemu_version()
        for number in range(1, args.runs + 1):
            control = args.control_every > 0 and number % args.control_every == 0
            run = {**one_run(lab, number, fence=not control), "kernel": kernel, "qemu": qemu}
            with RUNS_FILE.open("a") as runs:
                runs.write(json.dumps(run, sort_keys=True) + "\n")
            print(json.dumps(run, sort_keys=True), flush=True)
    finally:
        lab.close()
    every = [json.loads(line) for line in RUNS_FILE.read_text().splitlines() if line.strip()]
    print(summarize(every))
    return 1 if any(bad(r) for r in every) else 0


if __name__ == "__main__":
    sys.exit(main())
