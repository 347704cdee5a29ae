"""How long host IO stalls when a controller fails, per failover setting, on real kernels.

    make bench-failover                                  (root; the QEMU tier's prerequisites)
    python tools/bench_failover.py [--rows k5 k2 ...] [--faults link freeze kill] [--quiet 30]

One lab of the data-plane tier (``tests/dataplane/lab.py``: Debian's 6.12 kernel, or the one
VSA_DATAPLANE_KERNEL names, under QEMU TCG, two controllers c0 and c1 configured by
configure-target, one host with native NVMe multipath, round-robin). For each row (a set of
host settings) the host's paths are connected anew with
that row's ``nvme connect`` options (``-k`` keep-alive timeout, ``-l`` ctrl-loss-tmo, ``-c``
reconnect delay; fast_io_fail_tmo through the controller's sysfs attribute, which nvme-cli 2.3's
``connect`` has no option for) and the row's ``nvme_core.io_timeout`` and
``net.ipv4.tcp_retries2``, then:

* **quiet**: fio write+verify for ``--quiet`` seconds, no fault: every path that left ``live``
  (the kernel's "starting error recovery", counted in the host's dmesg) is a false failover;
* one trial per fault on c1, under fio write+verify (``tests/dataplane``'s ``Fio``: 4k random
  writes at QD 4, each read back and verified, every completion logged):
  **link** (c1's eth0 down: its cable cut, no carrier change at the host, no FIN, no RST),
  **freeze** (SIGSTOP to c1's QEMU: the instance hangs), **kill** (SIGKILL to c1's QEMU: the
  instance is lost); the fault is held until the host's path to c1 leaves ``live``, then IO
  runs on c0 alone for 6 s, then fio stops. Figures: the **stall** (the longest gap between two
  IO completions), IO errors, verified reads, false failovers of c0's path during the fault.
  Then c1 returns (link up; SIGCONT; a new boot and configure-target) and the **reconnect** is
  timed: seconds until the host's path to c1 is live again by the kernel's own reconnect, or
  ``removed`` when ctrl-loss-tmo expired first (the path must be connected anew).

Each figure carries the machine's 1-minute load average when it was taken: other work shares
the 2 cores, and TCG guests slow down with it. Figures, not a test: nothing is asserted. The
table goes to stdout, every trial to ``.dataplane/bench-failover.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core")]

from tests.dataplane.conftest import VOLUME  # noqa: E402
from tests.dataplane.lab import STATE, Lab, kernel_package, missing_prerequisites  # noqa: E402
from tests.dataplane.test_dataplane import (  # noqa: E402
    HOST_NQN,
    NQN,
    Fio,
    configure,
    head_device,
    kernel_state,
)

# Each row: nvme connect's -k/-l/-c, the fast_io_fail_tmo sysfs attribute (-1: off, the
# kernel's default), nvme_core.io_timeout and net.ipv4.tcp_retries2 (15: the kernel's default).
BASE = {
    "kato": 5,
    "ctrlLossTmo": 60,
    "reconnectDelay": 2,
    "fastIoFailTmo": -1,
    "ioTimeout": 30,
    "tcpRetries2": 15,
}
ROWS: dict[str, dict[str, int]] = {
    "k5": BASE,  # the kernel's defaults (kato 5 s): the baseline the other rows are compared with
    "k3": {**BASE, "kato": 3},
    "k2": {**BASE, "kato": 2},
    "k1": {**BASE, "kato": 1},
    "k5-tcp3": {**BASE, "tcpRetries2": 3},  # TCP gives up after ~3 s of unacknowledged data
    "k5-io5": {**BASE, "ioTimeout": 5},  # an IO timing out starts the error recovery
    "k2-rd1-cl30-ff5": {**BASE, "kato": 2, "reconnectDelay": 1, "ctrlLossTmo": 30, "fastIoFailTmo": 5},
}
FAULTS = ("link", "freeze", "kill")
VICTIM, SURVIVOR = 1, 0
HOST_ID = HOST_NQN.rsplit(":", 1)[-1]


def load() -> float:
    return round(os.getloadavg()[0], 1)


def controllers(lab: Lab) -> dict[str, str]:
    """The host's NVMe controllers by controller address: {"10.77.1.1": "nvme1", ...}."""
    out = lab.host.sh(
        "for c in /sys/class/nvme/nvme*; do [ -e $c/address ] && echo ${c##*/} $(cat $c/address); done",
        name="ctrls",
    ).stdout
    found = {}
    for line in out.splitlines():
        name, _, address = line.partition(" ")
        match = re.search(r"traddr=([0-9.]+)", address)
        if match:
            found[match[1]] = name
    return found


def path_states(lab: Lab) -> dict[str, str]:
    found = {}
    for path in kernel_state(lab)["paths"]:
        match = re.search(r"traddr=([0-9.]+)", path["address"])
        if match:
            found[match[1]] = path["state"]
    return found


def connect_row(lab: Lab, row: dict[str, int]) -> None:
    """Every path anew with the row's settings (the kernel takes io_timeout when a controller's
    queues are made, keep-alive and ctrl-loss-tmo at connect)."""
    lab.host.sh(
        f"echo {row['tcpRetries2']} > /proc/sys/net/ipv4/tcp_retries2"
        f" && echo {row['ioTimeout']} > /sys/module/nvme_core/parameters/io_timeout"
        " && nvme disconnect-all; sleep 1",
        timeout=120,
        name="row-reset",
    ).ok()
    for index in (SURVIVOR, VICTIM):
        connect_path(lab, index, row)
    policy = "for s in /sys/class/nvme-subsystem/*; do echo round-robin > $s/iopolicy; done"
    lab.host.sh(policy, name="round-robin").ok()


def connect_path(lab: Lab, index: int, row: dict[str, int]) -> None:
    address = lab.links[index].controller_address
    lab.host.sh(
        f"nvme connect -t tcp -a {address} -s 4420 -n {NQN} --hostnqn {HOST_NQN} --hostid {HOST_ID}"
        f" -k {row['kato']} -l {row['ctrlLossTmo']} -c {row['reconnectDelay']}",
        timeout=120,
        name="connect",
    ).ok()
    name = controllers(lab)[address]
    if row["fastIoFailTmo"] >= 0:
        lab.host.sh(f"echo {row['fastIoFailTmo']} > /sys/class/nvme/{name}/fast_io_fail_tmo", name="ff").ok()
    wait_live(lab, index, 60)


def wait_live(lab: Lab, index: int, timeout: float) -> float | None:
    """Seconds until the host's path to controller ``index`` is live (None: not within timeout;
    the path may also be gone)."""
    address = lab.links[index].controller_address
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if path_states(lab).get(address) == "live":
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    return None


def recoveries(lab: Lab) -> dict[str, int]:
    """Error recoveries the host's kernel started since the last call, by controller address
    (dmesg, then cleared)."""
    names = {name: address for address, name in controllers(lab).items()}
    out = lab.host.sh("dmesg -c", name="dmesg").stdout
    counts: dict[str, int] = {}
    for line in out.splitlines():
        match = re.search(r"nvme (nvme\d+): starting error recovery", line)
        if match:
            address = names.get(match[1], match[1])
            counts[address] = counts.get(address, 0) + 1
    return counts


def quiet(lab: Lab, name: str, seconds: int) -> dict[str, Any]:
    recoveries(lab)
    fio = Fio(lab, name, head_device(kernel_state(lab)), rate_iops=0)  # unpaced: the load is the point
    lab.host.sh(f"sleep {seconds}", timeout=seconds + 60, name="quiet")
    result = fio.result()
    left = recoveries(lab)
    return {
        "falseFailovers": sum(left.values()),
        "stallSeconds": result["longestGapSeconds"],
        "ioErrors": result["error"],
        "writeIops": result["writeIops"],
        "load": load(),
    }


def trial(lab: Lab, name: str, fault: str, row: dict[str, int]) -> dict[str, Any]:
    victim = lab.controller(VICTIM)
    victim_address = lab.links[VICTIM].controller_address
    survivor_address = lab.links[SURVIVOR].controller_address
    victim_ctrl = controllers(lab)[victim_address]
    recoveries(lab)
    fio = Fio(lab, name, head_device(kernel_state(lab)), rate_iops=0)  # unpaced: the load is the point
    # When the fault hits c1
    if fault == "link":
        victim.sh("ip link set eth0 down", name="link-down").ok()
    elif fault == "freeze":
        os.kill(victim.qemu_pid() or 0, signal.SIGSTOP)
    else:
        victim.kill()
    faulted = time.monotonic()
    # held until the host's path to c1 leaves live (at most 90 s), then IO on c0 alone for 6 s
    noticed = lab.host.sh(
        "s=$(date +%s.%N); for i in $(seq 360); do"
        f' [ "$(cat /sys/class/nvme/{victim_ctrl}/state 2>/dev/null)" != live ] && break; sleep 0.25; done;'
        ' echo "$i $(date +%s.%N) $s"; sleep 6',
        timeout=150,
        name="noticed",
    ).ok()
    rounds, seen, began = noticed.stdout.split()
    noticed_after = round(float(seen) - float(began), 1) if int(rounds) < 360 else None
    result = fio.result()
    left = recoveries(lab)
    figures: dict[str, Any] = {
        "stallSeconds": result["longestGapSeconds"],
        "ioErrors": result["error"],
        "verifiedReads": result["verifiedReads"],
        "noticedSeconds": noticed_after,  # None: still live 90 s after the fault
        "survivorFailovers": left.get(survivor_address, 0),
        "load": load(),
    }
    # When c1 comes back
    if fault == "link":
        victim.sh("ip link set eth0 up", name="link-up").ok()
    elif fault == "freeze":
        os.kill(victim.qemu_pid() or 0, signal.SIGCONT)
    else:
        victim.boot()
        victim.wait_ready(240)
        configure(lab, VICTIM)
    back = wait_live(lab, VICTIM, max(60, row["ctrlLossTmo"] + 10) if row["ctrlLossTmo"] >= 0 else 60)
    if back is not None:
        figures["reconnect"] = f"{back} s"
    else:
        gone = victim_address not in path_states(lab)
        figures["reconnect"] = "removed" if gone else "not live"
        if not gone:
            lab.host.sh(f"nvme disconnect -d {victim_ctrl}", timeout=60, name="drop").ok()
        connect_path(lab, VICTIM, row)
    figures["outageSeconds"] = round(time.monotonic() - faulted, 1)
    return figures


def config_json_probe(lab: Lab) -> dict[str, Any]:
    """What nvme-cli 2.x takes from /etc/nvme/config.json (libnvme's JSON config): a port entry
    for c0 with keep_alive_tmo 7 and fast_io_fail_tmo 4, then (1) ``nvme connect`` without -k:
    the controller's kato and fast_io_fail_tmo; (2) ``nvme connect-all`` with no arguments (what
    nvmf-autoconnect runs at boot): whether it connects the entry at all."""
    address = lab.links[SURVIVOR].controller_address
    config = [
        {
            "hostnqn": HOST_NQN,
            "hostid": HOST_ID,
            "subsystems": [
                {
                    "nqn": NQN,
                    "ports": [
                        {
                            "transport": "tcp",
                            "traddr": address,
                            "trsvcid": "4420",
                            "keep_alive_tmo": 7,
                            "fast_io_fail_tmo": 4,
                            "ctrl_loss_tmo": 45,
                            "reconnect_delay": 3,
                        }
                    ],
                }
            ],
        }
    ]
    show = (
        "for c in /sys/class/nvme/nvme*;"
        " do echo $(cat $c/kato $c/fast_io_fail_tmo $c/ctrl_loss_tmo $c/reconnect_delay); done"
    )
    result = lab.host.sh(
        "mkdir -p /etc/nvme && cat > /etc/nvme/config.json <<'JSON'\n"
        + json.dumps(config)
        + "\nJSON\nnvme disconnect-all >/dev/null; sleep 1\n"
        f"nvme connect -t tcp -a {address} -s 4420 -n {NQN} --hostnqn {HOST_NQN} --hostid {HOST_ID}"
        f" >/dev/null 2>&1; echo connect: $({show})\n"
        "nvme disconnect-all >/dev/null; sleep 1; nvme connect-all >/dev/null 2>&1; sleep 2\n"
        f"echo connect-all: $({show})\n"
        "nvme disconnect-all >/dev/null; rm /etc/nvme/config.json",
        timeout=180,
        name="config-json",
    )
    found = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    return {"kato fast_io_fail ctrl_loss reconnect_delay": found, "stderr": result.stderr[-300:]}


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| row | kato | ctrl-loss | reconnect | fast_io_fail | io_timeout | tcp_retries2 | fault |"
        " stall s | IO errors | false failovers | reconnect | load |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        s = r["settings"]
        if not s:
            continue
        f = r["figures"]
        failovers = f.get("falseFailovers", f.get("survivorFailovers", ""))
        lines.append(
            f"| {r['row']} | {s['kato']} | {s['ctrlLossTmo']} | {s['reconnectDelay']} |"
            f" {s['fastIoFailTmo']} | {s['ioTimeout']} | {s['tcpRetries2']} | {r['fault']} |"
            f" {f.get('stallSeconds', '')} |"
            f" {f.get('ioErrors', '')} | {failovers} | {f.get('reconnect', '')} | {f.get('load', '')} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="+", default=["k5", "k3", "k2", "k1", "k5-tcp3"], choices=list(ROWS))
    parser.add_argument("--faults", nargs="+", default=list(FAULTS), choices=FAULTS)
    parser.add_argument("--quiet", type=int, default=30, help="seconds of IO without a fault, per row")
    args = parser.parse_args()
    missing = missing_prerequisites()
    if missing:
        print(f"bench-failover needs {', '.join(missing)} (bash tools/dataplane-install.sh, as root)")
        return 1
    # a SIGTERM ends the run through the finally below: every QEMU it started is killed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = STATE / "bench-failover"
    shutil.rmtree(root, ignore_errors=True)
    lab = Lab(root, 2, VOLUME)
    results: list[dict[str, Any]] = []
    out = STATE / "bench-failover.json"
    try:
        boot = lab.boot_all(240)
        print(f"kernel {kernel_package()}; guests ready {boot} (load {load()})", flush=True)
        for index in (SURVIVOR, VICTIM):
            configure(lab, index)
        probe = config_json_probe(lab)
        print(f"config.json: {json.dumps(probe)}", flush=True)
        results.append({"row": "config.json", "settings": {}, "fault": "-", "figures": probe})
        for row_name in args.rows:
            row = ROWS[row_name]
            connect_row(lab, row)
            for fault in ["quiet", *args.faults]:
                started = time.monotonic()
                name = f"{row_name}-{fault}"
                try:
                    if fault == "quiet":
                        figures = quiet(lab, name, args.quiet)
                    else:
                        figures = trial(lab, name, fault, row)
                except AssertionError as error:  # a guest that did not answer: recorded, next row
                    figures = {"failed": str(error).splitlines()[0][:200], "load": load()}
                figures["trialSeconds"] = round(time.monotonic() - started, 1)
                results.append({"row": row_name, "settings": row, "fault": fault, "figures": figures})
                print(json.dumps(results[-1], sort_keys=True), flush=True)
                out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
                if "failed" in figures:
                    break
    finally:
        lab.close()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
