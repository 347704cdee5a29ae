"""Backup sets proven on real kernels: taken the way the product takes them, restored, read back.

Its own lab (``.dataplane/run-sets``): two controllers serving two volumes, each holding an XFS
filesystem the host mounted through its multipath device. On each filesystem the data-integrity
checker (``integrity.py``) writes stamped 4 KiB blocks with O_DIRECT into a file, recording
every acknowledged generation. A set is taken as CreateSnapshots takes one: a copy of every
volume at one instant. Here the instant is made by pausing both controllers' VMs (QMP ``stop``:
QEMU drains what its disks have in flight, so each image holds exactly the writes completed
before it, and no write reaches any image until ``cont``), then copying both images.

* **Application-consistent**: the host's filesystems frozen first by the product's freeze-io
  (its watchdog armed), the set taken, then thaw-io.
* **Crash-consistent**: the set taken while the writers run.

Each set is then restored the way a drill restores one: its copies (new volume ids, as restored
volumes have) attached to a drill guest that boots only then, and the product's drill-check
document mounts each filesystem read-only, checks it read-only, and runs the checker's
``verify`` as the operator's command against the writer's state at the set's instant. Every
block acknowledged before the instant must read back with that generation or a later one that was
already attempted (never an older one); the same set read against the writer's final state must
show stale blocks (the set is a point in time, not the live volume: the check can fail).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dataplane.conftest import FIGURES
from tests.dataplane.lab import HANG_SECONDS, HOST_MODULES, STATE, Guest, Lab, Result, fresh_lab
from vsa_core import nvme

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ARRAY = "sets"
VOLUMES = {"a": "vol-0a1b2c3d4e5f60731", "b": "vol-0a1b2c3d4e5f60732"}
"""The array's two volumes, by the name of the filesystem each holds."""
RESTORED = {
    "application": {"a": "vol-0a1b2c3d4e5f60741", "b": "vol-0a1b2c3d4e5f60742"},
    "crash": {"a": "vol-0a1b2c3d4e5f60751", "b": "vol-0a1b2c3d4e5f60752"},
}
"""Each set's restored volumes: new ids, as CreateVolume from a snapshot gives."""
IO = {"a": "", "b": "--no-direct"}
"""How each filesystem's checker writes: ``a`` with O_DIRECT (acknowledged = on the volume),
``b`` buffered (acknowledged = in the host's page cache, on the volume only once written back
or synced: what a freeze adds to a set)."""
CHECKED = {"application": ("a", "b"), "crash": ("a",)}
"""The files each set's drill verifies: both in the application-consistent set; in the
crash-consistent set the O_DIRECT one only (a buffered write acknowledged before the instant may
still have been in the host's page cache, and one attempted while the controllers were paused
may never have blocked: its writer has no state at the instant)."""
HOST_NQN = nvme.default_host_nqn("i-0d0a7a91a2e0f00c1")
CHECKER = Path(__file__).with_name("integrity.py")
STATE_SCRIPT = Path(__file__).with_name("nvme_state.py")
BLOCKS = 1024
"""The checker's file on each filesystem: 4 MiB of 4 KiB blocks."""
MOUNT_DIR = "/run/vsa-sets"
"""Where the host mounts each filesystem (MOUNT_DIR/<name>)."""
MOUNTPOINTS = ",".join(f"{MOUNT_DIR}/{name}" for name in VOLUMES)
SECTOR = 4096
"""The filesystems' sector size. With XFS's default 512-byte sectors, a superblock, AGF, AGI and
AGFL write (four neighbouring 512-byte sectors) can go through the two controllers' QEMUs at
once, and this machine's disk has 4 KiB physical sectors under 512-byte logical ones: 3 of 6
freshly made filesystems read back with an AGF older than its free-space btrees (a lost 512-byte
write, the read-modify-write of one 4 KiB block by two processes), 0 of 6 with 4 KiB sectors,
while 8 MiB written through the same paths read back intact. An EBS volume is one device behind
the controllers; the lab's shared image is not, so the filesystems here write whole 4 KiB
blocks."""
MAX_WRITE_KIB = 16
"""The host's largest IO to each volume. Under TCG a controller's kernel twice took a double fault
in nvmet-tcp's receive path (``nvmet_tcp_map_data`` → ``sgl_alloc_order``, and
``tcp_recvmsg``) seconds after a burst of large writes reached it (the page cache's writeback
after a freeze's sync, or after the controllers were let go on): the VM died and the test with
it. A lab limit, as the 512-byte sectors are: an instance's kernel is not emulated."""
IMAGE_BYTES = 512 * 1024 * 1024
"""Each volume's image (XFS needs 300 MB at least)."""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = fresh_lab("run-sets", 2, VOLUMES["a"], VOLUMES["b"])
    with (lab.root / "spare.img").open("wb") as image:
        image.truncate(IMAGE_BYTES)  # the lab's second volume is small by default
    try:
        FIGURES["setsLabBootSeconds"] = lab.boot_all()
        serve(lab)
        yield lab
    finally:
        lab.close()


def images(lab: Lab) -> dict[str, Path]:
    """Each volume's image, by filesystem name (the lab attaches them to every controller)."""
    attached = lab.controller(0).volumes
    return {name: attached[volume] for name, volume in VOLUMES.items()}


def serve(lab: Lab) -> None:
    """Both controllers export both volumes; the host connects to both, makes an XFS on each
    volume's multipath device, mounts it, and writes the checker's file once in full (so its
    blocks are allocated and written: the checker then only overwrites them)."""
    volumes = ",".join(VOLUMES.values())
    for index, link in enumerate(lab.links):
        lab.controller(index).document(
            "configure-target",
            ArrayId=ARRAY,
            Volumes=volumes,
            Slot=str(index),
            HostNqns=HOST_NQN,
            ListenAddress=link.controller_address,
        ).ok()
    for link in lab.links:
        lab.host.document(
            "connect-path", ArrayId=ARRAY, Volumes=volumes, Address=link.controller_address, HostNqn=HOST_NQN
        ).ok()
    for name, volume in VOLUMES.items():
        device = head_device(lab, nvme.subsystem_nqn(ARRAY, volume))
        lab.host.sh(
            f"echo {MAX_WRITE_KIB} > /sys/block/{device.removeprefix('/dev/')}/queue/max_sectors_kb"
            f" && mkfs.xfs -f -q -s size={SECTOR} {device} && mkdir -p {MOUNT_DIR}/{name}"
            f" && mount {device} {MOUNT_DIR}/{name}"
            f" && dd if=/dev/zero of={MOUNT_DIR}/{name}/blocks bs=1M count={BLOCKS * 4096 // 2**20}"
            " oflag=direct conv=fsync status=none",
            timeout=300,
            name=f"mkfs-{name}",
        ).ok()


def head_device(lab: Lab, nqn: str) -> str:
    state: dict[str, Any] = json.loads(
        lab.host.sh(f"python3 {STATE_SCRIPT} {nqn}", timeout=180, name="nvme-state").ok().stdout
    )
    assert len(state["heads"]) == 1, state
    assert sorted(p["state"] for p in state["paths"]) == ["live", "live"], state["paths"]
    return "/dev/" + str(state["heads"][0]["name"])


def start_writers(lab: Lab, run: str) -> dict[str, str]:
    """One checker per filesystem, until ``<run>.stop`` exists; its state in the host's
    directory (``<run>-<name>.json``), never on the filesystem it writes."""
    return {
        name: lab.host.submit(
            f"python3 {CHECKER} write {MOUNT_DIR}/{name}/blocks --state {lab.host.dir / f'{run}-{name}.json'}"
            f" --blocks {BLOCKS} --threads 4 --until-file {lab.host.dir / f'{run}.stop'}"
            f" --writer {run}-{name} {IO[name]}",
            name=f"writer-{run}-{name}",
        )
        for name in VOLUMES
    }


def writer_state(lab: Lab, run: str, name: str) -> dict[str, Any]:
    path = lab.host.dir / f"{run}-{name}.json"
    return json.loads(path.read_text()) if path.exists() else {"writes": 0}


def wait_for_writes(lab: Lab, run: str, at_least: int | dict[str, int], timeout: float = 300) -> None:
    """Until each writer has made ``at_least`` writes (one count for all, or one per filesystem
    named)."""
    wanted = at_least if isinstance(at_least, dict) else dict.fromkeys(VOLUMES, at_least)
    deadline = time.monotonic() + timeout
    while any((made := writer_state(lab, run, n)["writes"]) < wanted[n] for n in wanted):
        assert time.monotonic() < deadline, f"{run}: a writer made {made} writes in {timeout} s, not {wanted}"
        time.sleep(0.5)


def settled_states(
    lab: Lab, run: str, names: tuple[str, ...], timeout: float = 120
) -> dict[str, dict[str, Any]]:
    """The states of the writers ``names`` once their writes no longer move (their IO is blocked:
    frozen, or no controller running; a buffered writer on a filesystem that is not frozen never
    blocks, so it has no state at the instant): each state file rewritten since the last look,
    with the same count of writes. Nothing is acknowledged while blocked, and a thread attempts
    one write at a time, so this is the state at the instant: every acknowledged write landed
    before it, and no write landed that is not recorded as attempted."""
    deadline = time.monotonic() + timeout
    files = [lab.host.dir / f"{run}-{name}.json" for name in names]
    before = {name: writer_state(lab, run, name) for name in names}
    stamps = [f.stat().st_mtime_ns for f in files]
    while True:
        time.sleep(0.5)
        assert time.monotonic() < deadline, f"{run}: the writers never settled in {timeout} s"
        if any(f.stat().st_mtime_ns == s for f, s in zip(files, stamps, strict=True)):
            continue  # a writer has not saved its state since the last look
        now = {name: writer_state(lab, run, name) for name in names}
        if all(now[n]["writes"] == before[n]["writes"] for n in names):
            return now
        before, stamps = now, [f.stat().st_mtime_ns for f in files]


def take_set(lab: Lab, run: str, restored: dict[str, str], names: tuple[str, ...]) -> dict[str, Any]:
    """A point-in-time copy of every volume at one instant: both controllers paused (no write
    reaches either image until they go on), the states of the writers ``names`` at that instant, each image
    copied to its restored volume's image, and the controllers let go on. The states written
    beside the copies; the pause's length."""
    paused = time.monotonic()
    for index in range(len(lab.links)):
        lab.controller(index).qmp("stop")
    try:
        states = settled_states(lab, run, names)
        copied = time.monotonic()
        for name, image in images(lab).items():
            subprocess.run(
                ["cp", "--sparse=always", str(image), str(set_image(lab, restored[name]))], check=True
            )
        copy_seconds = time.monotonic() - copied
    finally:
        for index in range(len(lab.links)):
            lab.controller(index).qmp("cont")
    for name, state in states.items():
        (lab.root / "sets" / f"{run}-set-{name}.json").write_text(json.dumps(state))
    return {"pauseSeconds": round(time.monotonic() - paused, 2), "copySeconds": round(copy_seconds, 2)}


def set_image(lab: Lab, volume: str) -> Path:
    return lab.root / "sets" / f"{volume}.img"  # the writers' states at each set beside them


def stop_writers(lab: Lab, run: str, writers: dict[str, str]) -> dict[str, dict[str, Any]]:
    (lab.host.dir / f"{run}.stop").touch()
    return {
        name: json.loads(lab.host.wait(request, timeout=300).ok().stdout) for name, request in writers.items()
    }


def verify_command(run: str, restored: dict[str, str], against: str) -> str:
    """The operator's command drill-check runs in MountDir: the checker's verify of the file of
    each filesystem of ``CHECKED[run]`` against the writer's state ``against`` (the set's
    instant, or the final)."""
    steps = []
    for name in CHECKED[run]:
        state = STATE / "run-sets" / "sets" / f"{run}-{against}-{name}.json"
        steps.append(
            f"r=$(python3 {CHECKER} verify {restored[name]}/blocks --state {state} --counts {IO[name]})"
            f" || failed=1; echo {name}: $r"
        )
    return "failed=0; " + "; ".join(steps) + "; exit $failed"


def drill(
    guest: Guest, run: str, restored: dict[str, str], against: str = "set"
) -> tuple[Result, dict[str, Any]]:
    """The product's drill-check on the restored volumes, with the verify as its command; the
    result and each verified filesystem's report."""
    command = base64.urlsafe_b64encode(verify_command(run, restored, against).encode()).decode().rstrip("=")
    done = guest.document(
        "drill-check", Volumes=",".join(restored.values()), Command=command, CommandTimeoutSeconds="600"
    )
    output = done.report["command"]["output"]
    reports = {
        line.split(": ", 1)[0]: json.loads(line.split(": ", 1)[1])
        for line in output.splitlines()
        if line.split(": ", 1)[0] in restored
    }
    return done, reports


def boot_drill_guest(lab: Lab) -> Guest:
    """The drill instance: a guest with every restored volume attached, booted once they exist."""
    volumes = {
        volume: set_image(lab, volume) for restored in RESTORED.values() for volume in restored.values()
    }
    guest = Guest(
        name="drill", dir=lab.root / "drill", netdevs=[], addresses=[], modules=HOST_MODULES, volumes=volumes
    )
    lab.add(guest)  # killed with the lab
    guest.boot()
    FIGURES.setdefault("setsLabBootSeconds", {})["drill"] = guest.wait_ready(180)
    return guest


def test_sets_taken_as_the_product_takes_them_restore_and_read_back(lab: Lab) -> None:
    (lab.root / "sets").mkdir(exist_ok=True)
    figures: dict[str, Any] = {}
    # Given the checker writing on both filesystems
    writers = start_writers(lab, "application")
    wait_for_writes(lab, "application", BLOCKS + 200)
    # When the host's filesystems are frozen by freeze-io, the set is taken, and thaw-io thaws
    frozen = (
        lab.host.document("freeze-io", Mountpoints=MOUNTPOINTS, BackupId="sets-1", TimeoutSeconds="60")
        .ok()
        .report
    )
    assert frozen["status"] == "frozen", frozen
    figures["application"] = take_set(lab, "application", RESTORED["application"], CHECKED["application"])
    thawed = lab.host.document("thaw-io", Mountpoints=MOUNTPOINTS, BackupId="sets-1").ok().report
    assert thawed["status"] == "thawed", thawed
    # and the writers go on past the set, then stop
    at_set = {
        n: json.loads((lab.root / "sets" / f"application-set-{n}.json").read_text())["writes"]
        for n in VOLUMES
    }
    wait_for_writes(lab, "application", {n: made + 300 for n, made in at_set.items()})
    figures["application"]["writers"] = stop_writers(lab, "application", writers)
    # and a crash-consistent set is taken while the checker writes
    writers = start_writers(lab, "crash")
    wait_for_writes(lab, "crash", BLOCKS + 200)
    figures["crash"] = take_set(lab, "crash", RESTORED["crash"], CHECKED["crash"])
    crash_at_set = {
        n: json.loads((lab.root / "sets" / f"crash-set-{n}.json").read_text())["writes"]
        for n in CHECKED["crash"]
    }
    wait_for_writes(lab, "crash", {n: made + 300 for n, made in crash_at_set.items()})
    figures["crash"]["writers"] = stop_writers(lab, "crash", writers)
    for name in VOLUMES:
        for run in ("application", "crash"):
            shutil.copy(lab.host.dir / f"{run}-{name}.json", lab.root / "sets" / f"{run}-final-{name}.json")
    # and each set is restored to a drill instance and drilled by the product's drill-check, its
    # command the checker's verify: of both files for the application-consistent set, of the
    # O_DIRECT one for the crash-consistent set (CHECKED)
    guest = boot_drill_guest(lab)
    results = {run: drill(guest, run, restored) for run, restored in RESTORED.items()}
    recovered = log_recoveries(guest)
    _, against_final = drill(guest, "application", RESTORED["application"], against="final")
    for run, (done, reports) in results.items():
        figures[run]["drill"] = {"status": done.report["status"], "seconds": done.report["seconds"]}
        figures[run]["logRecoveries"] = recovered[run]
        figures[run]["verify"] = {
            n: {k: r[k] for k in ("ackedBlocks", "staleCount", "tornCount", "misplacedCount", "unknownCount")}
            for n, r in reports.items()
        }
    figures["guestPanics"] = [g.name for g in lab.guests.values() if "Kernel panic" in console(g)]
    FIGURES["backupSets"] = figures
    # Then both sets pass the drill: every filesystem mounts read-only (after log recovery where
    # its log needs it) and checks clean
    for run, (done, reports) in results.items():
        assert done.rc == 0, (run, done.report)
        assert done.report["status"] == "passed", (run, done.report)
        checks = [fs["check"] for v in done.report["volumes"] for fs in v["filesystems"]]
        assert checks == ["clean", "clean"], (run, done.report)
        assert sorted(reports) == sorted(CHECKED[run]), (run, done.report["command"])
    # and in the application-consistent set every block acknowledged before the freeze, written
    # directly or through the page cache, reads back at that generation or a later attempted one
    for name, report in results["application"][1].items():
        assert report["ok"], ("application", name, report)
        assert report["ackedBlocks"] == BLOCKS, ("application", name, report)
    # and in the crash-consistent set so does every block written directly and acknowledged
    # before its instant, on both volumes at one instant
    assert results["crash"][1]["a"]["ok"], results["crash"][1]
    assert results["crash"][1]["a"]["ackedBlocks"] == BLOCKS, results["crash"][1]
    # and the set is the instant, not the live volume: read against the writers' final state,
    # its blocks are older than their last acknowledged writes
    assert sorted(against_final) == sorted(VOLUMES), against_final
    assert all(r["staleCount"] > 0 for r in against_final.values()), against_final


def console(guest: Guest) -> str:
    """The guest's kernel console (a kernel that panicked says so there, as the VM dies)."""
    path = guest.dir / "console.log"
    return path.read_text(errors="replace") if path.exists() else ""


def log_recoveries(guest: Guest) -> dict[str, int]:
    """Per set, how many of its filesystems' first mounts replayed a log (the drill guest's
    kernel log: XFS says "Starting recovery" on the device it mounts)."""
    listing = guest.sh(
        "for b in /sys/block/*; do echo ${b##*/} $(cat $b/serial 2>/dev/null); done", name="serials"
    ).ok()
    serials = dict(line.split() for line in listing.stdout.splitlines() if len(line.split()) == 2)
    log = guest.sh("dmesg", name="dmesg").ok().stdout
    counts = {}
    for run, restored in RESTORED.items():
        wanted = {v.replace("-", "") for v in restored.values()}
        devices = [device for device, serial in serials.items() if serial in wanted]
        counts[run] = sum(f"XFS ({device}): Starting recovery" in log for device in devices)
    return counts
