"""Whether the data-plane tier's guests survive heavy NVMe/TCP traffic under this machine's QEMU.

    make dataplane-soak [SOAK_RUNS=3] [SOAK_SECONDS=180]     (root; the QEMU tier's prerequisites)
    python tools/dataplane_soak.py [--runs 3] [--seconds 180] [--block-size 1M]

Each run boots a fresh lab of the tier (``tests/dataplane/lab.py``: one controller, one host,
TCG), exports the volume with configure-target, connects the host with connect-path, and runs
fio on the host's NVMe device for ``--seconds``: random reads and writes of ``--block-size``,
direct, 16 in flight. Then it reads both guests' consoles. A run **died** when a guest's kernel
panicked; the first oops line and the RIP it names are printed. The tier's own scenarios are
paced (50 IOPS of 4 KiB); this is the unpaced, large-block load under which a TCG bug shows
within a minute, so a QEMU (or a guest kernel) can be tried before the tier relies on it.

Figures, not a test: nothing is asserted. Other work on the machine changes the guests'
interrupt timing; run it both quiet and beside a busy core. Every run is appended to
``.dataplane/soak-runs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core")]

from tests.dataplane.lab import STATE, GuestError, Lab, fresh_lab, kernel_package, qemu_version  # noqa: E402
from vsa_core import nvme  # noqa: E402

VOLUME = "vol-0a1b2c3d4e5f60799"
ARRAY = "soak"
HOST_NQN = nvme.default_host_nqn("i-0d0a7a91a2e0f00b9")
RUNS_LOG = STATE / "soak-runs.jsonl"


def oops(lab: Lab) -> dict[str, str]:
    """Each panicked guest → its first oops line and the first RIP after it."""
    found = {}
    for name, guest in lab.guests.items():
        console = (guest.dir / "console.log").read_text(errors="replace")
        if "Kernel panic" not in console:
            continue
        first = re.search(r"\] ((?:BUG|WARNING|traps|PANIC|Oops)[^\n]*)", console)
        rip = re.search(r"RIP: \S+ ([^\n]+)", console[first.start() if first else 0 :])
        found[name] = f"{first.group(1) if first else '?'} | RIP {rip.group(1) if rip else '?'}"
    return found


def soak(seconds: int, block_size: str) -> dict[str, Any]:
    lab = fresh_lab("run-soak", 1, VOLUME)
    started = time.monotonic()
    error = ""
    io_seconds = 0.0
    try:
        lab.boot_all()
        address = lab.links[0].controller_address
        lab.controller(0).document(
            "configure-target",
            ArrayId=ARRAY,
            Volumes=VOLUME,
            Slot="0",
            HostNqns=HOST_NQN,
            ListenAddress=address,
        ).ok()
        lab.host.document(
            "connect-path", ArrayId=ARRAY, Volumes=VOLUME, Address=address, HostNqn=HOST_NQN
        ).ok()
        device = lab.host.sh("ls /dev/nvme*n1 | head -1").ok().stdout.strip()
        io_started = time.monotonic()
        fio = lab.host.sh(
            f"fio --name=soak --filename={device} --rw=randrw --bs={block_size} --direct=1 --iodepth=16"
            f" --ioengine=libaio --time_based --runtime={seconds} --size=400M --output-format=terse",
            timeout=seconds + 300,
            name="fio",
        )
        io_seconds = time.monotonic() - io_started
        if fio.rc != 0:
            error = f"fio exited {fio.rc}"
    except GuestError as failed:
        error = str(failed).split("\n", 1)[0]
    finally:
        died = oops(lab)
        lab.close()
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "qemu": qemu_version(),
        "kernel": kernel_package(),
        "blockSize": block_size,
        "ioSeconds": round(io_seconds, 1),
        "runSeconds": round(time.monotonic() - started, 1),
        "load1": round(os.getloadavg()[0], 2),
        "died": died,
        "error": error,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=180)
    parser.add_argument("--block-size", default="1M")
    args = parser.parse_args()
    print(f"QEMU {qemu_version()}, guest kernel {kernel_package()}: {args.runs} runs of {args.seconds} s")
    deaths = 0
    for run in range(1, args.runs + 1):
        result = soak(args.seconds, args.block_size)
        with RUNS_LOG.open("a") as log:
            log.write(json.dumps(result) + "\n")
        deaths += bool(result["died"])
        outcome = "; ".join(f"{g}: {line}" for g, line in result["died"].items()) or "survived"
        load = result["load1"]
        print(f"run {run}: IO {result['ioSeconds']} s, load {load}: {outcome} {result['error']}".rstrip())
    print(f"{deaths} of {args.runs} runs lost a guest")


if __name__ == "__main__":
    main()
