"""The SSM documents, run for real: bash, the rendered scripts, fake ``nvme`` and ``modprobe``.

* ``test_scripts_local.py`` runs the rendered scripts directly on sandbox directories (no local
  cloud): the kernel rules each script must respect, and the fakes' fidelity.
* ``test_run_command.py`` runs the documents through the local cloud's Run Command on managed
  nodes: 3 controllers and 2 hosts.

A node is a sandbox directory, its "root file system", as the local cloud's Run Command gives
one to each managed node (cwd and ``$VSA_NODE_ROOT``): the fake kernel's configfs is
``<node>/sys/kernel/config``, EBS devices are ``<node>/dev/disk/by-id/...``, the fakes keep their
state and call log in ``<node>/.fakes/``. Targets are found among the node's siblings.
"""

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.documents_tool import documents
from tests.localcloud.conftest import aws, control, endpoint  # noqa: F401 - fixtures for Run Command tests
from vsa_core import nvme

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
FAKE_NVME = str(FAKES / "nvme")
FAKE_MODPROBE = str(FAKES / "modprobe")
FAKE_DMESG = str(FAKES / "dmesg")
CONFIGFS = "sys/kernel/config"  # relative to the node: the working directory of a script
DEVICES = "dev/disk/by-id"
SYSFS = "sys"  # the fake nvme shows its subsystems in <node>/sys/class/nvme-subsystem
NVME_CONFIG = "etc/nvme/config.json"  # relative: connect-path keeps the settings in the sandbox
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # Run Command's


def report_of(stdout: str) -> dict[str, Any]:
    """The document's report: its last stdout line, JSON."""
    lines = stdout.strip().splitlines()
    assert lines, "the document printed nothing on stdout"
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def tree(top: Path) -> dict[str, Any]:
    """Everything under ``top``: directories, files with their content, links with their target."""
    found: dict[str, Any] = {}
    if not top.exists():
        return found
    for path in sorted(top.rglob("*")):
        key = str(path.relative_to(top))
        if path.is_symlink():
            found[key] = ("link", os.readlink(path))
        elif path.is_dir():
            found[key] = ("dir",)
        else:
            found[key] = ("file", path.read_text())
    return found


def calls(root: Path, tool: str = "nvme") -> list[list[str]]:
    """The argv of every call of a fake on a node, in order."""
    log = root / ".fakes" / "calls.jsonl"
    if not log.exists():
        return []
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [e["argv"] for e in entries if e["tool"] == tool]


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        return report_of(self.stdout)


@dataclass
class LocalNode:
    """A sandbox directory on which rendered documents run as Run Command would run them."""

    root: Path

    @property
    def nvmet(self) -> Path:
        return self.root / CONFIGFS / "nvmet"

    def attach(self, *volume_ids: str, size_gib: int = 8) -> None:
        """What the local cloud's EBS does on attach: the volume's by-id device appears, as long
        as the volume (a sparse file: nvmet's file backend sizes a namespace by its length)."""
        (self.root / DEVICES).mkdir(parents=True, exist_ok=True)
        for volume_id in volume_ids:
            device = self.root / DEVICES / nvme.device_name(volume_id)
            device.write_text(volume_id + "\n")
            os.truncate(device, size_gib * 2**30)

    def run(self, document: str, **params: str) -> Result:
        script = documents.render_script(document, params)
        done = subprocess.run(
            ["/bin/bash", "-c", script],
            cwd=self.root,
            env={
                "PATH": SYSTEM_PATH,
                "VSA_NODE_ROOT": str(self.root),
                "HOME": str(self.root),
                "TMPDIR": str(self.root.parent.parent),
                "LANG": "C.UTF-8",
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[[str], LocalNode]]:
    """``node("c0")``: a sandbox next to the others made by this test (siblings see each other).
    The fence watches configure-target started on them are ended with the test."""

    def make(name: str) -> LocalNode:
        root = tmp_path / "nodes" / name
        root.mkdir(parents=True)
        return LocalNode(root)

    yield make
    for pid in fence_watches(tmp_path):
        os.kill(pid, signal.SIGTERM)


def fence_watches(tmp_path: Path) -> list[int]:
    """The running fence watches (documents/lib/fence-watch.sh) of the sandboxes under
    ``tmp_path`` (their TMPDIR): each PID file's process, while it is a fence watch."""
    running = []
    for pid_file in tmp_path.glob("vsa-configure-target-*.fence-watch.pid"):
        pid = pid_file.read_text().strip()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if len(argv) > 3 and argv[3] == b"vsa-fence-watch":
            running.append(int(pid))
    return running


# the host documents' kernel lab (XFS on loop devices): its fixture, visible to every test here
from tests.documents.xfs_lab import lab  # noqa: E402, F401
