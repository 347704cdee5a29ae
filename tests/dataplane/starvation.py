"""How long the guests' emulated CPUs waited for this machine's CPUs, measured from outside.

Under TCG a guest's CPU is a thread of its QEMU process (``CPU 0/TCG``; QEMU names its threads
with ``-name ...,debug-threads=on``). On a loaded 2-core machine that thread can sit runnable on
Linux's run queue for seconds: the guest's timers fire late and its packets wait, so an NVMe
keep-alive can time out on a healthy path. The kernel accounts that wait per thread in
``/proc/<pid>/task/<tid>/schedstat`` (second field: nanoseconds runnable but not running), so the
tier can tell a keep-alive the product set too short from a guest the machine did not run.

``SchedulingMonitor`` samples it four times a second in a daemon thread of the test process;
``longest_wait`` answers, from the samples alone, how long a guest's vCPU waited within any
window of a given length; ``GuestClock`` places a guest's kernel log (seconds since its boot) on
this machine's clock, where the samples are.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
INTERVAL_SECONDS = 0.25
KEEP_SAMPLES = 4 * 60 * 60  # an hour of samples per guest at INTERVAL_SECONDS: a lab's lifetime
NS = 1e9


@dataclass(frozen=True)
class Sample:
    """One reading of a guest's QEMU: this machine's ``time.time()`` and, per thread id, the
    cumulative run-queue wait in nanoseconds."""

    time: float
    waits: Mapping[int, int]


def _read(path: Path) -> str:
    """A /proc file's text; "" when its thread or process ended meanwhile."""
    try:
        return path.read_text()
    except OSError:
        return ""


def thread_waits(pid: int, proc: Path = PROC) -> dict[int, int]:
    """The run-queue wait (ns) of each vCPU thread of QEMU ``pid``; of every thread when none is
    named as one (a QEMU started without debug-threads). Empty when the process is gone."""
    try:
        tasks = {int(task.name): task for task in (proc / str(pid) / "task").iterdir()}
    except OSError:
        return {}
    vcpus = [tid for tid, task in tasks.items() if _read(task / "comm").startswith("CPU ")]
    waits = {}
    for tid in vcpus or list(tasks):
        fields = _read(tasks[tid] / "schedstat").split()
        if len(fields) > 1:
            waits[tid] = int(fields[1])
    return waits


@dataclass
class SchedulingMonitor:
    """Samples ``thread_waits`` of every guest ``pids()`` names, every ``interval`` seconds.

    ``pids`` is called at every sample, so a guest booted again (a new QEMU, a new PID file) is
    followed from its next sample on; a guest with no PID (down, or booting) is skipped."""

    pids: Callable[[], Mapping[str, int | None]]
    interval: float = INTERVAL_SECONDS
    proc: Path = PROC
    _samples: dict[str, deque[Sample]] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="guest-scheduling", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def sample(self) -> None:
        """One reading of every guest (the thread's step; tests call it directly)."""
        for name, pid in self.pids().items():
            if pid is None:
                continue
            waits = thread_waits(pid, self.proc)
            if waits:
                with self._lock:
                    self._samples.setdefault(name, deque(maxlen=KEEP_SAMPLES)).append(
                        Sample(time.time(), waits)
                    )

    def samples(self) -> dict[str, list[Sample]]:
        """A copy of what was sampled so far, per guest, oldest first."""
        with self._lock:
            return {name: list(kept) for name, kept in self._samples.items()}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


# --- pure: the samples' answers ------------------------------------------------------------------
# The kernel adds a wait to a thread's counter when the thread runs again (sched_info_arrive), so a
# 4 s wait shows whole in the first sample after it ends, not spread over the samples it spans.
# Each increase is therefore placed as one wait ending at the sample that shows it: the latest it
# can have ended, off by at most the time since the sample before (INTERVAL_SECONDS, longer when
# the sampler itself waited: ``longest_gap``).
Interval = tuple[float, float]


def wait_intervals(samples: Sequence[Sample]) -> dict[int, list[Interval]]:
    """Per thread, the times it waited (merged, in order), from samples in time order. Nothing is
    counted across two processes: a QEMU booted again has other thread ids."""
    placed: dict[int, list[Interval]] = {}
    for earlier, later in itertools.pairwise(samples):
        for tid in earlier.waits.keys() & later.waits.keys():
            waited = (later.waits[tid] - earlier.waits[tid]) / NS
            if waited > 0:
                placed.setdefault(tid, []).append((later.time - waited, later.time))
    return {tid: _merged(intervals) for tid, intervals in placed.items()}


def _merged(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for begin, end in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def _longest_cover(intervals: list[Interval], start: float, end: float, window: float) -> float:
    """The most of ``window`` seconds, inside [start, end], that disjoint sorted ``intervals``
    cover. Sliding a window on, its cover stops growing only where its start enters an interval
    or its end leaves one, and from there it stays level until the other happens too: so a best
    window starts at an interval's start, or at either end of the span."""
    starts = [b for b, _ in intervals]
    before = list(itertools.accumulate((e - b for b, e in intervals), initial=0.0))

    def covered_until(t: float) -> float:
        k = bisect.bisect_right(starts, t) - 1
        return 0.0 if k < 0 else before[k] + min(intervals[k][1], t) - intervals[k][0]

    last = max(start, end - window)
    edges = [start, last, *starts]
    return max(
        covered_until(min(x + window, end)) - covered_until(x)
        for x in (min(max(x, start), last) for x in edges)
    )


def longest_wait(samples: Sequence[Sample], start: float, end: float, window: float) -> float:
    """The most any one thread waited within ``window`` seconds between ``start`` and ``end``
    (this machine's epoch seconds), from samples in time order (all of them: a wait that shows
    after ``end`` may have begun before it)."""
    intervals = wait_intervals(samples).values()
    return max((_longest_cover(kept, start, end, window) for kept in intervals), default=0.0)


def longest_gap(samples: Sequence[Sample]) -> float:
    """The longest time between two samples: how far a wait may be placed after its real end."""
    return max((b.time - a.time for a, b in itertools.pairwise(samples)), default=0.0)


def longest_waits(
    samples: Mapping[str, Sequence[Sample]], start: float, end: float, window: float
) -> dict[str, float]:
    """``longest_wait`` per guest, rounded to centiseconds."""
    return {name: round(longest_wait(kept, start, end, window), 2) for name, kept in samples.items()}


def failover_waits(
    at: float, guests: Sequence[str], samples: Mapping[str, Sequence[Sample]], kato: float
) -> dict[str, float]:
    """The longest wait within ``kato`` seconds of each of ``guests`` around a keep-alive timeout
    logged at ``at``: from ``kato + 2`` s before it (the keep-alive that timed out was sent up to
    kato earlier, the block layer rounds its timeout up to a whole second, and the log's mapping to
    this machine's clock is good to about a second: ``GuestClock``) to 1 s after it (the same)."""
    chosen = {guest: samples.get(guest, []) for guest in guests}
    return longest_waits(chosen, at - kato - 2, at + 1, kato)


def starved(waits: Mapping[str, float], kato: float) -> dict[str, float]:
    """The guests whose wait excuses a keep-alive timeout: kept off this machine's CPUs for half
    a kato or more within one kato, a guest had at most half the keep-alive's time budget to run
    in; a round trip that takes milliseconds on a running guest then says nothing about the
    product's setting."""
    return {guest: wait for guest, wait in waits.items() if wait >= kato / 2}


# --- pure: a guest's kernel log on this machine's clock -----------------------------------------
RECOVERY = re.compile(r"^\[\s*(\d+\.\d+)\]\s+nvme (nvme\d+): starting error recovery", re.MULTILINE)


def recoveries(dmesg: str) -> list[tuple[float, str]]:
    """Each NVMe error recovery in a ``dmesg`` listing: (seconds since boot, controller device)."""
    return [(float(m.group(1)), m.group(2)) for m in RECOVERY.finditer(dmesg)]


@dataclass(frozen=True)
class GuestClock:
    """A guest's ``/proc/uptime`` and its epoch time, read at one instant. Under QEMU the guest's
    wall clock starts from the emulated RTC, which is this machine's clock (to the second), so
    the mapping is good to about a second."""

    uptime: float
    wall: float

    @classmethod
    def parse(cls, text: str) -> GuestClock:
        """From ``<uptime seconds> <idle seconds> <epoch seconds>`` (``/proc/uptime``, then the
        epoch time)."""
        uptime, _idle, wall = text.split()
        return cls(float(uptime), float(wall))

    def wall_time(self, since_boot: float) -> float:
        """The epoch time of a kernel log stamp (seconds since the guest booted)."""
        return self.wall - (self.uptime - since_boot)


# --- a deadline on the guests' time -------------------------------------------------------------
WALL_CAP = 4.0
"""However starved the guests, a deadline fires at this many times its length on this machine's
clock: a lab that never gets the cores back is a failure of its own."""


@dataclass
class GuestTime:
    """Time as a lab's guests had it since ``start()``: this machine's elapsed time less the
    longest any one of them (``pids()``: their QEMUs) waited on its run queue meanwhile.

    A request to a guest, or a boot, may wait on any guest of the lab (a host's connect on a
    controller's answer), so the most starved one is taken. A deadline counted on this clock
    fires when the guests had the time and did not finish, not when the machine kept them off
    its CPUs: on a busy 2-core machine a guest's vCPU waited minutes in a run of the command."""

    pids: Callable[[], Sequence[int | None]]
    proc: Path = PROC
    clock: Callable[[], float] = time.monotonic
    _started: float = field(default=0.0, init=False)
    _base: dict[int, dict[int, int]] = field(default_factory=dict, init=False)

    def start(self) -> GuestTime:
        self._started = self.clock()
        self._base = {}
        self.waited()  # each QEMU already up counts from now
        return self

    def waited(self) -> float:
        """The longest run-queue wait of one guest since ``start()`` (a QEMU first seen later
        counts from then; its threads from their first sighting)."""
        most = 0
        for pid in self.pids():
            if pid is None:
                continue
            now = thread_waits(pid, self.proc)
            base = self._base.setdefault(pid, dict(now))
            for tid, ns in now.items():
                base.setdefault(tid, ns)
            most = max(most, sum(ns - base[tid] for tid, ns in now.items()))
        return most / NS

    def elapsed(self) -> tuple[float, float]:
        """(the guests' time, this machine's) since ``start()``."""
        wall = self.clock() - self._started
        return max(0.0, wall - self.waited()), wall

    def expired(self, timeout: float) -> bool:
        guests, wall = self.elapsed()
        return guests > timeout or wall > timeout * WALL_CAP


# --- the guests' share of the CPUs ----------------------------------------------------------------
def share_nice(session_leader: int, nice: int | None = None, proc: Path = PROC) -> bool:
    """Give a guest's session this process's nice (or ``nice``). Each guest's QEMU runs in a
    session of its own, and with autogroups on (``kernel.sched_autogroup_enabled``) Linux shares
    the CPUs between sessions first, by each session's own nice (``/proc/<pid>/autogroup``),
    and by a process's nice only inside its session: the nice the tier was started with (-5 in
    ``tools/test.sh`` as root) reached no guest, and each guest had the share of any other
    session, a local cloud's Lambda environment starting up among them. Whether it was set (a
    negative nice needs root; nothing to do at 0)."""
    nice = os.getpriority(os.PRIO_PROCESS, 0) if nice is None else nice
    if nice == 0:
        return False
    try:
        (proc / str(session_leader) / "autogroup").write_text(f"{nice}\n")
    except OSError:
        return False
    return True
