"""No stale write after a failover: the hazard, and fence-then-promote closing it, on real kernels.

Its own lab (``.dataplane/run-stale``: two controllers and a host, booted for this module and
killed at its end). Controller c0 exports the shared volume through a device-mapper ``delay``
target (``dm-delay``), c1 exports it directly; the host connects to both with the product's
documents (native multipath, round-robin) and runs the data-integrity checker
(``integrity.py``) on the multipath device. Then c0 starts holding its writes below nvmet, as a
stalled EBS attachment or a paused instance would, and c0's link to the host goes down: the
host's keep-alive gives up on that path, it resends the writes c0 holds through c1 and carries
on writing newer generations there. The writer stops; then c0's held writes reach the volume
(the test releases them: suspending a dm-delay device lets through what it holds), older data
over newer. The read-back counts the stale blocks. Nothing here waits on a clock: the hold lasts
until released, the writer is stopped once it has written past the failover.

Two designs, one scenario each, in this order on the same guests:

* **active/active** (configure-target without Owners: every controller serves every volume,
  nothing fences a lost controller): the checker finds stale blocks. The test asserts it: it is
  the hazard this design keeps.
* **one owner, fence-then-promote** (Owners: the volume's ANA group optimized on its owner only;
  the host queues its IO while the owner's path is lost; the survivor serves the group only
  once the owner is fenced): zero stale blocks, and the application sees no error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dataplane.conftest import FIGURES
from tests.dataplane.lab import HANG_SECONDS, Lab, Result, fresh_lab
from vsa_core import nvme

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ARRAY = "stale"
VOLUME = "vol-0a1b2c3d4e5f60721"
NQN = nvme.subsystem_nqn(ARRAY, VOLUME)
HOST_NQN = nvme.default_host_nqn("i-0d0a7a91a2e0f00b1")
CHECKER = Path(__file__).with_name("integrity.py")
STATE_SCRIPT = Path(__file__).with_name("nvme_state.py")
DELAYED = "vsa-delayed"
"""c0's device-mapper device over its EBS device; nvmet on c0 exports it."""
DELAYED_DIR = "/run/delayed-by-id"
HOLD_MS = 3_600_000
"""c0 holds each write for an hour: in effect until the test releases them."""
COUNTS = ("blocks", "ackedBlocks", "staleCount", "tornCount", "misplacedCount")
"""The read-back's counts each scenario records in the figures."""
AFTER_FAILOVER = 1000
"""Writes the host makes after losing c0 before the writer stops: every block of the region
(512) rewritten about twice through c1."""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = fresh_lab("run-stale", 2, VOLUME)
    try:
        FIGURES["staleLabBootSeconds"] = lab.boot_all()
        yield lab
    finally:
        lab.close()


def hold_writes(lab: Lab, milliseconds: int) -> Result:
    """c0's dm-delay device (made on first use) holds each write ``milliseconds``; reads pass.
    Reloading suspends the device, which first lets every write it holds through. The guest has
    no udev: dmsetup makes the /dev/mapper node itself."""
    device = f"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{VOLUME.replace('-', '')}"
    table = f"0 $(blockdev --getsz {device}) delay {device} 0 0 {device} 0 {milliseconds}"
    script = (
        f"set -e; modprobe dm-delay; if dmsetup info {DELAYED} >/dev/null 2>&1; then"
        f' dmsetup suspend {DELAYED}; dmsetup load {DELAYED} --table "{table}"; dmsetup resume {DELAYED};'
        f' else dmsetup create {DELAYED} --table "{table}"; dmsetup mknodes {DELAYED}; fi;'
        f" mkdir -p {DELAYED_DIR}; ln -sfn /dev/mapper/{DELAYED} {DELAYED_DIR}/{device.rsplit('/', 1)[1]};"
        f" dmsetup table {DELAYED}"
    )
    return lab.controller(0).sh(script, timeout=180, name="hold-writes").ok()


def configure(lab: Lab, index: int, **ownership: str) -> Result:
    values = {
        "ArrayId": ARRAY,
        "Volumes": VOLUME,
        "Slot": str(index),
        "HostNqns": HOST_NQN,
        "ListenAddress": lab.links[index].controller_address,
        **ownership,
    }
    if index == 0:
        values["DeviceDir"] = DELAYED_DIR
    return lab.controller(index).document("configure-target", **values).ok()


def connect(lab: Lab, index: int) -> Result:
    address = lab.links[index].controller_address
    return lab.host.document(
        "connect-path", ArrayId=ARRAY, Volumes=VOLUME, Address=address, HostNqn=HOST_NQN
    ).ok()


def host_state(lab: Lab) -> dict[str, Any]:
    done = lab.host.sh(f"python3 {STATE_SCRIPT} {NQN}", timeout=180, name="nvme-state").ok()
    state: dict[str, Any] = json.loads(done.stdout)
    return state


def head_device(lab: Lab) -> str:
    state = host_state(lab)
    assert len(state["heads"]) == 1, state
    live = [p for p in state["paths"] if p["state"] == "live"]
    assert len(live) == 2, f"expected a live path through each controller: {state['paths']}"
    return "/dev/" + state["heads"][0]["name"]


PATHS_SCRIPT = f"""
for subsystem in /sys/class/nvme-subsystem/nvme-subsys*; do
  [[ $(cat "$subsystem/subsysnqn") == {NQN} ]] || continue
  for ctrl in "$subsystem"/nvme[0-9]*; do
    [[ ${{ctrl##*/}} =~ ^nvme[0-9]+$ ]] || continue  # a controller, not the multipath head
    ana=""
    for disk in "$ctrl"/nvme*c*n*; do [[ -f $disk/ana_state ]] && ana=$(cat "$disk/ana_state"); done
    echo "$(cat "$ctrl/address")|$(cat "$ctrl/state")|$ana"
  done
done
"""


def paths_by_address(lab: Lab) -> dict[str, dict[str, Any]]:
    """The host's path to each controller address: its state and ANA state, from sysfs alone (an
    admin command to a controller whose link is cut would wait for the keep-alive to give up)."""
    found = {}
    for line in lab.host.sh(PATHS_SCRIPT, timeout=180, name="paths").ok().stdout.splitlines():
        address, state, ana = line.split("|")
        traddr = dict(part.split("=", 1) for part in address.split(",") if "=" in part).get("traddr")
        found[str(traddr)] = {"state": state, "ana": ana}
    return found


def wait_for_paths(lab: Lab, wanted: dict[int, tuple[str, str]], timeout: float) -> dict[str, Any]:
    """Until the host shows, for each controller index, its path's (state, ANA state)."""
    deadline = time.monotonic() + timeout
    want = {lab.links[i].controller_address: {"state": s, "ana": a} for i, (s, a) in wanted.items()}
    while True:
        found = paths_by_address(lab)
        if all(found.get(address) == value for address, value in want.items()):
            return found
        assert time.monotonic() < deadline, f"the host's paths after {timeout} s: {found}, wanted {want}"
        time.sleep(0.5)


def wait_until_path_down(lab: Lab, index: int, timeout: float) -> None:
    """Until the host no longer shows its path to controller ``index`` live."""
    deadline = time.monotonic() + timeout
    address = lab.links[index].controller_address
    while paths_by_address(lab).get(address, {}).get("state") == "live":
        assert time.monotonic() < deadline, f"the host's path to {address} still live after {timeout} s"
        time.sleep(0.5)


def checker_state(lab: Lab, name: str = "integrity") -> dict[str, Any]:
    path = lab.host.dir / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {"writes": 0}


def wait_for_writes(lab: Lab, at_least: int, timeout: float, name: str = "integrity") -> int:
    deadline = time.monotonic() + timeout
    while (writes := checker_state(lab, name)["writes"]) < at_least:
        assert time.monotonic() < deadline, f"the checker made {writes} writes in {timeout} s"
        time.sleep(0.5)
    return writes


def wait_for_held_writes(lab: Lab, timeout: float) -> int:
    """Writes c0's dm-delay device holds (its status: reads, writes, flushes held), once any."""
    deadline = time.monotonic() + timeout
    while True:
        status = lab.controller(0).sh(f"dmsetup status {DELAYED}", name="held").ok().stdout.split()
        if int(status[-2]) > 0:
            return int(status[-2])
        assert time.monotonic() < deadline, f"c0 held no write in {timeout} s: {status}"


def test_a_write_held_below_a_lost_path_lands_after_the_failover_and_leaves_stale_blocks(lab: Lab) -> None:
    # Given c0 exporting the volume through a device that passes writes straight through, c1
    # exporting it directly, and the host connected to both (round-robin)
    hold_writes(lab, 0)
    configure(lab, 0)
    configure(lab, 1)
    connect(lab, 0)
    connect(lab, 1)
    device = head_device(lab)
    # and the checker writing stamped blocks through the multipath device
    stop = lab.host.dir / "integrity.stop"
    writer = lab.host.submit(
        f"python3 {CHECKER} write {device} --state {lab.host.dir / 'integrity.json'}"
        f" --blocks 512 --threads 8 --until-file {stop} --writer host",
        name="checker-write",
    )
    wait_for_writes(lab, 200, timeout=120)
    # When c0 starts holding its writes and, with writes held there, its link to the host goes
    # down (the host's keep-alive, 2 s, then resends them through c1)
    hold_writes(lab, HOLD_MS)
    held = wait_for_held_writes(lab, timeout=120)
    lab.controller(0).qmp("set_link", name="link0", up=False)
    cut = checker_state(lab)["writes"]
    # and the host writes on through c1, past what c0 holds, then stops
    wait_for_writes(lab, cut + AFTER_FAILOVER, timeout=600)
    stop.touch()
    summary = json.loads(lab.host.wait(writer, timeout=300).ok().stdout)
    # and then c0's held writes reach the volume
    hold_writes(lab, 0)
    state = lab.host.dir / "integrity.json"
    verified = lab.host.sh(f"python3 {CHECKER} verify {device} --state {state}", timeout=300, name="verify")
    report = json.loads(verified.stdout)
    FIGURES["staleWrites"] = {
        "writesAfterFailover": AFTER_FAILOVER,
        "heldWhenCut": held,
        **summary,
        **{k: report[k] for k in COUNTS},
        "unknownCount": report["unknownCount"],
    }
    # Then the read-back finds blocks older than their newest acknowledged write: the defect
    # today's design has (no fencing before the host resends through another controller)
    assert report["tornCount"] == 0, report
    assert report["misplacedCount"] == 0, report
    assert report["staleCount"] > 0, f"no stale block found: the hazard did not show ({report})"


def release_held_writes(lab: Lab) -> int:
    """Suspending c0's dm-delay device sends on every write it holds; how many writes c0's kernel
    then logged as failed on its EBS device (after a fence: each held write, refused)."""
    script = (
        f"dmsetup suspend {DELAYED}; dmsetup resume {DELAYED};"
        " dmesg | grep -c 'I/O error, dev vd.*(WRITE)' || true"
    )
    return int(lab.controller(0).sh(script, timeout=180, name="release").ok().stdout.split()[-1])


def test_with_one_owner_fenced_before_the_survivor_is_promoted_no_held_write_lands(lab: Lab) -> None:
    """Fence-then-promote (docs/dataplane.md, *Fencing*): the volume is owned by c0 (its ANA
    group optimized there, inaccessible on c1), so the host sends its IO only through c0 and,
    when that path is lost, queues it instead of resending it through c1. The survivor is
    promoted only once c0 is fenced: here by removing c0's drive from its VM (QEMU drive_del),
    the lab's stand-in for EBS refusing a preempted registrant after Reservation Acquire with
    Preempt and Abort, which QEMU's shared image cannot do."""
    # Given c0 reachable again after the previous scenario, its writes passing straight through
    lab.controller(0).qmp("set_link", name="link0", up=True)
    hold_writes(lab, 0)
    # and the volume owned by slot 0: inaccessible on c1 first, then optimized on c0
    configure(lab, 1, Owners="0")
    configure(lab, 0, Owners="0")
    connect(lab, 0)
    connect(lab, 1)
    wait_for_paths(lab, {0: ("live", "optimized"), 1: ("live", "inaccessible")}, timeout=120)
    device = head_device(lab)
    # and the checker writing stamped blocks on a region of its own
    name, stop = "fenced", lab.host.dir / "fenced.stop"
    writer = lab.host.submit(
        f"python3 {CHECKER} write {device} --state {lab.host.dir / f'{name}.json'} --first 4096"
        f" --blocks 512 --threads 8 --until-file {stop} --writer fenced",
        name="checker-fenced",
    )
    wait_for_writes(lab, 200, timeout=120, name=name)
    # When c0 holds its writes and, with writes held there, its link goes down
    hold_writes(lab, HOLD_MS)
    held = wait_for_held_writes(lab, timeout=120)
    lab.controller(0).qmp("set_link", name="link0", up=False)
    cut_at, cut = time.monotonic(), checker_state(lab, name)["writes"]
    # and the host has given that path up (its keep-alive): its IO now waits, no path is usable
    wait_until_path_down(lab, 0, timeout=120)
    down_at = time.monotonic()
    queued = checker_state(lab, name)["writes"]
    # and then c0 is fenced (the stand-in: its drive removed from its VM), and only then c1
    # serves slot 0's group (configure-target with Serving: the ANA change reaches the host)
    lab.controller(0).qmp("human-monitor-command", **{"command-line": "drive_del vol0"})
    fenced_at = time.monotonic()
    configure(lab, 1, Owners="0", Serving="1,0")
    promoted_at = time.monotonic()
    wait_for_paths(lab, {1: ("live", "optimized")}, timeout=120)
    # Then the host's queued writes and newer ones complete through c1
    wait_for_writes(lab, cut + AFTER_FAILOVER, timeout=600, name=name)
    resumed = checker_state(lab, name)["writes"]
    stop.touch()
    summary = json.loads(lab.host.wait(writer, timeout=300).ok().stdout)
    # and c0's held writes, sent on now, are refused by the fenced drive
    refused = release_held_writes(lab)
    state = lab.host.dir / f"{name}.json"
    verify = f"python3 {CHECKER} verify {device} --state {state}"
    verified = lab.host.sh(verify, timeout=300, name="verify-fenced")
    report = json.loads(verified.stdout)
    FIGURES["fencedFailover"] = {
        "heldWhenCut": held,
        "heldWritesRefused": refused,
        "writesBeforePathDown": queued - cut,
        "pathDownSeconds": round(down_at - cut_at, 1),
        "fenceToPromotedSeconds": round(promoted_at - fenced_at, 1),
        "writesAfterFailover": resumed - cut,
        **summary,
        **{k: report[k] for k in (*COUNTS, "unknownCount")},
    }
    # and nothing read back is older than its newest acknowledged write, and the application
    # saw no error: its writes waited for the fenced failover instead of failing
    assert report["staleCount"] == 0, report
    assert report["tornCount"] == 0, report
    assert report["misplacedCount"] == 0, report
    assert summary["errorCount"] == 0, summary
    assert refused >= held, f"c0 held {held} writes and its kernel logged {refused} failed writes"
    # And the array torn down on c1 leaves nothing of it in nvmet: configfs removes the port only
    # once the owners' ANA groups made in it are gone (the teardown removes them first)
    down = (
        lab.controller(1)
        .document(
            "configure-target",
            ArrayId=ARRAY,
            Volumes=VOLUME,
            Slot="1",
            Mode="teardown",
            ListenAddress=lab.links[1].controller_address,
        )
        .ok()
    )
    assert NQN in down.report["removed"], down.stdout
    left = lab.controller(1).sh(
        "ls /sys/kernel/config/nvmet/ports /sys/kernel/config/nvmet/subsystems", name="left"
    )
    assert left.ok().stdout.split() == [
        "/sys/kernel/config/nvmet/ports:",
        "/sys/kernel/config/nvmet/subsystems:",
    ], left.stdout
