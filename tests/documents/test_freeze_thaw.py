"""freeze-io and thaw-io on real XFS filesystems (loop devices), run as a host runs them.

Needs root, xfsprogs and util-linux (tools/install.sh installs them); skips with the reason
otherwise. No timing assertion except the watchdog's bound: thawed within TimeoutSeconds + 1 s
of arming.
"""

import math
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.documents.xfs_lab import Fs, Lab, is_mountpoint, superblock_alive
from tests.documents_util import Run, run_document, write_script


def params(
    lab: Lab, mountpoints: list[Path], backup_id: str, timeout: int = 10, **extra: str
) -> dict[str, str]:
    return {
        "Mountpoints": ",".join(str(m) for m in mountpoints),
        "TimeoutSeconds": str(timeout),
        "BackupId": backup_id,
        "StateDir": str(lab.state_dir),
        **extra,
    }


def freeze(lab: Lab, filesystems: list[Fs], backup_id: str, timeout: int = 10, **extra: str) -> Run:
    return run_document(
        "freeze-io", params(lab, [fs.mountpoint for fs in filesystems], backup_id, timeout, **extra), lab.root
    )


def thaw(lab: Lab, filesystems: list[Fs], backup_id: str) -> Run:
    return run_document("thaw-io", params(lab, [fs.mountpoint for fs in filesystems], backup_id), lab.root)


def finished_at(process: "subprocess.Popen[bytes]", within: float) -> float | None:
    """When ``process`` ended (epoch seconds), polling every 10 ms for at most ``within`` s."""
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        if process.poll() is not None:
            return time.time()
        time.sleep(0.01)
    return None


def blocked(process: "subprocess.Popen[bytes]", for_seconds: float = 0.5) -> bool:
    return finished_at(process, for_seconds) is None


def watchdog_log(lab: Lab, backup_id: str) -> str:
    return (lab.state_dir / f"{backup_id}.log").read_text()


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


def wait_until(condition, within: float) -> bool:  # type: ignore[no-untyped-def]
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def test_a_write_blocks_while_frozen_and_completes_after_thaw(lab: Lab) -> None:
    # Given two XFS filesystems
    data, logs = lab.xfs("data"), lab.xfs("logs")

    # When they are frozen
    frozen = freeze(lab, [data, logs], "bk-write")

    # Then the report says when each froze, overall, and when the watchdog would thaw
    assert frozen.returncode == 0, frozen.stderr
    report = frozen.report
    assert report["status"] == "frozen"
    assert [m["mountpoint"] for m in report["mountpoints"]] == [str(data.mountpoint), str(logs.mountpoint)]
    assert all(m["fstype"] == "xfs" and m["device"] for m in report["mountpoints"])
    assert report["armedAt"] <= report["freezeStartedAt"] <= report["frozeAt"]
    assert report["frozeAt"] == max(m["frozeAt"] for m in report["mountpoints"])
    assert report["watchdogDeadline"] == pytest.approx(report["armedAt"] + 10, abs=0.002)
    assert alive(report["watchdogPid"])
    # and a write blocks
    writer = lab.writer(data)
    assert blocked(writer), "a write completed on a frozen filesystem"

    # When thawed
    thawed = thaw(lab, [data, logs], "bk-write")

    # Then the write completes, the watchdog is cancelled, and the instants are reported
    assert finished_at(writer, 10) is not None, "the write still blocks after thaw-io"
    assert writer.returncode == 0
    assert thawed.returncode == 0, thawed.stderr
    assert thawed.report["status"] == "thawed"
    assert [m["result"] for m in thawed.report["mountpoints"]] == ["thawed", "thawed"]
    assert thawed.report["watchdog"] == "cancelled"
    assert thawed.report["watchdogFired"] is False
    assert report["frozeAt"] <= thawed.report["thawStartedAt"] <= thawed.report["thawedAt"]
    assert wait_until(lambda: not alive(report["watchdogPid"]), 60)
    assert "cancelled" in watchdog_log(lab, "bk-write")


def test_the_watchdog_thaws_when_nobody_else_does(lab: Lab) -> None:
    # Given a frozen filesystem with a 2 s watchdog, and a blocked write
    data = lab.xfs()
    frozen = freeze(lab, [data], "bk-alone", timeout=2)
    assert frozen.returncode == 0, frozen.stderr
    writer = lab.writer(data)

    # When nobody runs thaw-io
    done = finished_at(writer, 6)

    # Then the watchdog thaws it within TimeoutSeconds + 1 s of arming, and logs what it did
    assert done is not None, "the watchdog did not thaw"
    assert done <= frozen.report["armedAt"] + 2 + 1
    assert wait_until(lambda: not alive(frozen.report["watchdogPid"]), 60)
    log = watchdog_log(lab, "bk-alone")
    assert "fired" in log
    assert f"{data.mountpoint}: thawed" in log


def test_a_slow_sync_happens_before_the_watchdog_is_armed(lab: Lab, tmp_path: Path) -> None:
    # Given a host whose sync takes 6 s (heavy write load) and a 4 s freeze timeout
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "sync").write_text(f'#!/bin/sh\nsleep 6\nexec {shutil.which("sync")} "$@"\n')
    (slow / "sync").chmod(0o755)
    data = lab.xfs()
    started = time.time()

    # When it freezes
    frozen = run_document(
        "freeze-io",
        params(lab, [data.mountpoint], "bk-slow-sync", timeout=4),
        lab.root,
        env={**os.environ, "PATH": f"{slow}:{os.environ['PATH']}"},
    )

    # Then the sync ran before the watchdog's window opened, so the freeze still fits in it
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    assert frozen.report["status"] == "frozen"
    assert frozen.report["armedAt"] >= started + 6
    assert frozen.report["frozeAt"] < frozen.report["watchdogDeadline"]
    assert thaw(lab, [data], "bk-slow-sync").report["status"] == "thawed"


def test_thawing_twice_is_harmless_and_a_cancelled_watchdog_stays_quiet(lab: Lab) -> None:
    data = lab.xfs()
    # a deadline far beyond the two thaws, however busy the machine: the first must find it frozen
    frozen = freeze(lab, [data], "bk-twice", timeout=60)
    assert frozen.returncode == 0, frozen.stderr

    first = thaw(lab, [data], "bk-twice")
    second = thaw(lab, [data], "bk-twice")

    assert first.report["mountpoints"][0]["result"] == "thawed"
    assert first.report["watchdog"] == "cancelled"
    assert second.returncode == 0, second.stderr
    assert second.report["status"] == "thawed"
    assert second.report["mountpoints"][0]["result"] == "not-frozen"
    assert second.report["watchdog"] == "not-armed"
    # the cancelled watchdog has ended without firing, so it never can
    assert wait_until(lambda: not alive(frozen.report["watchdogPid"]), 60), "the watchdog still runs"
    log = watchdog_log(lab, "bk-twice")
    assert "cancelled" in log
    assert "fired" not in log
    assert not (lab.state_dir / "bk-twice.fired").exists()


def test_thaw_after_the_watchdog_fired_is_fine_and_says_so(lab: Lab) -> None:
    data = lab.xfs()
    frozen = freeze(lab, [data], "bk-late", timeout=1)
    assert frozen.returncode == 0, frozen.stderr
    assert wait_until(lambda: not alive(frozen.report["watchdogPid"]), 60), "the watchdog did not fire"

    late = thaw(lab, [data], "bk-late")

    assert late.returncode == 0, late.stderr
    assert late.report["status"] == "thawed"
    assert late.report["mountpoints"][0]["result"] == "not-frozen"
    assert late.report["watchdog"] == "fired"
    assert late.report["watchdogFired"] is True
    assert frozen.report["armedAt"] + 1 <= late.report["watchdogFiredAt"] <= frozen.report["armedAt"] + 2


def test_killing_the_freeze_process_group_after_arming_still_thaws(lab: Lab) -> None:
    # Given freeze-io stopped dead after it froze (an fsfreeze that freezes, then hangs), as when
    # SSM kills the command's process group on timeout or cancel
    data = lab.xfs()
    ready = lab.root / "frozen.ready"
    hanging = lab.root / "hanging-fsfreeze"
    hanging.write_text(
        f'#!/bin/bash\nfsfreeze "$@" || exit\n[[ $1 == -f ]] && touch {ready} && exec sleep 300\n'
    )
    hanging.chmod(0o755)
    script = write_script(
        "freeze-io", params(lab, [data.mountpoint], "bk-killed", 4, FsfreezeCommand=str(hanging)), lab.root
    )
    started = time.time()
    with open(lab.root / "freeze.out", "wb") as out:
        freeze_io = lab.spawn("sh", str(script), stdout=out, stderr=out, start_new_session=True)
    assert wait_until(ready.exists, 60), "freeze-io did not freeze"
    writer = lab.writer(data)
    assert blocked(writer, 0.2)

    # When its whole process group is killed
    os.killpg(freeze_io.pid, signal.SIGKILL)
    freeze_io.wait(5)

    # Then the watchdog (armed before the freeze, so at most 4 s after start) thaws it
    done = finished_at(writer, 10)
    assert done is not None, "nobody thawed after freeze-io was killed"
    assert done <= started + 4 + 1
    assert "fired" in watchdog_log(lab, "bk-killed")


@pytest.mark.parametrize("kind", ["tmpfs", "plain directory", "missing"])
def test_an_unfreezable_mountpoint_is_refused_before_anything_is_frozen(lab: Lab, kind: str) -> None:
    # Given a good XFS filesystem listed first, and a bad mountpoint
    data = lab.xfs()
    if kind == "tmpfs":
        bad = lab.tmpfs()
        why = "tmpfs filesystem, which cannot be frozen"
    elif kind == "plain directory":
        bad = lab.root / "plain"
        bad.mkdir()
        why = "is not a mountpoint"
    else:
        bad = lab.root / "nowhere"
        why = "does not exist"

    refused = run_document(
        "freeze-io", params(lab, [data.mountpoint, bad], f"bk-bad-{kind.split()[0]}"), lab.root
    )

    # Then it fails in preflight with the reason, nothing was frozen, no watchdog armed
    assert refused.returncode == 1
    assert refused.report["status"] == "failed"
    assert refused.report["stage"] == "preflight"
    assert f"{bad} {why}" in refused.report["reason"] or f"{bad} is a {why}" in refused.report["reason"]
    assert refused.report["frozeAt"] is None
    assert refused.report["watchdogPid"] is None
    assert not list(lab.state_dir.glob("*.watchdog.pid"))
    writer = lab.writer(data)
    assert finished_at(writer, 5) is not None, "the good filesystem was left frozen"


def test_a_state_dir_on_a_listed_filesystem_is_refused(lab: Lab) -> None:
    # The watchdog writes its log in StateDir: on a frozen filesystem it would block, not thaw
    data = lab.xfs()
    inside = data.mountpoint / "state"
    refused = run_document(
        "freeze-io",
        {"Mountpoints": str(data.mountpoint), "BackupId": "bk-inside", "StateDir": str(inside)},
        lab.root,
    )
    assert refused.returncode == 1
    assert refused.report["stage"] == "preflight"
    assert f"StateDir {inside} is on the filesystem mounted at {data.mountpoint}" in refused.report["reason"]
    assert refused.report["watchdogPid"] is None
    assert finished_at(lab.writer(data), 5) is not None


def test_a_freeze_that_fails_midway_thaws_what_it_froze_and_cancels_the_watchdog(lab: Lab) -> None:
    data, logs = lab.xfs("data"), lab.xfs("logs")
    failing = lab.root / "failing-fsfreeze"
    failing.write_text(
        f"#!/bin/bash\n[[ $1 == -f && $2 == {logs.mountpoint} ]] && "
        '{ echo "injected failure" >&2; exit 1; }\n'
        'exec fsfreeze "$@"\n'
    )
    failing.chmod(0o755)

    failed = freeze(lab, [data, logs], "bk-midway", FsfreezeCommand=str(failing))

    assert failed.returncode == 1
    assert failed.report["stage"] == "freeze"
    assert "injected failure" in failed.report["reason"]
    assert failed.report["frozeAt"] is None
    assert wait_until(lambda: not alive(failed.report["watchdogPid"]), 60)
    assert "rollback" in watchdog_log(lab, "bk-midway")
    writer = lab.writer(data)
    assert finished_at(writer, 5) is not None, "the first filesystem was left frozen"


def test_a_second_freeze_of_the_same_backup_is_refused_while_armed(lab: Lab) -> None:
    data = lab.xfs()
    first = freeze(lab, [data], "bk-again")
    again = freeze(lab, [data], "bk-again")
    assert first.returncode == 0
    assert again.returncode == 1
    assert again.report["stage"] == "preflight"
    assert "already armed" in again.report["reason"]
    assert alive(first.report["watchdogPid"])  # the first freeze's watchdog is untouched
    assert thaw(lab, [data], "bk-again").report["mountpoints"][0]["result"] == "thawed"


def test_thaw_io_copes_with_a_filesystem_unmounted_while_frozen(lab: Lab) -> None:
    # Given a frozen XFS that someone unmounts (that succeeds, and the mountpoint can no longer
    # be thawed through its path)
    data = lab.xfs()
    frozen = freeze(lab, [data], "bk-umount")
    assert frozen.returncode == 0, frozen.stderr
    subprocess.run(["umount", str(data.mountpoint)], check=True, timeout=10)
    assert not is_mountpoint(data.mountpoint)

    thawed = thaw(lab, [data], "bk-umount")

    # Then thaw-io succeeds and says what it did; the kernel holds nothing frozen any more
    assert thawed.returncode == 0, thawed.stderr
    assert thawed.report["status"] == "thawed"
    entry = thawed.report["mountpoints"][0]
    assert entry["result"] in {"thawed", "not-mounted"}
    assert "unmounted" in entry["detail"]
    assert thawed.report["watchdog"] == "cancelled"
    assert wait_until(lambda: not superblock_alive(data.device), 60), "the filesystem is still held"


def test_the_watchdog_copes_with_a_filesystem_unmounted_while_frozen(lab: Lab) -> None:
    data = lab.xfs()
    # a deadline the umount comes well before, however busy the machine
    frozen = freeze(lab, [data], "bk-umount-wd", timeout=5)
    assert frozen.returncode == 0, frozen.stderr
    subprocess.run(["umount", str(data.mountpoint)], check=True, timeout=10)

    assert wait_until(lambda: not alive(frozen.report["watchdogPid"]), 60), "the watchdog did not finish"

    log = watchdog_log(lab, "bk-umount-wd")
    assert "fired" in log
    assert "unmounted" in log
    assert wait_until(lambda: not superblock_alive(data.device), 60), "the filesystem is still held"
    # and a later thaw-io is still fine
    late = thaw(lab, [data], "bk-umount-wd")
    assert late.report["status"] == "thawed"
    assert late.report["watchdogFired"] is True


def _percentile(values: list[float], p: float) -> float:
    """Nearest rank: with 20 samples p99 is the largest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def test_freeze_window_over_20_runs(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    # Figures only, no assertion on time: the window is what this host's scripts add (bash start,
    # findmnt, the ioctls); in a backup the SSM round trips and CreateSnapshots come on top.
    filesystems = [lab.xfs("a"), lab.xfs("b")]
    froze_to_thawed, span = [], []
    for run in range(20):
        frozen = freeze(lab, filesystems, f"bk-window-{run}")
        thawed = thaw(lab, filesystems, f"bk-window-{run}")
        assert frozen.report["status"] == "frozen", frozen.stderr
        assert thawed.report["status"] == "thawed", thawed.stderr
        froze_to_thawed.append(thawed.report["thawedAt"] - frozen.report["frozeAt"])
        span.append(thawed.report["thawedAt"] - frozen.report["freezeStartedAt"])
    with capsys.disabled():
        print(
            "\nfreeze window, 20 runs, 2 XFS mountpoints, freeze-io then thaw-io back to back: "
            f"froze->thawed p50 {_percentile(froze_to_thawed, 50) * 1000:.0f} ms, "
            f"p99 {_percentile(froze_to_thawed, 99) * 1000:.0f} ms; "
            f"first freeze started->last thawed p50 {_percentile(span, 50) * 1000:.0f} ms, "
            f"p99 {_percentile(span, 99) * 1000:.0f} ms"
        )


def test_a_dry_run_checks_and_freezes_nothing(lab: Lab) -> None:
    # Given a good XFS filesystem, and a plain directory that is not a mountpoint
    data = lab.xfs()
    plain = lab.root / "plain"
    plain.mkdir()

    # When freeze-io runs with DryRun=true on the good one, then on both
    ready = freeze(lab, [data], "bk-dry", DryRun="true")
    refused = run_document(
        "freeze-io", params(lab, [data.mountpoint, plain], "bk-dry-bad", DryRun="true"), lab.root
    )

    # Then the good one is ready (its device and type reported), nothing armed, nothing frozen
    assert ready.returncode == 0, ready.stderr
    assert ready.report["status"] == "ready"
    assert ready.report["mountpoints"][0]["fstype"] == "xfs"
    assert ready.report["watchdogPid"] is None
    assert ready.report["frozeAt"] is None
    assert not list(lab.state_dir.glob("*.watchdog.pid"))
    assert finished_at(lab.writer(data), 5) is not None, "a dry run froze the filesystem"
    # And the plain directory fails the dry run with the reason, as a real freeze would
    assert refused.returncode == 1
    assert refused.report["stage"] == "preflight"
    assert f"{plain} is not a mountpoint" in refused.report["reason"]


def test_hosts_given_one_instant_freeze_at_it_a_late_one_at_once_a_far_one_is_refused(lab: Lab) -> None:
    # Given two hosts' filesystems and one instant 2 s ahead (FreezeAt, epoch milliseconds)
    first, second = lab.xfs("a"), lab.xfs("b")
    instant = math.ceil((time.time() + 2) * 1000)

    # When freeze-io runs on both at once, as two deliveries of one backup arrive
    hosts = [(first, "bk-at-a"), (second, "bk-at-b")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        started = [pool.submit(freeze, lab, [fs], key, FreezeAt=str(instant)) for fs, key in hosts]
        runs = [future.result() for future in started]

    # Then neither froze before the instant; each reports it, and its watchdog was armed before
    # the wait (its start then takes nothing from the freeze window) with its whole window counted
    # from the instant: the same timeout from the freeze as when armed right before it
    for run in runs:
        assert run.returncode == 0, run.stdout + run.stderr
        report = run.report
        assert report["freezeAt"] == instant / 1000
        assert report["armedAt"] < instant / 1000 <= report["freezeStartedAt"]
        assert report["watchdogDeadline"] == pytest.approx(instant / 1000 + 10, abs=0.002)
        assert report["frozeAt"] < report["watchdogDeadline"]
    assert thaw(lab, [first], "bk-at-a").report["status"] == "thawed"
    assert thaw(lab, [second], "bk-at-b").report["status"] == "thawed"

    # And a command that arrives after the instant freezes at once
    before = time.time()
    late = freeze(lab, [first], "bk-at-late", FreezeAt=str(instant))
    assert late.returncode == 0, late.stdout + late.stderr
    assert late.report["freezeStartedAt"] >= before
    assert late.report["freezeStartedAt"] - before < 5  # no wait (a generous bound for a busy machine)
    assert thaw(lab, [first], "bk-at-late").report["status"] == "thawed"

    # And an instant more than 30 s ahead (a host clock out of sync) is refused, nothing frozen
    far = freeze(lab, [first], "bk-at-far", FreezeAt=str(math.ceil((time.time() + 60) * 1000)))
    assert far.returncode == 1
    assert "more than 30 s ahead" in far.report["reason"]
    assert far.report["frozeAt"] is None
    assert finished_at(lab.writer(first), 5) is not None, "a refused freeze froze the filesystem"
