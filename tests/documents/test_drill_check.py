"""drill-check on real filesystems, run as a restore-drill instance runs it.

A restored volume is a loop device (as the kernel gives an attached EBS volume, a writable block
device) or an image file, reached through a by-id directory of symlinks named as udev names EBS
NVMe devices. Needs root, xfsprogs, e2fsprogs and util-linux (tools/install.sh installs them);
skips with the reason otherwise. Every run is followed by the check that the script left
nothing behind: no mount, no loop device or partition of its own, no mountpoint directory, no
temporary file. Nothing here waits on time: each wait is for a condition, bounded.
"""

import contextlib
import os
import shutil
import signal
import struct
import subprocess
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.documents.xfs_lab import sh
from tests.documents_util import Run, parse_report, run_document, write_script
from tests.prerequisites import require
from vsa_core import nvme

TOOLS = (
    "mkfs.xfs", "mkfs.ext4", "mkswap", "xfs_repair", "xfs_db", "xfs_io", "e2fsck", "debugfs", "dumpe2fs",
    "blkid", "lsblk", "partx", "losetup", "mount", "umount", "findmnt", "timeout", "flock", "base64",
)  # fmt: skip
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
XFS_MIB = 300  # mkfs.xfs refuses a smaller filesystem (xfsprogs 5.19 and later)
EXT4_MIB = 64
MIB = 2**20
LOSETUP_LOCK = "/run/vsa-lab-losetup.lock"  # xfs_lab's: one losetup -f at a time on the machine

XFS_VOLUME = "vol-0123456789abcdef0"
EXT4_VOLUME = "vol-0fedcba9"
OTHER_VOLUME = "vol-00000000000000001"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop devices, mount)"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"missing {', '.join(absent)} (tools/install.sh installs xfsprogs, e2fsprogs and util-linux)"
    kernel = Path("/proc/filesystems").read_text().split()
    if "xfs" not in kernel or "ext4" not in kernel:
        return "the kernel lacks XFS or ext4 (/proc/filesystems)"
    return None


def command(text: str) -> str:
    """The Command parameter for a shell command: base64url, unpadded."""
    return urlsafe_b64encode(text.encode()).decode().rstrip("=")


def wait_until(condition: Callable[[], bool], within: float = 10) -> bool:
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def loops_of(image: Path) -> list[str]:
    """The loop devices attached to ``image``."""
    return sh("losetup", "-l", "-n", "-O", "NAME", "-j", str(image)).stdout.split()


def partitions_of(device: str) -> list[str]:
    listed = sh("lsblk", "-lnpo", "NAME,TYPE", device).stdout.splitlines()
    return [line.split()[0] for line in listed if line.split()[1:] == ["part"]]


def mbr(image: Path, partitions_mib: list[tuple[int, int]]) -> None:
    """An MS-DOS partition table on ``image``: one Linux partition per (start, size) in MiB."""
    table = bytearray(512)
    for number, (start, size) in enumerate(partitions_mib):
        entry = bytes([0, 0, 0, 0, 0x83, 0, 0, 0]) + struct.pack("<II", start * 2048, size * 2048)
        table[446 + 16 * number : 462 + 16 * number] = entry
    table[510:512] = b"\x55\xaa"
    with image.open("r+b") as handle:
        handle.write(table)


@dataclass
class Drill:
    """One test's restored volumes, by-id directory and drill mount dir; ``cleanup`` undoes it."""

    root: Path
    images: list[Path] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)  # the test's own, standing for attached volumes

    @property
    def by_id(self) -> Path:
        return self.root / "by-id"

    @property
    def mount_dir(self) -> Path:
        return self.root / "drill"

    def image(self, name: str, mib: int) -> Path:
        image = self.root / f"{name}.img"
        sh("truncate", "-s", f"{mib}M", str(image))
        self.images.append(image)
        return image

    def attach(self, image: Path, *, partitions: bool = False) -> str:
        scan = ["-P"] if partitions else []
        device = sh("flock", LOSETUP_LOCK, "losetup", "-f", "--show", *scan, str(image)).stdout.strip()
        self.loops.append(device)
        if partitions and not partitions_of(device):
            sh("partx", "-a", device)  # a kernel without the MS-DOS parser: partx reads the table
        return device

    def link(self, volume: str, target: str | Path) -> Path:
        """The volume's device as udev names it, pointing at ``target``."""
        self.by_id.mkdir(exist_ok=True)
        link = self.by_id / nvme.device_name(volume)
        link.symlink_to(target)
        return link

    def device(self, volume: str, image: Path, kind: str) -> str:
        """``image`` as the volume: a loop device of its own ("loop") or the file ("file")."""
        target = self.attach(image) if kind == "loop" else str(image)
        self.link(volume, target)
        return target

    def fill(self, device: str, fstype: str, volume: str, *, crash: bool = False) -> None:
        """Write hello.txt (``data of <volume>``) on the filesystem of ``device``; with ``crash``,
        more writes and a shutdown that leaves them in the log only, as a crash-consistent
        snapshot has them."""
        mountpoint = self.root / "setup" / Path(device).name
        mountpoint.mkdir(parents=True, exist_ok=True)
        sh("mount", "-t", fstype, device, str(mountpoint))
        try:
            (mountpoint / "hello.txt").write_text(f"data of {volume}\n")
            sh("sync", "-f", str(mountpoint / "hello.txt"))
            if crash:
                for n in range(20):
                    (mountpoint / f"after-{n}").write_text("written after the last sync\n")
                sh("xfs_io", "-x", "-c", "shutdown -f", str(mountpoint))
        finally:
            sh("umount", str(mountpoint))

    def xfs(self, volume: str, kind: str = "loop", *, crash: bool = False) -> str:
        image = self.image(volume, XFS_MIB)
        sh("mkfs.xfs", "-q", str(image))
        device = self.device(volume, image, kind)
        self.fill(device, "xfs", volume, crash=crash)
        return device

    def ext4(self, volume: str, kind: str = "loop", *, crash: bool = False) -> str:
        image = self.image(volume, EXT4_MIB)
        sh("mkfs.ext4", "-q", "-F", str(image))
        device = self.device(volume, image, kind)
        self.fill(device, "ext4", volume, crash=crash)
        return device

    def params(self, volumes: list[str], **extra: str) -> dict[str, str]:
        return {
            "Volumes": ",".join(volumes),
            "DeviceDir": str(self.by_id),
            "MountDir": str(self.mount_dir),
            **extra,
        }

    def env(self) -> dict[str, str]:
        return {"PATH": SYSTEM_PATH, "TMPDIR": str(self.root), "LANG": "C.UTF-8"}

    def run(self, volumes: list[str], *, check_patterns: bool = True, **extra: str) -> Run:
        """drill-check as the agent runs it, then the check that it left nothing behind."""
        run = run_document(
            "drill-check",
            self.params(volumes, **extra),
            self.root,
            env=self.env(),
            timeout=120,
            check_patterns=check_patterns,
        )
        assert self.leftovers() == [], run.stderr
        assert run.returncode == (0 if run.report["status"] == "passed" else 1), run.stderr
        return run

    def leftovers(self) -> list[str]:
        """What a drill left: mounts under the test's directory or of its devices, loop devices
        on its images other than the test's own, partitions on an image file's loop device, its
        mount dir, its temporary directory."""
        found = []
        ours = set(self.loops) | {part for loop in self.loops for part in partitions_of(loop)}
        for line in sh("findmnt", "-rn", "-o", "TARGET,SOURCE").stdout.splitlines():
            target, source = line.split(" ", 1)
            if Path(target).is_relative_to(self.root) or source in ours:
                found.append(f"mounted: {line}")
        for image in self.images:
            found += [f"loop device: {loop} on {image}" for loop in loops_of(image) if loop not in self.loops]
        if self.mount_dir.exists():
            found.append(f"mount dir: {sorted(str(p) for p in self.mount_dir.rglob('*'))}")
        found += [f"temporary: {path}" for path in self.root.glob("vsa-drill.*")]
        return found

    def cleanup(self) -> None:
        mounted = sh("findmnt", "-rn", "-o", "TARGET").stdout.splitlines()
        for target in reversed(mounted):
            if Path(target).is_relative_to(self.root) and sh("umount", target, check=False).returncode:
                sh("umount", "-l", target, check=False)
        for image in self.images:
            for loop in loops_of(image):
                # the kernel lets go of a device a moment after umount
                wait_until(lambda device=loop: sh("losetup", "-d", device, check=False).returncode == 0, 5)
            image.unlink(missing_ok=True)


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    require(_missing())
    the_drill = Drill(root=tmp_path)
    try:
        yield the_drill
    finally:
        the_drill.cleanup()


def only_filesystem(run: Run, volume: str) -> dict[str, object]:
    (entry,) = [v for v in run.report["volumes"] if v["volumeId"] == volume]
    (filesystem,) = entry["filesystems"]
    return dict(filesystem)


@pytest.mark.parametrize(
    ("fstype", "kind"), [("xfs", "loop"), ("xfs", "file"), ("ext4", "loop"), ("ext4", "file")]
)
def test_a_clean_filesystem_passes(drill: Drill, fstype: str, kind: str) -> None:
    # Given a restored volume holding a clean filesystem, as a block device or an image file
    volume = XFS_VOLUME if fstype == "xfs" else EXT4_VOLUME
    device = drill.xfs(volume, kind) if fstype == "xfs" else drill.ext4(volume, kind)

    # When the drill checks it
    run = drill.run([volume])

    # Then it mounted, checked clean, was mounted for the command at its mountpoint, and passed
    assert run.report["status"] == "passed", run.stderr
    assert run.report["problems"] == []
    (entry,) = run.report["volumes"]
    assert entry["volumeId"] == volume
    assert entry["device"] == str(drill.by_id / nvme.device_name(volume))
    assert entry["found"] == "filesystem"
    assert entry["filesystems"] == [
        {
            "device": device,
            "type": fstype,
            "mount": "ok",
            "check": "clean",
            "detail": None,
            "mountpoint": str(drill.mount_dir / volume),
            "seconds": entry["filesystems"][0]["seconds"],
        }
    ]
    assert entry["filesystems"][0]["seconds"] > 0
    assert run.report["command"] is None
    assert run.report["seconds"] >= entry["filesystems"][0]["seconds"]


@pytest.mark.parametrize("fstype", ["xfs", "ext4"])
def test_a_crash_consistent_filesystem_is_replayed_and_passes(drill: Drill, fstype: str) -> None:
    # Given a filesystem whose log (journal) holds writes not yet in place, as after a crash
    volume = XFS_VOLUME if fstype == "xfs" else EXT4_VOLUME
    device = drill.xfs(volume, crash=True) if fstype == "xfs" else drill.ext4(volume, crash=True)
    if fstype == "xfs":
        before = sh("xfs_repair", "-n", device, check=False)
        assert "metadata changes in a log" in before.stdout + before.stderr
    else:
        assert "needs_recovery" in sh("dumpe2fs", "-h", device, check=False).stdout

    # When the drill checks it, and the command reads what was written before the crash
    run = drill.run([volume], Command=command('cat "$VSA_DRILL_MOUNTS/hello.txt"'))

    # Then the read-only mount replayed the log, the check is clean, the data is there
    assert run.report["status"] == "passed", run.report["problems"]
    assert only_filesystem(run, volume)["check"] == "clean"
    assert run.report["command"]["output"] == f"data of {volume}\n"
    assert sh("xfs_repair" if fstype == "xfs" else "e2fsck", "-n", device, check=False).returncode == 0


def corrupt_xfs(device: str) -> str:
    """A wrong link count on the root directory: XFS mounts it, xfs_repair -n finds it."""
    root = sh("xfs_db", "-r", "-c", "sb 0", "-c", "print rootino", device).stdout.split("=")[1].strip()
    sh("xfs_db", "-x", "-c", f"inode {root}", "-c", "write core.nlinkv2 7", device)
    return f"would have reset inode {root} nlinks from 7"


def corrupt_ext4(device: str) -> str:
    sh("debugfs", "-w", "-R", "sif <2> links_count 7", device)
    return "Inode 2 ref count is 7"


@pytest.mark.parametrize("fstype", ["xfs", "ext4"])
def test_a_corrupted_filesystem_fails_with_problems(drill: Drill, fstype: str) -> None:
    # Given a damaged filesystem that still mounts, beside a clean one
    volume = XFS_VOLUME if fstype == "xfs" else EXT4_VOLUME
    device = drill.xfs(volume) if fstype == "xfs" else drill.ext4(volume)
    finding = corrupt_xfs(device) if fstype == "xfs" else corrupt_ext4(device)
    drill.ext4(OTHER_VOLUME)

    # When the drill checks the set
    run = drill.run([volume, OTHER_VOLUME])

    # Then the damaged one fails with the check's own words, the clean one is still checked
    assert run.report["status"] == "failed"
    damaged = only_filesystem(run, volume)
    assert damaged["mount"] == "ok"
    assert damaged["check"] == "problems"
    assert finding in str(damaged["detail"])
    assert only_filesystem(run, OTHER_VOLUME)["check"] == "clean"
    (problem,) = run.report["problems"]
    assert problem.startswith(f"{volume}: ")
    assert "found problems" in problem


def test_a_filesystem_that_does_not_mount_fails_with_the_kernel_s_reason(drill: Drill) -> None:
    # Given an XFS with a feature this kernel does not know (blkid still sees an XFS)
    device = drill.xfs(XFS_VOLUME)
    incompat = sh("xfs_db", "-r", "-c", "sb 0", "-c", "print features_incompat", device).stdout.split("=")[1]
    unknown = hex(int(incompat.strip(), 16) | 0x40000000)
    sh("xfs_db", "-x", "-c", "sb 0", "-c", f"write -d features_incompat {unknown}", device)

    run = drill.run([XFS_VOLUME], Command=command("echo should not run"))

    assert run.report["status"] == "failed"
    filesystem = only_filesystem(run, XFS_VOLUME)
    assert filesystem["mount"] == "failed"
    assert filesystem["mountpoint"] is None
    assert "unknown incompatible features" in str(filesystem["detail"])
    assert any(p.startswith(f"{XFS_VOLUME}: ") and "does not mount" in p for p in run.report["problems"])
    # the command would see part of the set: it does not run
    assert run.report["command"]["ran"] is False


def test_a_missing_device_fails_naming_the_volume_and_the_rest_is_still_checked(drill: Drill) -> None:
    drill.ext4(EXT4_VOLUME)

    run = drill.run([XFS_VOLUME, EXT4_VOLUME], DeviceWaitSeconds="0", Command=command("exit 0"))

    assert run.report["status"] == "failed"
    missing, present = run.report["volumes"]
    assert missing == {
        "volumeId": XFS_VOLUME,
        "device": str(drill.by_id / nvme.device_name(XFS_VOLUME)),
        "found": "missing",
        "filesystems": [],
    }
    assert present["filesystems"][0]["check"] == "clean"
    (problem,) = run.report["problems"]
    assert problem.startswith(f"{XFS_VOLUME}: its device {missing['device']} did not appear within 0s")
    assert run.report["command"] == {
        "given": True,
        "ran": False,
        "exitCode": None,
        "timedOut": False,
        "seconds": None,
        "output": "",
    }


def test_a_device_that_appears_while_the_drill_waits_is_checked(drill: Drill) -> None:
    # Given a volume whose attachment is still settling: its device is not there yet
    image = drill.image(XFS_VOLUME, XFS_MIB)
    sh("mkfs.xfs", "-q", str(image))
    device = drill.attach(image)
    drill.by_id.mkdir()
    script = write_script("drill-check", drill.params([XFS_VOLUME], DeviceWaitSeconds="60"), drill.root)
    process = subprocess.Popen(
        ["sh", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=drill.env(),
        start_new_session=True,
    )
    try:
        # When it appears once the drill is waiting for it
        assert process.stderr is not None
        said = []
        while not said or "waiting up to 60s for the devices of 1 volume(s)" not in said[-1]:
            said.append(process.stderr.readline())
            assert said[-1], f"the drill ended without waiting: {said}"
        drill.link(XFS_VOLUME, device)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    # Then it is checked and passes
    assert process.returncode == 0, stderr
    assert only_filesystem(Run(0, stdout, stderr, parse_report(stdout)), XFS_VOLUME)["check"] == "clean"
    assert drill.leftovers() == []


def test_a_device_without_a_filesystem_is_raw_and_another_signature_unsupported(drill: Drill) -> None:
    drill.device(XFS_VOLUME, drill.image("raw", EXT4_MIB), "loop")
    swap = drill.image("swap", EXT4_MIB)
    sh("mkswap", "-q", str(swap))
    drill.device(OTHER_VOLUME, swap, "loop")

    run = drill.run([XFS_VOLUME, OTHER_VOLUME])

    assert run.report["status"] == "passed", run.report["problems"]
    raw, other = run.report["volumes"]
    assert (raw["found"], raw["filesystems"]) == ("raw", [])
    assert other["found"] == "filesystem"
    assert other["filesystems"][0] | {"seconds": 0} == {
        "device": drill.loops[1],
        "type": "swap",
        "mount": "skipped",
        "check": "unsupported",
        "detail": None,
        "mountpoint": None,
        "seconds": 0,
    }


@pytest.mark.parametrize("kind", ["loop", "file"])
def test_each_partition_is_checked_and_mounted_at_its_own_mountpoint(drill: Drill, kind: str) -> None:
    # Given a volume with a partition table: ext4 in partition 1, XFS in 2, nothing in 3
    image = drill.image(XFS_VOLUME, 1 + EXT4_MIB + XFS_MIB + 8)
    mbr(image, [(1, EXT4_MIB), (1 + EXT4_MIB, XFS_MIB), (1 + EXT4_MIB + XFS_MIB, 8)])
    setup = drill.attach(image, partitions=True)
    first, second, _ = partitions_of(setup)
    sh("mkfs.ext4", "-q", "-F", first)
    sh("mkfs.xfs", "-q", second)
    drill.fill(first, "ext4", "p1")
    drill.fill(second, "xfs", "p2")
    if kind == "file":  # the image itself is the volume
        sh("losetup", "-d", setup)
        drill.loops.remove(setup)
        wait_until(lambda: not loops_of(image))
        drill.link(XFS_VOLUME, image)
    else:
        drill.link(XFS_VOLUME, setup)

    # When the drill checks it, the command listing what it sees
    run = drill.run([XFS_VOLUME], Command=command('for m in $VSA_DRILL_MOUNTS; do cat "$m/hello.txt"; done'))

    # Then each filesystem is checked, and mounted at <volume>-p<N>
    assert run.report["status"] == "passed", run.report["problems"]
    (entry,) = run.report["volumes"]
    assert entry["found"] == "partitions"
    summary = [(f["type"], f["mount"], f["check"], f["mountpoint"]) for f in entry["filesystems"]]
    assert summary == [
        ("ext4", "ok", "clean", str(drill.mount_dir / f"{XFS_VOLUME}-p1")),
        ("xfs", "ok", "clean", str(drill.mount_dir / f"{XFS_VOLUME}-p2")),
        (None, "skipped", "raw", None),
    ]
    assert run.report["command"]["output"] == "data of p1\ndata of p2\n"


@pytest.mark.parametrize("exit_code", [0, 3])
def test_the_command_sees_the_filesystems_read_only_and_its_exit_code_counts(
    drill: Drill, exit_code: int
) -> None:
    # Given two volumes, and an operator command that reads, tries to write, then exits
    drill.xfs(XFS_VOLUME)
    drill.ext4(EXT4_VOLUME, "file")
    script = (
        'for m in $VSA_DRILL_MOUNTS; do cat "$m/hello.txt"; '
        'if touch "$m/new" 2>/dev/null; then echo "WROTE $m"; else echo "read-only $m"; fi; done; '
        f'echo "cwd $PWD"; exit {exit_code}'
    )

    run = drill.run([XFS_VOLUME, EXT4_VOLUME], Command=command(script))

    mounts = [drill.mount_dir / XFS_VOLUME, drill.mount_dir / EXT4_VOLUME]
    result = run.report["command"]
    assert result["output"] == (
        f"data of {XFS_VOLUME}\nread-only {mounts[0]}\ndata of {EXT4_VOLUME}\nread-only {mounts[1]}\n"
        f"cwd {drill.mount_dir}\n"
    )
    assert (result["given"], result["ran"], result["exitCode"], result["timedOut"]) == (
        True,
        True,
        exit_code,
        False,
    )
    assert result["seconds"] > 0
    if exit_code == 0:
        assert run.report["status"] == "passed"
        assert run.report["problems"] == []
    else:
        assert run.report["status"] == "failed"
        assert run.report["problems"] == [
            "the command exited 3: the application's own check did not accept the restored data "
            "(see command.output)"
        ]


def test_a_command_that_outlasts_its_timeout_is_stopped_and_fails(drill: Drill) -> None:
    drill.xfs(XFS_VOLUME)

    run = drill.run(
        [XFS_VOLUME],
        Command=command('echo started; sleep 600 & wait; echo "not reached"'),
        CommandTimeoutSeconds="1",
    )

    result = run.report["command"]
    assert run.report["status"] == "failed"
    assert result["timedOut"] is True
    assert result["exitCode"] == 124
    assert 1 <= result["seconds"] < 1 + 5 + 5
    assert result["output"] == "started\n"
    assert any("still running after 1s" in p for p in run.report["problems"])


def processes_named(name: str) -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if name.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return found


def test_sigterm_from_the_agent_stops_the_command_and_unmounts_everything(drill: Drill) -> None:
    # Given a drill whose command is running on the mounted set
    drill.xfs(XFS_VOLUME)
    drill.ext4(EXT4_VOLUME, "file")
    started = drill.root / "command-started"
    name = f"vsa-drill-test-{uuid.uuid4().hex}"
    script = write_script(
        "drill-check",
        drill.params(
            [XFS_VOLUME, EXT4_VOLUME], Command=command(f"touch {started}; exec -a {name} sleep 600")
        ),
        drill.root,
    )
    process = subprocess.Popen(
        ["sh", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=drill.env(),
        start_new_session=True,
    )
    try:
        assert wait_until(started.exists, 60), "the command did not start"

        # When the agent stops the command's process group, as at its timeout
        os.killpg(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    # Then it reports the interruption, the command is gone, nothing is left mounted
    report = parse_report(stdout)
    assert process.returncode == 1, stderr
    assert report["status"] == "failed"
    assert report["command"]["ran"] is True
    assert any(p.startswith("stopped by SIGTERM") for p in report["problems"])
    assert wait_until(lambda: not processes_named(name), 10), "the command outlived the drill"
    assert drill.leftovers() == []


BAD_PARAMETERS = [
    ({"Volumes": ""}, "Volumes: give at least one EBS volume id"),
    ({"Volumes": "vol-123"}, "volume id 'vol-123'"),
    ({"Volumes": "vol-0123456789abcdef"}, "volume id 'vol-0123456789abcdef'"),
    ({"Volumes": f"{XFS_VOLUME},{XFS_VOLUME}"}, f"volume {XFS_VOLUME} is listed twice"),
    ({"Volumes": f"{XFS_VOLUME},"}, "separated by single commas"),
    ({"Volumes": ",".join(f"vol-{n:08x}" for n in range(65))}, "65 volumes; at most 64"),
    ({"DeviceDir": "dev//by-id"}, "DeviceDir 'dev//by-id'"),
    ({"DeviceDir": "../by-id"}, "DeviceDir '../by-id'"),
    ({"MountDir": "/"}, "MountDir '/'"),
    ({"MountDir": "/run/../etc"}, "MountDir '/run/../etc'"),
    ({"CommandTimeoutSeconds": "0"}, "CommandTimeoutSeconds '0'"),
    ({"CommandTimeoutSeconds": "3601"}, "CommandTimeoutSeconds '3601'"),
    ({"DeviceWaitSeconds": "301"}, "DeviceWaitSeconds '301'"),
    ({"Command": "AAAAA"}, "Command: the base64url"),
    ({"Command": command("   ")}, "Command: the base64url"),
]


@pytest.mark.parametrize(("values", "complaint"), BAD_PARAMETERS, ids=[c for _, c in BAD_PARAMETERS])
def test_bad_parameters_fail_before_anything_is_touched(
    drill: Drill, values: dict[str, str], complaint: str
) -> None:
    # Given a good volume, so that a drill that went on would mount it
    device = drill.xfs(XFS_VOLUME)

    # When the script is given a value that slips past (or bypasses) the patterns
    run = drill.run([XFS_VOLUME], check_patterns=False, **values)

    # Then it fails naming the value, and looked at nothing (drill.run checked nothing was left)
    assert run.report["status"] == "failed"
    assert any(complaint in p for p in run.report["problems"]), run.report["problems"]
    assert run.report["volumes"] == []
    assert sh("blkid", "-p", "-o", "value", "-s", "TYPE", device).stdout.strip() == "xfs"


def test_a_mount_dir_already_in_use_is_refused(drill: Drill) -> None:
    # Given a filesystem still mounted under MountDir (left by a drill that was killed)
    drill.xfs(XFS_VOLUME)
    stale = drill.mount_dir / XFS_VOLUME
    stale.mkdir(parents=True)
    sh("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(stale))

    run = run_document("drill-check", drill.params([XFS_VOLUME]), drill.root, env=drill.env(), timeout=60)

    # Then the drill refuses, and leaves that mount as it was
    assert run.returncode == 1
    assert run.report["volumes"] == []
    (problem,) = run.report["problems"]
    assert problem.startswith(f"MountDir {drill.mount_dir} already has filesystems mounted ({stale})")
    assert sh("findmnt", "-rn", "-o", "FSTYPE", "--mountpoint", str(stale)).stdout.strip() == "tmpfs"
