"""No stale write after a failover (issue #33): the hazard shown on real kernels.

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

With today's design (every controller serves every volume, nothing fences a lost controller)
the checker finds stale blocks: the test asserts it, so it keeps showing the defect until
fencing lands, when its assertion turns into "zero stale blocks".
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dataplane.conftest import FIGURES
from tests.dataplane.lab import STATE, Lab, Result, missing_prerequisites
from tests.prerequisites import require
from vsa_core import nvme

pytestmark = pytest.mark.timeout(900)

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
AFTER_FAILOVER = 1000
"""Writes the host makes after losing c0 before the writer stops: every block of the region
(512) rewritten about twice through c1."""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    missing = missing_prerequisites()
    if missing:
        require(f"tests/dataplane needs {', '.join(missing)} (bash tools/dataplane-install.sh, as root)")
    root = STATE / "run-stale"
    shutil.rmtree(root, ignore_errors=True)
    lab = Lab(root, 2, VOLUME)
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


def configure(lab: Lab, index: int) -> Result:
    values = {
        "ArrayId": ARRAY,
        "Volumes": VOLUME,
        "Slot": str(index),
        "HostNqns": HOST_NQN,
        "ListenAddress": lab.links[index].controller_address,
    }
    if index == 0:
        values["DeviceDir"] = DELAYED_DIR
    return lab.controller(index).document("configure-target", **values).ok()


def connect(lab: Lab, index: int) -> Result:
    address = lab.links[index].controller_address
    return lab.host.document(
        "connect-path", ArrayId=ARRAY, Volumes=VOLUME, Address=address, HostNqn=HOST_NQN
    ).ok()


def head_device(lab: Lab) -> str:
    state = json.loads(lab.host.sh(f"python3 {STATE_SCRIPT} {NQN}", name="nvme-state").ok().stdout)
    assert len(state["heads"]) == 1, state
    live = [p for p in state["paths"] if p["state"] == "live"]
    assert len(live) == 2, f"expected a live path through each controller: {state['paths']}"
    return "/dev/" + state["heads"][0]["name"]


def checker_state(lab: Lab) -> dict[str, Any]:
    path = lab.host.dir / "integrity.json"
    return json.loads(path.read_text()) if path.exists() else {"writes": 0}


def wait_for_writes(lab: Lab, at_least: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (writes := checker_state(lab)["writes"]) < at_least:
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
        **{k: report[k] for k in ("blocks", "ackedBlocks", "staleCount", "tornCount", "misplacedCount")},
        "unknownCount": report["unknownCount"],
    }
    # Then the read-back finds blocks older than their newest acknowledged write: the defect
    # today's design has (no fencing before the host resends through another controller)
    assert report["tornCount"] == 0, report
    assert report["misplacedCount"] == 0, report
    assert report["staleCount"] > 0, f"no stale block found: the hazard did not show ({report})"
