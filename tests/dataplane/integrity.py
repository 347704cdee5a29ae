"""A data-integrity checker for the data-plane tier: does any block read back older than its
newest acknowledged write? Runs inside the host guest on its python3 (3.9+), stdlib only.

``write DEVICE --state FILE``: threads write 4 KiB blocks with O_DIRECT over a region of DEVICE
(each thread owns every T-th block, so one block is never written by two threads and its
generations are acknowledged in order). Each block is stamped with its LBA, a generation (1, 2,
… per block), the writer's name and a SHA-256 of the rest. Before a write its generation is
recorded as *attempted*, after the device acknowledges it as *acked*; the state file (JSON,
replaced atomically) holds both, every half second and at the end. It stops after ``--seconds``,
after ``--writes`` writes, when ``--until-file`` exists, or on SIGTERM/SIGINT, and prints a
summary (writes, errors, IOPS, the longest gap between a thread's acknowledgements).

``verify DEVICE --state FILE``: reads every block of the region back and prints one JSON report.
A block is **stale** when its generation is below the newest acknowledged one (a write that was
acknowledged has been overwritten by an older one: the "ABA" of a lost path's delayed write),
or it reads as never written though a write was acknowledged; **torn** when its checksum does
not hold; **misplaced** when it carries another block's LBA; **unknown** when its generation was
never issued. A generation attempted but not acknowledged may or may not have landed, so
anything between the acked and the attempted generation is correct.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import signal
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

BLOCK = 4096
MAGIC = b"VSAINTG1"
HEADER = struct.Struct("<8sQQ16sQ")  # magic, lba, generation, writer, nanoseconds since epoch
DIGEST = 32
KINDS = ("stale", "torn", "misplaced", "unknown")
BODY = BLOCK - DIGEST


def stamp(lba: int, generation: int, writer: str) -> bytes:
    """The 4 KiB image of ``lba`` at ``generation``: header, a filler unique to both, digest."""
    header = HEADER.pack(MAGIC, lba, generation, writer.encode()[:16], time.time_ns())
    seed = hashlib.sha256(b"%d:%d" % (lba, generation)).digest()
    filler = (seed * (BODY // len(seed) + 1))[: BODY - len(header)]
    body = header + filler
    return body + hashlib.sha256(body).digest()


def parse(block: bytes) -> dict[str, Any]:
    """What a block read back holds: ``{"state": "blank"|"torn"|"ok", "lba", "generation"}``."""
    if block.count(0) == len(block):
        return {"state": "blank"}
    body, digest = block[:BODY], block[BODY:]
    magic, lba, generation, _, _ = HEADER.unpack_from(body)
    if magic != MAGIC or hashlib.sha256(body).digest() != digest:
        return {"state": "torn"}
    return {"state": "ok", "lba": lba, "generation": generation}


class Region:
    """``blocks`` 4 KiB blocks of ``path`` from ``first``, opened with O_DIRECT unless told not."""

    def __init__(self, path: str, blocks: int, first: int = 0, direct: bool = True) -> None:
        self.path, self.blocks, self.first = path, blocks, first
        self.flags = os.O_RDWR | (os.O_DIRECT if direct else 0)

    def open(self, write: bool = True) -> int:
        """Read-write for the writer; read-only for the verify (a restored filesystem is
        mounted read-only)."""
        flags = self.flags if write else (self.flags & ~os.O_RDWR) | os.O_RDONLY
        return os.open(self.path, flags)

    def offset(self, lba: int) -> int:
        return (self.first + lba) * BLOCK


class Writer:
    """The write side: per block, the generation last attempted and last acknowledged."""

    def __init__(self, region: Region, threads: int, name: str) -> None:
        self.region, self.threads, self.name = region, threads, name
        self.attempted = [0] * region.blocks
        self.acked = [0] * region.blocks
        self.errors: list[str] = []
        self.writes = 0
        self.longest_gap = 0.0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.limit: int | None = None

    def _quota(self, index: int) -> int | None:
        """Thread ``index``'s share of ``limit`` (each its own, so each block's count is exact)."""
        if self.limit is None:
            return None
        return self.limit // self.threads + (1 if index < self.limit % self.threads else 0)

    def _write(self, fd: int, buffer: mmap.mmap, lba: int) -> None:
        generation = self.attempted[lba] + 1
        buffer[:] = stamp(lba, generation, self.name)
        self.attempted[lba] = generation  # before the IO: it may land even if it fails
        try:
            os.pwritev(fd, [buffer], self.region.offset(lba))
        except OSError as error:
            with self.lock:
                self.errors.append(f"lba {lba} generation {generation}: {error}")
            return
        self.acked[lba] = generation

    def _thread(self, index: int) -> None:
        fd = self.region.open()
        buffer = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
        last = time.monotonic()
        quota, made = self._quota(index), 0
        try:
            while not self.stop.is_set():
                for lba in range(index, self.region.blocks, self.threads):
                    if self.stop.is_set() or made == quota:
                        return
                    self._write(fd, buffer, lba)
                    made += 1
                    with self.lock:
                        self.writes += 1
                    now = time.monotonic()
                    self.longest_gap = max(self.longest_gap, now - last)
                    last = now
        finally:
            buffer.close()
            os.close(fd)

    def state(self) -> dict[str, Any]:
        acked = list(self.acked)  # acked before attempted: attempted >= acked in the copy
        attempted = list(self.attempted)
        return {
            "path": self.region.path,
            "first": self.region.first,
            "blocks": self.region.blocks,
            "writer": self.name,
            "acked": acked,
            "attempted": attempted,
            "writes": self.writes,
            "errors": self.errors[-50:],
            "errorCount": len(self.errors),
        }

    def run(self, state_file: Path, seconds: float | None, until: Path | None) -> dict[str, Any]:
        workers = [threading.Thread(target=self._thread, args=(i,), daemon=True) for i in range(self.threads)]
        started = time.monotonic()
        for worker in workers:
            worker.start()
        while any(worker.is_alive() for worker in workers):
            if (seconds is not None and time.monotonic() - started >= seconds) or (until and until.exists()):
                self.stop.set()
            save(state_file, self.state())
            for worker in workers:
                worker.join(timeout=0.5 / len(workers))
        save(state_file, self.state())
        elapsed = time.monotonic() - started
        return {
            "writes": self.writes,
            "errorCount": len(self.errors),
            "seconds": round(elapsed, 2),
            "writeIops": round(self.writes / elapsed) if elapsed else 0,
            "longestGapSeconds": round(self.longest_gap, 3),
        }


def save(state_file: Path, state: dict[str, Any]) -> None:
    partial = state_file.with_name(state_file.name + ".tmp")
    partial.write_text(json.dumps(state))
    os.replace(partial, state_file)


def judge(lba: int, found: dict[str, Any], acked: int, attempted: int) -> dict[str, Any] | None:
    """The finding for block ``lba`` read back as ``found``, or None when it is correct."""
    if found["state"] == "blank":
        return {"kind": "stale", "lba": lba, "found": 0, "acked": acked} if acked else None
    if found["state"] == "torn":
        return {"kind": "torn", "lba": lba}
    if found["lba"] != lba:
        return {"kind": "misplaced", "lba": lba, "carries": found["lba"]}
    if found["generation"] < acked:
        return {"kind": "stale", "lba": lba, "found": found["generation"], "acked": acked}
    if found["generation"] > attempted:
        return {"kind": "unknown", "lba": lba, "found": found["generation"], "attempted": attempted}
    return None


def verify(region: Region, state: dict[str, Any]) -> dict[str, Any]:
    """Every block of the region read back and judged against the writer's state."""
    chunk = 256
    findings: list[dict[str, Any]] = []
    fd = region.open(write=False)
    buffer = mmap.mmap(-1, chunk * BLOCK)
    try:
        for start in range(0, region.blocks, chunk):
            count = min(chunk, region.blocks - start)
            view = memoryview(buffer)[: count * BLOCK]
            os.preadv(fd, [view], region.offset(start))
            for i in range(count):
                lba = start + i
                found = parse(bytes(view[i * BLOCK : (i + 1) * BLOCK]))
                finding = judge(lba, found, state["acked"][lba], state["attempted"][lba])
                if finding:
                    findings.append(finding)
            view.release()
    finally:
        buffer.close()
        os.close(fd)
    kinds = {
        kind: [f for f in findings if f["kind"] == kind] for kind in ("stale", "torn", "misplaced", "unknown")
    }
    return {
        "blocks": region.blocks,
        "ackedBlocks": sum(1 for a in state["acked"] if a),
        **{kind: found[:100] for kind, found in kinds.items()},
        **{f"{kind}Count": len(found) for kind, found in kinds.items()},
        "ok": not findings,
    }


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("write", "verify"))
    parser.add_argument("device")
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--blocks", type=int, default=1024, help="the region's size in 4 KiB blocks")
    parser.add_argument("--first", type=int, default=0, help="the region's first block")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--writes", type=int, help="stop after this many writes")
    parser.add_argument("--until-file", type=Path)
    parser.add_argument("--writer", default="host")
    parser.add_argument(
        "--counts", action="store_true", help="verify: print the counts only, not the findings"
    )
    parser.add_argument(
        "--no-direct", action="store_true", help="buffered IO (a filesystem without O_DIRECT)"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.mode == "verify":
        state = json.loads(args.state.read_text())
        region = Region(args.device, state["blocks"], state["first"], not args.no_direct)
        report = verify(region, state)
        shown = {k: v for k, v in report.items() if not isinstance(v, list)} if args.counts else report
        print(json.dumps(shown))
        return 0 if report["ok"] else 1
    writer = Writer(
        Region(args.device, args.blocks, args.first, not args.no_direct), args.threads, args.writer
    )
    writer.limit = args.writes
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: writer.stop.set())
    print(json.dumps(writer.run(args.state, args.seconds, args.until_file)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
