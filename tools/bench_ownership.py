"""What one owner per volume costs in IOPS, against round-robin, on real kernels.

    make bench-ownership                       (root; the QEMU tier's prerequisites)
    python tools/bench_ownership.py [--rounds 3] [--seconds 15]

One lab of the data-plane tier (``tests/dataplane/lab.py``: Debian's 6.12 kernel under QEMU
TCG): two controllers c0 and c1, both attached to two volumes a and b, one host connected to
both controllers with native NVMe multipath. Two designs, alternated round by round on the same
guests:

* **round-robin** (``fencing: none``, configure-target without Owners): every controller serves
  every volume; the host spreads each volume's IO over both paths;
* **one owner per volume** (``fencing: reservations``' data path: Owners ``0,1``): volume a is
  served by c0 only, b by c1 only (the other controller's path inaccessible).

Per design and round, fio (4k, libaio, direct, queue depth 16 per volume) for ``--seconds`` each:
**per volume**: random reads, then random writes, on volume a alone; **per array**: the same on a
and b at once (their IOPS summed). Each figure carries the 1-minute load average: TCG guests
slow down with other work on the machine. Under TCG the guests' emulated CPUs bound the IOPS,
not EBS: the ratios say what one controller per volume costs when a controller is the
bottleneck, which is the case the capacity model (``capacity.owned_volume_iops``) describes.
Figures, not a test: nothing is asserted. The table goes to stdout, every figure to
``.dataplane/bench-ownership.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core")]

from tests.dataplane.lab import STATE, Lab, fresh_lab, missing_prerequisites  # noqa: E402
from vsa_core import nvme  # noqa: E402

ARRAY = "owners"
VOLUMES = {"a": "vol-0a1b2c3d4e5f60741", "b": "vol-0a1b2c3d4e5f60742"}
HOST_NQN = nvme.default_host_nqn("i-0d0a7a91a2e0f00c1")
STATE_SCRIPT = ROOT / "tests" / "dataplane" / "nvme_state.py"
DESIGNS = {"round-robin": "", "one owner per volume": "0,1"}
IMAGE_BYTES = 2 * 2**30
"""The lab's second volume is small by default: both get 2 GiB here."""


def configure(lab: Lab, owners: str) -> None:
    """Both controllers export both volumes: with ``owners``, inaccessible first where a volume
    is not served (c1 then c0, as a handover would), else round-robin."""
    volumes = ",".join(VOLUMES.values())
    for index in (1, 0):
        lab.controller(index).document(
            "configure-target",
            ArrayId=ARRAY,
            Volumes=volumes,
            Slot=str(index),
            HostNqns=HOST_NQN,
            ListenAddress=lab.links[index].controller_address,
            Owners=owners,
        ).ok()


def paths(lab: Lab, volume: str) -> dict[str, Any]:
    nqn = nvme.subsystem_nqn(ARRAY, volume)
    state: dict[str, Any] = json.loads(
        lab.host.sh(f"python3 {STATE_SCRIPT} {nqn}", timeout=180, name="nvme-state").ok().stdout
    )
    return state


def settle(lab: Lab, owners: str, timeout: float = 120) -> dict[str, str]:
    """Waits until every path is live and, with owners, exactly one per volume optimized (the
    ANA change reached the host); each volume's multipath device."""
    deadline = time.monotonic() + timeout
    while True:
        states = {name: paths(lab, volume) for name, volume in VOLUMES.items()}
        ana = {n: sorted(d["anaState"] for p in s["paths"] for d in p["disks"]) for n, s in states.items()}
        live = all(p["state"] == "live" for s in states.values() for p in s["paths"])
        wanted = ["inaccessible", "optimized"] if owners else ["optimized", "optimized"]
        if live and all(a == wanted for a in ana.values()):
            return {n: "/dev/" + s["heads"][0]["name"] for n, s in states.items()}
        if time.monotonic() > deadline:
            raise SystemExit(f"paths did not settle for owners={owners!r} in {timeout:.0f} s: {ana}")
        time.sleep(1)


def fio(lab: Lab, devices: list[str], rw: str, seconds: int) -> int:
    """IOPS of ``rw`` on ``devices`` at once (one job each, summed)."""
    jobs = " ".join(f"--name={Path(d).name} --filename={d}" for d in devices)
    done = lab.host.sh(
        f"fio --direct=1 --ioengine=libaio --rw={rw} --bs=4k --iodepth=16 --time_based"
        f" --runtime={seconds} --output-format=json {jobs}",
        timeout=seconds + 120,
        name=f"fio-{rw}",
    ).ok()
    report = json.loads(done.stdout[done.stdout.index("{") :])
    side = "read" if "read" in rw else "write"
    iops: float = sum(job[side]["iops"] for job in report["jobs"])
    return round(iops)


def measure(lab: Lab, design: str, seconds: int) -> dict[str, Any]:
    owners = DESIGNS[design]
    configure(lab, owners)
    devices = settle(lab, owners)
    figures: dict[str, Any] = {"design": design, "load": round(os.getloadavg()[0], 1)}
    for rw in ("randread", "randwrite"):
        figures[f"volume {rw}"] = fio(lab, [devices["a"]], rw, seconds)
        figures[f"array {rw}"] = fio(lab, list(devices.values()), rw, seconds)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=15)
    args = parser.parse_args()
    missing = missing_prerequisites()
    if missing:
        print(f"bench-ownership needs {', '.join(missing)} (bash tools/dataplane-install.sh, as root)")
        return 1
    lab = fresh_lab("run-ownership", 2, VOLUMES["a"], VOLUMES["b"])
    with (lab.root / "spare.img").open("wb") as image:
        image.truncate(IMAGE_BYTES)
    results: list[dict[str, Any]] = []
    try:
        lab.boot_all()
        configure(lab, "")
        for link in lab.links:
            lab.host.document(
                "connect-path",
                ArrayId=ARRAY,
                Volumes=",".join(VOLUMES.values()),
                Address=link.controller_address,
                HostNqn=HOST_NQN,
            ).ok()
        for _ in range(args.rounds):
            for design in DESIGNS:
                results.append(measure(lab, design, args.seconds))
                print(json.dumps(results[-1]), flush=True)
    finally:
        lab.close()
    (STATE / "bench-ownership.json").write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return 0


def table(results: list[dict[str, Any]]) -> str:
    keys = ["volume randread", "volume randwrite", "array randread", "array randwrite"]
    medians = {
        design: {k: statistics.median(r[k] for r in results if r["design"] == design) for k in keys}
        for design in DESIGNS
    }
    lines = [f"{'IOPS (median of rounds)':<26}" + "".join(f"{k:>18}" for k in keys)]
    for design, figures in medians.items():
        lines.append(f"{design:<26}" + "".join(f"{figures[k]:>18,.0f}" for k in keys))
    base, owned = medians["round-robin"], medians["one owner per volume"]
    lines.append(f"{'owner / round-robin':<26}" + "".join(f"{owned[k] / base[k]:>18.2f}" for k in keys))
    loads = [r["load"] for r in results]
    lines.append(f"load average during the rounds: {min(loads)}-{max(loads)}; rounds: {len(results) // 2}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
