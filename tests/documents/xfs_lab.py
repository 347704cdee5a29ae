"""Real kernel objects for the host documents: XFS filesystems on loop devices, mounted under
the test's tmp dir, and the scripts run as a host would run them.

Everything is undone at teardown, even after a failure, in the only order that cannot hang:
stop the watchdogs the test armed, thaw (a frozen filesystem blocks its writers, and one
unmounted while frozen is still held frozen by the kernel: a new mount gets it back and thaws
it), end the test's writers, unmount, detach the loop device.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.prerequisites import require

TOOLS = ("mkfs.xfs", "losetup", "mount", "umount", "fsfreeze", "findmnt", "setsid", "flock", "timeout")


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop devices, mount, fsfreeze)"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"missing {', '.join(absent)} (tools/install.sh installs xfsprogs and util-linux)"
    if "xfs" not in Path("/proc/filesystems").read_text().split():
        return "the kernel has no XFS (/proc/filesystems)"
    return None


def sh(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=check)


def is_mountpoint(path: Path) -> bool:
    return sh("findmnt", "-n", "--mountpoint", str(path), check=False).returncode == 0


def superblock_alive(device: str) -> bool:
    """The kernel still holds an XFS filesystem on ``device`` (mounted or not)."""
    return Path("/sys/fs/xfs", Path(device).name).is_dir()


@dataclass
class Fs:
    image: Path
    device: str
    mountpoint: Path


@dataclass
class Lab:
    """One test's kernel objects, state dir and processes; ``cleanup`` undoes all of it."""

    root: Path
    state_dir: Path
    filesystems: list[Fs] = field(default_factory=list)
    mounts: list[Path] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def xfs(self, name: str = "data") -> Fs:
        image = self.root / f"{name}.img"
        mountpoint = self.root / "mnt" / name
        mountpoint.mkdir(parents=True)
        sh("truncate", "-s", "300M", str(image))  # XFS's minimum size
        # (one losetup at a time on the machine: -f finds a free device, then takes it, and two
        # labs side by side could both find the same one)
        device = sh(
            "flock", "/run/vsa-lab-losetup.lock", "losetup", "-f", "--show", str(image)
        ).stdout.strip()
        fs = Fs(image, device, mountpoint)
        self.filesystems.append(fs)
        sh("mkfs.xfs", "-q", device)
        sh("mount", "-t", "xfs", device, str(mountpoint))
        return fs

    def tmpfs(self, name: str = "scratch") -> Path:
        mountpoint = self.root / "mnt" / name
        mountpoint.mkdir(parents=True)
        sh("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mountpoint))
        self.mounts.append(mountpoint)
        return mountpoint

    def spawn(self, *args: str, **kwargs: object) -> "subprocess.Popen[bytes]":
        process = subprocess.Popen(args, **kwargs)  # type: ignore[call-overload]
        self.processes.append(process)
        return process

    def writer(self, fs: Fs, name: str = "written") -> "subprocess.Popen[bytes]":
        """A process that creates a file on ``fs`` and flushes it: it blocks while ``fs`` is frozen."""
        target = fs.mountpoint / name
        return self.spawn("bash", "-c", f"echo data > {target} && sync -f {target}", start_new_session=True)

    def watchdog_pids(self) -> list[int]:
        """The freeze watchdogs guarding this lab's filesystems. A state dir shared with tests
        running beside this one (/run/vsa-freeze) holds theirs too: a watchdog is this lab's when
        the mountpoints of its backup (``<backup>.mounts``) are under the lab's root."""
        pids = []
        for pid_file in self.state_dir.glob("*.watchdog.pid"):
            mounts = pid_file.with_name(pid_file.name.removesuffix(".watchdog.pid") + ".mounts")
            try:
                listed = mounts.read_text().split() if mounts.exists() else []
            except OSError:
                listed = []
            if listed and not any(Path(m).is_relative_to(self.root) for m in listed):
                continue
            try:
                pid = int(pid_file.read_text().split()[0])
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if b"vsa-freeze-watchdog" in cmdline:
                pids.append(pid)
        return pids

    def cleanup(self) -> None:
        for pid in self.watchdog_pids():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for fs in self.filesystems:
            if is_mountpoint(fs.mountpoint):
                sh("fsfreeze", "-u", str(fs.mountpoint), check=False)
            elif superblock_alive(fs.device):
                rescue = self.root / f"rescue-{Path(fs.device).name}"
                rescue.mkdir(exist_ok=True)
                if sh("mount", fs.device, str(rescue), check=False).returncode == 0:
                    sh("fsfreeze", "-u", str(rescue), check=False)
                    sh("umount", str(rescue), check=False)
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        for mountpoint in [*self.mounts, *(fs.mountpoint for fs in self.filesystems)]:
            if is_mountpoint(mountpoint) and sh("umount", str(mountpoint), check=False).returncode != 0:
                sh("umount", "-l", str(mountpoint), check=False)
        for fs in self.filesystems:
            for _ in range(50):  # the kernel lets go of a device a moment after umount
                if (
                    sh("losetup", "-d", fs.device, check=False).returncode == 0
                    or not Path(f"/sys/block/{Path(fs.device).name}/loop").exists()
                ):
                    break
                time.sleep(0.1)
            fs.image.unlink(missing_ok=True)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    reason = _missing()
    require(reason)
    state_dir = tmp_path / "state"
    the_lab = Lab(root=tmp_path, state_dir=state_dir)
    try:
        yield the_lab
    finally:
        the_lab.cleanup()
