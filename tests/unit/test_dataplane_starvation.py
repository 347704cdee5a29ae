"""The data-plane tier's measure of its guests' scheduling (tests/dataplane/starvation.py): the
run-queue wait read from a /proc tree, the longest wait within a window from the samples alone,
the rule that excuses a keep-alive timeout, and a guest's kernel log placed on this machine's
clock."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.dataplane.starvation import (
    WALL_CAP,
    GuestClock,
    GuestTime,
    Sample,
    SchedulingMonitor,
    failover_waits,
    longest_gap,
    longest_wait,
    longest_waits,
    recoveries,
    share_nice,
    starved,
    thread_waits,
    wait_intervals,
)

MS = 1_000_000  # ns


def task(proc: Path, pid: int, tid: int, comm: str, waited_ns: int) -> None:
    path = proc / str(pid) / "task" / str(tid)
    path.mkdir(parents=True, exist_ok=True)
    (path / "comm").write_text(comm + "\n")
    (path / "schedstat").write_text(f"123456 {waited_ns} 42\n")


def series(*points: tuple[float, float], tid: int = 7) -> list[Sample]:
    """Samples of one thread: (time, cumulative wait in seconds)."""
    return [Sample(t, {tid: round(w * 1e9)}) for t, w in points]


def every_quarter(waits_per_second: list[float], tid: int = 7) -> list[Sample]:
    """A sample every 0.25 s from t=1000, the thread waiting at each second's given rate."""
    samples, total = [], 0.0
    for i in range(len(waits_per_second) * 4 + 1):
        samples.append(Sample(1000 + i * 0.25, {tid: round(total * 1e9)}))
        if i < len(waits_per_second) * 4:
            total += waits_per_second[i // 4] * 0.25
    return samples


# --- /proc ---------------------------------------------------------------------------------------
def test_thread_waits_reads_the_vcpu_threads_only(tmp_path: Path) -> None:
    # Given QEMU's threads named by debug-threads: its main loop, a worker and its vCPU
    task(tmp_path, 40, 40, "qemu-system-x86", 9 * MS)
    task(tmp_path, 40, 41, "worker", 5 * MS)
    task(tmp_path, 40, 43, "CPU 0/TCG", 1500 * MS)
    # Then only the vCPU's wait is read
    assert thread_waits(40, tmp_path) == {43: 1500 * MS}


def test_thread_waits_takes_every_thread_when_none_is_named_a_vcpu(tmp_path: Path) -> None:
    task(tmp_path, 40, 40, "qemu-system-x86", 9 * MS)
    task(tmp_path, 40, 41, "qemu-system-x86", 5 * MS)
    assert thread_waits(40, tmp_path) == {40: 9 * MS, 41: 5 * MS}


def test_thread_waits_of_a_process_gone_is_empty(tmp_path: Path) -> None:
    assert thread_waits(40, tmp_path) == {}


def test_monitor_follows_a_guest_booted_again_and_skips_one_that_is_down(tmp_path: Path) -> None:
    # Given a guest whose QEMU is 40, then down, then booted again as 50; and one whose PID file
    # names a process gone
    pids: dict[str, int | None] = {"host": 40, "c0": 60}
    monitor = SchedulingMonitor(lambda: pids, proc=tmp_path)
    task(tmp_path, 40, 41, "CPU 0/TCG", 100 * MS)
    monitor.sample()
    pids["host"] = None
    monitor.sample()
    pids["host"] = 50
    task(tmp_path, 50, 51, "CPU 0/TCG", 10 * MS)
    monitor.sample()
    # Then the samples read each QEMU in turn, none while it was down
    assert [s.waits for s in monitor.samples()["host"]] == [{41: 100 * MS}, {51: 10 * MS}]
    assert "c0" not in monitor.samples()


def test_monitor_thread_samples_until_stopped(tmp_path: Path) -> None:
    task(tmp_path, 40, 41, "CPU 0/TCG", 100 * MS)
    monitor = SchedulingMonitor(lambda: {"c0": 40}, interval=0.01, proc=tmp_path)
    monitor.start()
    monitor.start()  # a second start keeps the one thread
    try:
        deadline = time.monotonic() + 60  # ends once three are taken
        while len(monitor.samples().get("c0", [])) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        monitor.stop()
    taken = len(monitor.samples()["c0"])
    assert taken >= 3
    time.sleep(0.05)
    assert len(monitor.samples()["c0"]) == taken


# --- the longest wait within a window ------------------------------------------------------------
def test_a_burst_of_waiting_is_found_whole_in_a_window_as_long_as_it() -> None:
    # Given a thread that waits 1.8 s within 2 s (seconds 3-4), and little otherwise
    samples = every_quarter([0.05, 0.05, 0.05, 0.9, 0.9, 0.05, 0.05])
    # Then a 2 s window finds the burst, a 1 s window half of it
    assert longest_wait(samples, 0, 2000, 2.0) == pytest.approx(1.8, abs=0.02)
    assert longest_wait(samples, 0, 2000, 1.0) == pytest.approx(0.9, abs=0.02)


def test_steady_waiting_is_not_a_burst() -> None:
    samples = every_quarter([0.2] * 10)
    assert longest_wait(samples, 0, 2000, 2.0) == pytest.approx(0.4, abs=0.01)


def test_a_long_wait_the_kernel_counts_at_once_fills_a_window_no_more_than_its_length() -> None:
    # Given a 4 s wait the kernel adds to the counter only when the thread runs again (t=1006),
    # and the sampler itself kept waiting from 1003
    samples = series((1000, 0.0), (1001, 0.0), (1003, 0.0), (1006, 4.0), (1006.25, 4.0))
    # Then it is placed over the 4 s before the sample that shows it (reaching back past the one
    # before, which the wait still ran through): a 2 s window holds 2 s of it
    assert wait_intervals(samples) == {7: [(1002.0, 1006.0)]}
    assert longest_wait(samples, 0, 2000, 2.0) == pytest.approx(2.0)
    assert longest_wait(samples, 0, 2000, 8.0) == pytest.approx(4.0)


def test_only_the_part_between_start_and_end_counts_even_of_a_wait_that_shows_after_end() -> None:
    # Given the thread waiting 1002-1006 (shown at 1006)
    samples = series((1000, 0.0), (1002, 0.0), (1006, 4.0))
    # Then a span that ends at 1003 holds 1 s of it, one that ends at 1002 none
    assert longest_wait(samples, 1000, 1003, 2.0) == pytest.approx(1.0)
    assert longest_wait(samples, 1000, 1002, 2.0) == 0.0
    assert longest_wait(samples, 1005, 1010, 2.0) == pytest.approx(1.0)


def test_no_wait_is_counted_across_two_processes() -> None:
    # Given a guest booted again: its new QEMU's vCPU (another thread id) starts from zero
    samples = [*series((1000, 50.0), (1000.25, 50.1)), *series((1001, 0.0), (1001.25, 0.05), tid=9)]
    assert longest_wait(samples, 0, 2000, 2.0) == pytest.approx(0.1)


def test_the_most_waited_thread_is_the_guest_s_wait() -> None:
    samples = [Sample(1000, {1: 0, 2: 0}), Sample(1001, {1: 300 * MS, 2: 700 * MS})]
    assert longest_wait(samples, 0, 2000, 2.0) == pytest.approx(0.7)


def test_the_longest_gap_between_samples() -> None:
    assert longest_gap(series((1000, 0), (1000.25, 0), (1003.5, 0), (1003.75, 0))) == pytest.approx(3.25)
    assert longest_gap(series((1000, 0))) == 0.0


def covered(intervals: list[tuple[float, float]], begin: float, end: float) -> float:
    return sum(max(0.0, min(e, end) - max(b, begin)) for b, e in intervals)


@given(
    steps=st.lists(st.tuples(st.floats(0.05, 3.0), st.floats(0.0, 4.0)), min_size=1, max_size=30),
    window=st.floats(0.5, 4.0),
    span=st.tuples(st.floats(990, 1060), st.floats(0, 40)),
)
def test_the_longest_wait_is_the_best_window_s_cover(
    steps: list[tuple[float, float]], window: float, span: tuple[float, float]
) -> None:
    # Given samples at any spacing, each showing any wait (ended since the one before)
    points, t, w = [(1000.0, 0.0)], 1000.0, 0.0
    for gap, waited in steps:
        t, w = t + gap, w + waited
        points.append((t, w))
    samples = series(*points)
    intervals = wait_intervals(samples).get(7, [])
    start, end = span[0], span[0] + span[1]
    found = longest_wait(samples, start, end, window)
    # Then no window inside the span (tried every 0.01 s) covers more, and one covers that much
    last = max(start, end - window)
    tried = [start + i * 0.01 for i in range(int((last - start) / 0.01) + 1)] + [last]
    best = max(covered(intervals, x, min(x + window, end)) for x in tried)
    assert best - 1e-6 <= found <= best + 0.01 + 1e-6
    assert found <= min(window, end - start) + 1e-6


def test_longest_waits_per_guest_rounded() -> None:
    samples = {"host": series((1000, 0.0), (1001, 0.6666)), "c0": every_quarter([0.0, 0.0])}
    assert longest_waits(samples, 0, 2000, 2.0) == {"host": 0.67, "c0": 0.0}


# --- excusing a keep-alive timeout ---------------------------------------------------------------
def test_a_failover_is_excused_by_a_guest_on_its_path_waiting_half_a_kato_before_it() -> None:
    # Given c2 waiting 1.8 s in seconds 3-4 (t=1003..1005), the host barely, c0 in seconds 8-9
    samples = {
        "host": every_quarter([0.05] * 12),
        "c2": every_quarter([0.0, 0.0, 0.0, 0.9, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        "c0": every_quarter([0.0] * 8 + [0.9, 0.9, 0.0, 0.0]),
    }
    # When a keep-alive (kato 2 s) times out at t=1006 on the path host-c2
    waits = failover_waits(1006.0, ["host", "c2"], samples, kato=2.0)
    # Then c2's wait excuses it, the host's does not, and c0 (not on the path) is not asked
    assert waits == {"host": pytest.approx(0.1), "c2": pytest.approx(1.8)}
    assert starved(waits, 2.0) == {"c2": pytest.approx(1.8)}
    # And the same wait long before the timeout (outside kato + 2 s) excuses nothing
    assert starved(failover_waits(1011.0, ["host", "c2"], samples, kato=2.0), 2.0) == {}


def test_a_wait_just_under_half_a_kato_excuses_nothing() -> None:
    assert starved({"host": 0.99, "c1": 0.2}, 2.0) == {}
    assert starved({"host": 1.0}, 2.0) == {"host": 1.0}


# --- the kernel log on this machine's clock ------------------------------------------------------
DMESG = """\
[   12.004100] nvme nvme0: new ctrl: NQN "nqn.2025-01.org.vsa-control-plane:array:dataplane:vol"
[  301.250000] nvme nvme2: I/O tag 3 (0003) type 4 opcode 0x18 (Keep Alive) QID 0 timeout
[  301.251200] nvme nvme2: starting error recovery
[ 1204.5] nvme nvme10: starting error recovery
"""


def test_recoveries_are_read_with_their_stamp_and_device() -> None:
    assert recoveries(DMESG) == [(301.2512, "nvme2"), (1204.5, "nvme10")]
    assert recoveries("") == []


def test_a_log_stamp_is_placed_on_the_wall_clock_by_the_guest_s_uptime() -> None:
    # Given the guest read 400.5 s of uptime at epoch 1_800_000_000.25 (/proc/uptime, then the time)
    clock = GuestClock.parse("400.50 350.10 1800000000.250000")
    assert clock == GuestClock(uptime=400.5, wall=1_800_000_000.25)
    # Then a line logged 99.25 s after boot happened 301.25 s before that reading
    assert clock.wall_time(99.25) == pytest.approx(1_800_000_000.25 - 301.25, abs=1e-6)
    assert clock.wall_time(400.5) == pytest.approx(1_800_000_000.25, abs=1e-6)


# --- deadlines on the guests' time ---------------------------------------------------------------
class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_guests_time_is_the_wall_time_less_the_most_starved_guest_s_wait(tmp_path: Path) -> None:
    # Given two guests up (QEMU 40: its vCPU has waited 1 s already; QEMU 50) and one not up yet
    task(tmp_path, 40, 43, "CPU 0/TCG", 1000 * MS)
    task(tmp_path, 50, 53, "CPU 0/TCG", 0)
    ticks = Ticks()
    clock = GuestTime(lambda: [40, 50, None], proc=tmp_path, clock=ticks).start()
    # When 100 s pass on this machine, guest 40's vCPU waiting 70 s of them and guest 50's 20 s
    ticks.now += 100
    task(tmp_path, 40, 43, "CPU 0/TCG", 71_000 * MS)
    task(tmp_path, 50, 53, "CPU 0/TCG", 20_000 * MS)
    # Then the guests had 30 s (the wait before the start counts for nothing)
    assert clock.elapsed() == (pytest.approx(30.0), pytest.approx(100.0))
    # and a 60 s deadline has not fired, where one on this machine's clock would have
    assert not clock.expired(60)
    assert clock.expired(29)


def test_a_guest_booted_after_the_start_counts_from_its_first_sighting(tmp_path: Path) -> None:
    ticks = Ticks()
    pids: list[int | None] = [None]
    clock = GuestTime(lambda: pids, proc=tmp_path, clock=ticks).start()
    ticks.now += 10
    # Given its QEMU appears with 5 s of run-queue wait already (its boot, before anyone looked)
    task(tmp_path, 60, 61, "CPU 0/TCG", 5000 * MS)
    pids[0] = 60
    assert clock.elapsed() == (pytest.approx(10.0), pytest.approx(10.0))
    # Then only what it waits from then on is taken off
    ticks.now += 10
    task(tmp_path, 60, 61, "CPU 0/TCG", 9000 * MS)
    assert clock.elapsed() == (pytest.approx(16.0), pytest.approx(20.0))


def test_a_deadline_fires_at_its_wall_cap_however_starved_the_guests(tmp_path: Path) -> None:
    task(tmp_path, 40, 43, "CPU 0/TCG", 0)
    ticks = Ticks()
    clock = GuestTime(lambda: [40], proc=tmp_path, clock=ticks).start()
    # Given a guest kept off the CPUs for all but 1 s of every stretch
    ticks.now += 60 * WALL_CAP - 1
    task(tmp_path, 40, 43, "CPU 0/TCG", round((60 * WALL_CAP - 2) * 1000) * MS)
    assert not clock.expired(60)
    ticks.now += 2
    task(tmp_path, 40, 43, "CPU 0/TCG", round(60 * WALL_CAP * 1000) * MS)
    assert clock.expired(60)


# --- the guests' sessions' nice --------------------------------------------------------------------
def test_a_guest_session_gets_the_tier_s_nice_and_none_is_written_at_zero(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "autogroup").write_text("/autogroup-12 nice 0\n")
    assert share_nice(77, nice=-5, proc=tmp_path)
    assert (tmp_path / "77" / "autogroup").read_text() == "-5\n"
    (tmp_path / "77" / "autogroup").write_text("/autogroup-12 nice 0\n")
    assert not share_nice(77, nice=0, proc=tmp_path)
    assert (tmp_path / "77" / "autogroup").read_text() == "/autogroup-12 nice 0\n"
    # a session gone (or no autogroups, or no right to a negative nice) is left as it is
    assert not share_nice(78, nice=-5, proc=tmp_path)


def test_a_real_session_takes_the_nice_it_is_given() -> None:
    autogroups = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if not autogroups.exists() or autogroups.read_text().strip() != "1":
        pytest.skip("this kernel shares the CPUs by session only with autogroups on")
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert share_nice(child.pid, nice=7)
        assert Path(f"/proc/{child.pid}/autogroup").read_text().strip().endswith("nice 7")
    finally:
        child.kill()
        child.wait()
