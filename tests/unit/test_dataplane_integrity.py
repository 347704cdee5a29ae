"""The data-integrity checker the data-plane tier runs in its host guest
(tests/dataplane/integrity.py), here on files: it must find a delayed old write that lands over
newer acknowledged ones, and nothing in a clean run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.dataplane import integrity
from tests.dataplane.integrity import BLOCK, Region, Writer

BLOCKS = 64
SCRIPT = Path(integrity.__file__)


def image(tmp_path: Path) -> Path:
    path = tmp_path / "volume.img"
    path.write_bytes(b"\0" * BLOCKS * BLOCK)
    return path


def written(path: Path, writes: int, threads: int = 4) -> dict:
    """The state after ``writes`` buffered writes over the whole image."""
    writer = Writer(Region(str(path), BLOCKS, direct=False), threads, "test")
    writer.limit = writes
    writer.run(path.with_suffix(".state"), None, None)
    return writer.state()


def block(path: Path, lba: int) -> bytes:
    with path.open("rb") as f:
        f.seek(lba * BLOCK)
        return f.read(BLOCK)


def put(path: Path, lba: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(lba * BLOCK)
        f.write(data)


def check(path: Path, state: dict) -> dict:
    return integrity.verify(Region(str(path), BLOCKS, direct=False), state)


def test_a_clean_run_finds_nothing_and_every_block_was_acknowledged(tmp_path):
    path = image(tmp_path)
    state = written(path, 3 * BLOCKS)
    report = check(path, state)
    assert report["ok"], report
    assert report["ackedBlocks"] == BLOCKS
    assert state["acked"] == [3] * BLOCKS == state["attempted"]


def test_an_older_write_landing_after_newer_acknowledged_ones_is_stale(tmp_path):
    # Given block 5 as its first write left it (a write a lost controller still holds)
    path = image(tmp_path)
    written(path, BLOCKS)
    delayed = block(path, 5)
    # When the host writes newer generations through another path, then the delayed one lands
    state = written_again(path, 2 * BLOCKS)
    put(path, 5, delayed)
    # Then the read-back names it: found generation 1 where 3 was acknowledged
    report = check(path, state)
    assert not report["ok"]
    assert report["stale"] == [{"kind": "stale", "lba": 5, "found": 1, "acked": 3}]
    assert report["staleCount"] == 1
    assert report["tornCount"] == 0


def written_again(path: Path, writes: int) -> dict:
    """Continue from the image's current generations (a writer restarted on the same region)."""
    state = json.loads(path.with_suffix(".state").read_text())
    writer = Writer(Region(str(path), BLOCKS, direct=False), 4, "test")
    writer.attempted, writer.acked = list(state["attempted"]), list(state["acked"])
    writer.limit = writes
    writer.run(path.with_suffix(".state"), None, None)
    return writer.state()


def test_a_lost_write_a_torn_block_and_a_misdirected_one_are_each_named(tmp_path):
    path = image(tmp_path)
    state = written(path, BLOCKS)
    put(path, 2, b"\0" * BLOCK)  # the acknowledged write is gone
    torn = bytearray(block(path, 7))
    torn[100] ^= 0xFF
    put(path, 7, bytes(torn))
    put(path, 9, block(path, 3))  # block 3's data at block 9
    report = check(path, state)
    assert report["stale"] == [{"kind": "stale", "lba": 2, "found": 0, "acked": 1}]
    assert report["torn"] == [{"kind": "torn", "lba": 7}]
    assert report["misplaced"] == [{"kind": "misplaced", "lba": 9, "carries": 3}]


def test_a_write_attempted_but_not_acknowledged_may_or_may_not_have_landed(tmp_path):
    path = image(tmp_path)
    state = written(path, 2 * BLOCKS)
    # Given block 4's second write failed on the host (attempted 2, acked 1)
    state["acked"][4] = 1
    assert check(path, state)["ok"]  # generation 2 landed anyway: correct
    put(path, 4, integrity.stamp(4, 1, "test"))
    assert check(path, state)["ok"]  # generation 1 kept: correct too
    put(path, 4, integrity.stamp(4, 5, "test"))
    report = check(path, state)  # a generation never issued: corrupt
    assert report["unknown"] == [{"kind": "unknown", "lba": 4, "found": 5, "attempted": 2}]


def test_a_block_never_written_and_never_acknowledged_is_correct(tmp_path):
    path = image(tmp_path)
    state = written(path, BLOCKS // 2, threads=1)
    report = check(path, state)
    assert report["ok"], report
    assert report["ackedBlocks"] == BLOCKS // 2


@pytest.mark.skipif(shutil.which("python3") is None, reason="the guests' python3 is the host's")
def test_the_command_line_on_the_guests_python_writes_then_verifies(tmp_path):
    # The guest runs it with the system python3 (3.9+), not the project's venv
    path = image(tmp_path)
    state = tmp_path / "state.json"
    run = ["python3", str(SCRIPT)]
    common = ["--state", str(state), "--no-direct"]
    wrote = subprocess.run(
        [*run, "write", str(path), *common, "--blocks", str(BLOCKS), "--writes", "200", "--threads", "3"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    summary = json.loads(wrote.stdout)
    assert summary["writes"] == 200
    assert summary["errorCount"] == 0
    verify = [*run, "verify", str(path), *common]
    verified = subprocess.run(verify, capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["ok"]
    # and a stale block makes the command fail
    put(path, 0, integrity.stamp(0, 1, "late"))
    state_now = json.loads(state.read_text())
    assert state_now["acked"][0] > 1
    failed = subprocess.run(verify, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["staleCount"] == 1


def test_with_o_direct_as_in_the_guest(tmp_path):
    # O_DIRECT needs page-aligned buffers and offsets: the guest's mode, on this machine's /tmp
    path = image(tmp_path)
    writer = Writer(Region(str(path), BLOCKS), 2, "direct")
    writer.limit = 2 * BLOCKS
    summary = writer.run(tmp_path / "state.json", None, None)
    assert summary["errorCount"] == 0, writer.errors
    report = integrity.verify(Region(str(path), BLOCKS), writer.state())
    assert report["ok"], report
    assert report["ackedBlocks"] == BLOCKS


def test_verify_reads_a_read_only_file_and_can_print_the_counts_alone(tmp_path):
    # A drill mounts the restored filesystem read-only: the verify must open its file read-only
    # (an immutable file refuses a read-write open even to root, as a read-only mount does)
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr (e2fsprogs)")
    path = image(tmp_path)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(written(path, 2 * BLOCKS)))
    put(path, 3, integrity.stamp(3, 1, "late"))
    verify = ["python3", str(SCRIPT), "verify", str(path), "--state", str(state), "--no-direct"]
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        # When it verifies with --counts (a drill keeps only 2 KiB of its command's output)
        shown = subprocess.run([*verify, "--counts"], capture_output=True, text=True, timeout=120)
        listed = subprocess.run(verify, capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    # Then it read the file, found the stale block, and printed its counts without the findings
    assert shown.returncode == 1, shown.stderr
    report = json.loads(shown.stdout)
    assert report["staleCount"] == 1
    assert report["ackedBlocks"] == BLOCKS
    assert not any(isinstance(v, list) for v in report.values()), report
    # while without it the findings are listed
    assert json.loads(listed.stdout)["stale"], listed.stderr
