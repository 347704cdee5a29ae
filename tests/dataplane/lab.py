"""QEMU guests running Debian's kernel, for the data-plane tier: controllers and a host.

Each guest is booted by virtme-ng (``.dataplane/venv``) with the kernel unpacked in
``.dataplane/kernel`` (``tools/dataplane-install.sh``), under QEMU's TCG (``/dev/kvm`` is not
usable here), on a copy-on-write view of this machine's root file system shared read-only
over virtio-9p: the guests run this machine's own bash, python3, nvme-cli, fio and XFS tools.

* **Agent.** The guest's init runs ``guest_agent.sh`` (a stand-in for the SSM agent) on the
  guest's own directory, shared read-write: a script dropped into ``req/`` is run as SSM's
  agent runs a command (``sh -c <file>``, root, its own process group) and its stdout, stderr
  and exit code come back in ``out/``. ``Guest.document`` renders the product's document with
  ``tools/documents.py`` (``render_script``, patterns checked as SendCommand checks them) and
  runs exactly that text.
* **Network.** One point-to-point link per controller (QEMU ``-netdev socket,udp=`` on
  loopback, no host networking): controller ``i`` is ``10.77.<i>.1`` on its eth0, the host is
  ``10.77.<i>.2`` on its eth``i``. The addresses exist only inside the emulated links.
* **The Multi-Attach volume.** One sparse raw image, attached to every controller as a
  virtio disk whose serial is the volume id (``cache=none``: direct IO, no host page cache
  between two writers; ``share-rw=on``: two QEMUs may open it), which the agent names
  ``/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<hex>`` as a Nitro instance does, so
  configure-target resolves the volume exactly as on EC2.
* **Scheduling.** From ``boot_all`` to ``close`` the lab samples how long each guest's emulated
  CPU waited on this machine's run queue (``starvation.py``), the evidence that tells a timeout
  the machine's load made fire from one the product set too short.

Every wait has a deadline; a guest whose QEMU died fails the wait at once. ``Lab.close``
kills every QEMU it started (by the PID QEMU wrote) and its launcher's process group.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.dataplane.starvation import GuestTime, SchedulingMonitor, share_nice
from tests.documents_tool import documents as tool
from tests.prerequisites import require

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".dataplane"
KERNEL = Path(os.environ.get("VSA_DATAPLANE_KERNEL", STATE / "kernel"))
VNG = STATE / "venv" / "bin" / "vng"
AGENT = Path(__file__).resolve().parent / "guest_agent.sh"
GUEST_MEMORY = "1G"
HOST_MODULES = "virtio_net virtio_blk nvme-tcp xfs"  # nvme-tcp at boot: a host prerequisite
CONTROLLER_MODULES = "virtio_net virtio_blk"  # configure-target loads nvmet and nvmet-tcp itself


PROGRAM_DIRS = ("bin", "sbin", "libexec", "lib/*-linux-gnu", "lib/python3*")
"""The directories under /usr that programs are loaded from (/bin, /sbin and /lib point into
/usr), as globs (the multiarch and Python directories are named by the machine), copied into the
guests' program image; not /usr whole: /usr/lib/modules holds virtme-ng's mount of the guest
kernel's modules."""
PROGRAM_IMAGE_SERIAL = "vsaprograms"  # virtio-blk serials are at most 20 bytes


def program_image() -> Path:
    """A read-only ext4 image of this machine's PROGRAM_DIRS, built once per installed-package
    state and shared by every guest (guest_agent.sh binds its directories over /usr's).

    virtme-ng mounts the host's root over 9p uncached, so under TCG each exec re-reads its binary
    and libraries through 9p (~0.5 s for /bin/true, 5-9 s for a python3 start). Read through a
    virtio disk, the guest keeps them in its own page cache. The image is named by dpkg's status
    file, so a package installed since is never missing from it; it is built beside, then renamed
    in, so a lab never opens a half-written one."""
    status = Path("/var/lib/dpkg/status").stat()
    sources = sorted(d for pattern in PROGRAM_DIRS for d in Path("/usr").glob(pattern) if d.is_dir())
    listed = hashlib.sha256("\n".join(map(str, sources)).encode()).hexdigest()[:8]
    image = STATE / f"programs-{int(status.st_mtime)}-{status.st_size}-{listed}.img"
    if image.exists():
        return image
    work = STATE / f".programs-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    for source in sources:
        rel = source.relative_to("/usr")
        if source.is_dir():
            (work / "tree" / rel).parent.mkdir(parents=True, exist_ok=True)
            # hard links where /usr and the state directory share a file system (instant), else a copy
            linked = subprocess.run(["cp", "-al", str(source), str(work / "tree" / rel)], capture_output=True)
            if linked.returncode != 0:
                shutil.rmtree(work / "tree" / rel, ignore_errors=True)
                subprocess.run(["cp", "-a", str(source), str(work / "tree" / rel)], check=True)
    size = sum(f.stat().st_size for f in (work / "tree").rglob("*") if f.is_file() and not f.is_symlink())
    megabytes = size * 5 // 4 // 2**20 + 256  # room for the file system's own metadata
    built = work / "programs.img"
    subprocess.run(
        [
            "mke2fs",
            "-q",
            "-t",
            "ext4",
            "-O",
            "^has_journal",
            "-L",
            "vsaprograms",
            "-d",
            str(work / "tree"),
            str(built),
            f"{megabytes}M",
        ],
        check=True,
    )
    for old in STATE.glob("programs-*.img"):
        if old != image:
            old.unlink(missing_ok=True)  # a running guest keeps its open file
    built.rename(image)
    shutil.rmtree(work, ignore_errors=True)
    return image


def kernel_image() -> Path | None:
    images = sorted((KERNEL / "boot").glob("vmlinuz-*"))
    return images[-1] if images else None


def kernel_package() -> str:
    try:
        fields = dict(
            line.split(": ", 1) for line in (KERNEL / "PACKAGE").read_text().splitlines() if ": " in line
        )
    except OSError:
        return "unknown"
    return f"{fields.get('Package', '?')} {fields.get('Version', '?')}"


QEMU_MAJOR_MIN = 10
"""QEMU 7.2 (Debian bookworm's) corrupts a TCG guest's RFLAGS now and then under network load
and the guest's kernel dies (tools/dataplane-install.sh); 10.0 is the release the tier runs on."""


def qemu_version() -> str:
    """``qemu-system-x86_64 --version``'s number (``10.0.2``), or "" when there is none."""
    try:
        first = subprocess.run(
            ["qemu-system-x86_64", "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.split("\n", 1)[0]
    except (OSError, subprocess.TimeoutExpired):
        return ""
    words = first.split()
    return words[3] if len(words) > 3 and words[:3] == ["QEMU", "emulator", "version"] else ""


def missing_prerequisites() -> list[str]:
    """What the tier needs and this machine lacks (tools/dataplane-install.sh installs it)."""
    missing = []
    version = qemu_version()
    if version and int(version.split(".")[0]) < QEMU_MAJOR_MIN:
        missing.append(f"QEMU {QEMU_MAJOR_MIN} or newer (this is {version}: its TCG corrupts guests' RFLAGS)")
    if kernel_image() is None:
        missing.append(".dataplane/kernel (the guest kernel)")
    if not VNG.exists():
        missing.append(".dataplane/venv (virtme-ng)")
    for command in ("qemu-system-x86_64", "nvme", "fio", "mkfs.xfs", "ip", "dmsetup", "mke2fs"):
        if not any(
            (Path(d) / command).exists() for d in [*os.environ.get("PATH", "").split(":"), "/usr/sbin"]
        ):
            missing.append(command)
    return missing


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class GuestError(AssertionError):
    """A guest did not answer in time, or died; the message carries its logs' tails."""


@dataclass
class Result:
    name: str
    rc: int
    stdout: str
    stderr: str
    started: float  # guest clock, epoch seconds
    ended: float

    @property
    def report(self) -> dict[str, Any]:
        """The document's report: its last stdout line, JSON."""
        lines = self.stdout.strip().splitlines()
        assert lines, f"{self.name} printed nothing on stdout; stderr:\n{self.stderr}"
        report: dict[str, Any] = json.loads(lines[-1])
        return report

    def ok(self) -> Result:
        assert self.rc == 0, f"{self.name} exited {self.rc}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"
        return self


@dataclass
class Link:
    """A point-to-point Ethernet link between a controller (its eth0) and the host."""

    index: int
    controller_port: int
    host_port: int

    @property
    def controller_address(self) -> str:
        return f"10.77.{self.index}.1"

    @property
    def host_address(self) -> str:
        return f"10.77.{self.index}.2"

    def mac(self, side: int) -> str:
        return f"52:54:00:77:{self.index:02x}:{side:02x}"


HANG_SECONDS = 2400
"""pytest-timeout's guard on one tier test: only a hang. What a test waits for has its deadline
on the guests' own time (``Guest.wait``, ``GuestTime``), while a scenario's length on this
machine's clock follows the machine's load (docs/measurements.md, the test command)."""

_ids = itertools.count(1)


def _spent(clock: GuestTime, timeout: float) -> str:
    guests, wall = clock.elapsed()
    return (
        f"{timeout} s of the guests' time ({guests:.0f} s of theirs, {wall:.0f} s on this machine's"
        f" clock: the most starved guest waited {wall - guests:.0f} s for its CPUs)"
    )


@dataclass
class Guest:
    name: str
    dir: Path
    netdevs: list[tuple[int, int, str]]  # (local UDP port, remote UDP port, MAC), eth0, eth1, ...
    addresses: list[str]
    modules: str
    volumes: dict[str, Path] = field(default_factory=dict)  # volume id -> backing image
    launcher: subprocess.Popen[bytes] | None = None
    launched_at: float = 0.0
    boot_seconds: float | None = None
    lab_guests: dict[str, Guest] | None = field(default=None, repr=False, compare=False)
    """Its lab's guests (``Lab.guests``, itself among them): its deadlines count their time."""

    # --- lifecycle ---------------------------------------------------------------------------
    def qemu_options(self) -> str:
        # QMP: the test grows a volume as EBS does for an attached one (block_resize: the
        # guest's virtio disk announces its new capacity)
        options = [f"-pidfile {self.dir}/qemu.pid", f"-qmp unix:{self.dir}/qmp.sock,server=on,wait=off"]
        # QEMU's threads named (its vCPU "CPU 0/TCG"), for the lab's SchedulingMonitor; QEMU
        # merges this -name's options into the one virtme-ng passes (the guest's name)
        options.append(f"-name {self.name},debug-threads=on")
        # the agent's doorbell: a virtio-serial port (guest_agent.sh sleeps on it; ``ring``
        # writes a line into it) backed by a FIFO pair QEMU holds open, so the guest's side is
        # always connected (a socket chardev with no client reads as end-of-file at once, and
        # the agent's sleep would spin)
        options.append(
            f"-device virtio-serial-pci,id=agentbus -chardev pipe,id=agent,path={self.dir}/agent"
            " -device virtserialport,bus=agentbus.0,chardev=agent,name=vsa.agent"
        )
        for i, (local, remote, mac) in enumerate(self.netdevs):
            options.append(
                f"-netdev socket,id=link{i},udp=127.0.0.1:{remote},localaddr=127.0.0.1:{local}"
                f" -device virtio-net-pci,netdev=link{i},mac={mac}"
            )
        for i, (volume, image) in enumerate(self.volumes.items()):
            # cache=none: O_DIRECT on the image, so two controllers never cache the shared volume;
            # file.locking=off: each QEMU may resize it (QEMU's image locks share no "resize"
            # permission between processes, even with share-rw)
            options.append(
                f"-drive file={image},if=none,id=vol{i},format=raw,cache=none,aio=threads,file.locking=off"
                f" -device virtio-blk-pci,drive=vol{i},serial={volume.replace('-', '')},share-rw=on"
            )
        # the program image last, so the volumes keep their disk names (guest_agent.sh finds it by serial)
        options.append(
            f"-drive file={program_image()},if=none,id=programs,format=raw,readonly=on,file.locking=off"
            f" -device virtio-blk-pci,drive=programs,serial={PROGRAM_IMAGE_SERIAL}"
        )
        return " ".join(options)

    def boot(self) -> None:
        image = kernel_image()
        assert image is not None, "no guest kernel: run tools/dataplane-install.sh"
        for stale in ("ready", "qemu.pid"):
            (self.dir / stale).unlink(missing_ok=True)
        for sub in ("req", "run", "out"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for fifo in ("agent.in", "agent.out"):  # the doorbell's pipe (qemu_options)
            if not (self.dir / fifo).is_fifo():
                (self.dir / fifo).unlink(missing_ok=True)
                os.mkfifo(self.dir / fifo)
        volumes = " ".join(self.volumes)
        (self.dir / "boot.env").write_text(
            f"ADDRESSES='{' '.join(self.addresses)}'\nMODULES='{self.modules}'\nVOLUMES='{volumes}'\n"
        )
        argv = [
            str(VNG),
            "--run",
            str(image),
            "--disable-kvm",  # TCG: this machine's /dev/kvm cannot run a normal kernel
            "--force-9p",
            "--memory",
            GUEST_MEMORY,
            "--cpus",
            "1",
            "--verbose",  # the kernel's console (dmesg) into console.log
            # the kernel's boot-time check that the IO-APIC timer fires panics ("IO-APIC + timer
            # doesn't work!") when a busy host leaves the emulated CPU no time in its window;
            # QEMU's timer works, so the check is skipped (as cloud images boot their guests)
            "--append",
            "no_timer_check",
            "--name",
            self.name,
            "--rwdir",
            str(self.dir),
            "--exec",
            f"bash {AGENT} {self.dir}",
            f"--qemu-opts={self.qemu_options()}",
        ]
        console = (self.dir / "console.log").open("ab")
        env = dict(os.environ, PATH=f"{VNG.parent}:{os.environ.get('PATH', '')}")
        self.launched_at = time.time()
        self.boot_seconds = None
        self.launcher = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        share_nice(self.launcher.pid)  # the tier's nice, given to the guest's own session
        console.close()

    def qemu_pid(self) -> int | None:
        try:
            return int((self.dir / "qemu.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        return self.launcher is not None and self.launcher.poll() is None

    def guest_time(self) -> GuestTime:
        """A clock of the lab's guests' own time, started now: a deadline on it fires when they
        had the time and did not finish, not when this machine kept them off its CPUs."""
        lab = self.lab_guests if self.lab_guests is not None else {self.name: self}
        return GuestTime(lambda: [guest.qemu_pid() for guest in lab.values()]).start()

    def wait_ready(self, timeout: float = 120) -> float:
        clock = self.guest_time()
        while not (self.dir / "ready").exists():
            if not self.alive():
                raise GuestError(f"{self.name}: QEMU exited while booting\n{self.diagnostics()}")
            if clock.expired(timeout):
                spent = _spent(clock, timeout)
                raise GuestError(f"{self.name}: not ready after {spent}\n{self.diagnostics()}")
            time.sleep(0.1)
        if self.boot_seconds is None:
            self.boot_seconds = round(time.time() - self.launched_at, 1)
        return self.boot_seconds

    def kill(self) -> None:
        """SIGKILL to QEMU (an abrupt loss: no shutdown, no FIN on any connection), then to
        what is left of the launcher's process group (started in its own session here)."""
        pid = self.qemu_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.launcher is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.launcher.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.launcher.wait(timeout=10)
        (self.dir / "qemu.pid").unlink(missing_ok=True)

    def diagnostics(self, lines: int = 40) -> str:
        parts = []
        for log in ("agent.log", "console.log"):
            path = self.dir / log
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {self.name} {log} (last {lines} lines)\n" + "\n".join(tail))
        return "\n".join(parts)

    # --- commands ----------------------------------------------------------------------------
    def submit(self, script: str, name: str = "sh") -> str:
        """Hand ``script`` to the agent; returns the request id (``wait`` for its result)."""
        request = f"{next(_ids):04d}-{name}"
        tmp = self.dir / "req" / f".{request}.tmp"
        tmp.write_text(script)
        tmp.chmod(0o755)
        tmp.rename(self.dir / "req" / f"{request}.sh")
        self.ring()
        return request

    def ring(self) -> None:
        """Wake the agent (a line into its virtio-serial port). Best effort: an agent not woken
        finds the request at its next look, within 2 s."""
        with contextlib.suppress(OSError):  # ENXIO: no QEMU holds the FIFO (not booted, or gone)
            fd = os.open(self.dir / "agent.in", os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, b"\n")
            finally:
                os.close(fd)

    def wait(self, request: str, timeout: float) -> Result:
        out = self.dir / "out"
        clock = self.guest_time()
        while not (out / f"{request}.rc").exists():
            if not self.alive():
                raise GuestError(f"{self.name}: QEMU is gone; {request} has no result\n{self.diagnostics()}")
            if clock.expired(timeout):
                stderr = (
                    (out / f"{request}.err").read_text(errors="replace")
                    if (out / f"{request}.err").exists()
                    else ""
                )
                raise GuestError(
                    f"{self.name}: {request} still running after {_spent(clock, timeout)}\n"
                    f"stderr so far:\n{stderr}\n"
                    f"{self.diagnostics()}"
                )
            time.sleep(0.1)
        started, ended = (float(x) for x in (out / f"{request}.times").read_text().split())
        return Result(
            name=f"{self.name}:{request}",
            rc=int((out / f"{request}.rc").read_text().strip()),
            stdout=(out / f"{request}.out").read_text(errors="replace"),
            stderr=(out / f"{request}.err").read_text(errors="replace"),
            started=started,
            ended=ended,
        )

    def sh(self, script: str, timeout: float = 60, name: str = "sh") -> Result:
        """Run a bash snippet in the guest (test plumbing, not a product document)."""
        return self.wait(self.submit("#!/bin/bash\nset -uo pipefail\n" + script, name), timeout)

    def document(self, document: str, timeout: float | None = None, **values: str) -> Result:
        """Run the product's document, rendered from documents/ by tools/documents.py as the SSM
        agent would receive it; ``timeout`` defaults to the document's own ``timeoutSeconds``."""
        script = tool.render_script(document, values)
        limit = timeout if timeout is not None else tool.load(document).timeout_seconds
        return self.wait(self.submit(script, document), limit)

    def qmp(self, command: str, **arguments: Any) -> dict[str, Any]:
        """One QMP command to this guest's QEMU (capabilities negotiated first); its return."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(str(self.dir / "qmp.sock"))
            stream = sock.makefile("rwb")
            json.loads(stream.readline())  # the greeting
            reply: dict[str, Any] = {}
            for message in ({"execute": "qmp_capabilities"}, {"execute": command, "arguments": arguments}):
                stream.write(json.dumps(message).encode() + b"\n")
                stream.flush()
                reply = json.loads(stream.readline())
                while "event" in reply:  # asynchronous events come between replies
                    reply = json.loads(stream.readline())
                if "error" in reply:
                    raise GuestError(f"{self.name}: QMP {message['execute']}: {reply['error']}")
            return dict(reply.get("return") or {})

    def start_document(self, document: str, **values: str) -> str:
        return self.submit(tool.render_script(document, values), document)


@dataclass
class Lab:
    """Controllers ``c0..c<n-1>`` and one host, each controller on its own link to the host,
    every controller attached to the one shared volume image."""

    root: Path
    controllers: int
    volume: str
    spare: str = ""
    """A second volume attached to every controller from the start, exported only once a test
    adds it to the array (the state after EBS attached it: the product's part starts there)."""
    links: list[Link] = field(default_factory=list)
    guests: dict[str, Guest] = field(default_factory=dict)
    image: Path | None = None
    monitor: SchedulingMonitor | None = None
    """How long each guest's emulated CPU waited for this machine's (starvation.py), from the
    first boot_all to close: a timeout that fired on a guest the machine did not run is told
    from one the product set too short."""

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.image = self.root / "volume.img"
        with self.image.open("wb") as f:
            f.truncate(512 * 1024 * 1024)  # sparse; XFS needs 300 MB at least
        volumes = {self.volume: self.image}
        if self.spare:
            volumes[self.spare] = self.root / "spare.img"
            with volumes[self.spare].open("wb") as f:
                f.truncate(256 * 1024 * 1024)
        self.links = [Link(i, free_udp_port(), free_udp_port()) for i in range(self.controllers)]
        for link in self.links:
            name = f"c{link.index}"
            self.guests[name] = Guest(
                name=name,
                dir=self.root / name,
                netdevs=[(link.controller_port, link.host_port, link.mac(1))],
                addresses=[f"{link.controller_address}/24"],
                modules=CONTROLLER_MODULES,
                volumes=volumes,
            )
        self.guests["host"] = Guest(
            name="host",
            dir=self.root / "host",
            netdevs=[(link.host_port, link.controller_port, link.mac(2)) for link in self.links],
            addresses=[f"{link.host_address}/24" for link in self.links],
            modules=HOST_MODULES,
        )
        for guest in self.guests.values():
            guest.lab_guests = self.guests

    def add(self, guest: Guest) -> Guest:
        """A guest joins the lab: closed with it, its deadlines counting every guest's time."""
        self.guests[guest.name] = guest
        guest.lab_guests = self.guests
        return guest

    @property
    def host(self) -> Guest:
        return self.guests["host"]

    def controller(self, index: int) -> Guest:
        return self.guests[f"c{index}"]

    def boot_all(self, timeout: float = 180) -> dict[str, float]:
        for guest in self.guests.values():
            guest.boot()
        self.watch()
        return {name: guest.wait_ready(timeout) for name, guest in self.guests.items()}

    def watch(self) -> SchedulingMonitor:
        """The lab's SchedulingMonitor, started once. It reads the guests' PID files at every
        sample, so a guest booted again (``Guest.boot``) is followed without telling it."""
        if self.monitor is None:
            self.monitor = SchedulingMonitor(lambda: {n: g.qemu_pid() for n, g in self.guests.items()})
        self.monitor.start()
        return self.monitor

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        for guest in self.guests.values():
            guest.kill()


def fresh_lab(run: str, controllers: int, volume: str, spare: str = "") -> Lab:
    """A module's own lab in ``.dataplane/<run>``, emptied first, not booted yet; the tier skips
    (fails under CI) naming what this machine lacks."""
    missing = missing_prerequisites()
    if missing:
        require(f"tests/dataplane needs {', '.join(missing)} (bash tools/dataplane-install.sh, as root)")
    root = STATE / run
    shutil.rmtree(root, ignore_errors=True)
    return Lab(root, controllers, volume, spare)
