"""freeze-io's signals on real XFS filesystems: the report PUT to the frozen signal, and the
watchdog thawing on the thaw signal (a presigned S3 URL on AWS; here a loopback HTTP server that
answers as S3 does: 403/404 until the marker exists, 503 when throttled, 200 with the marker).

Needs root, xfsprogs and util-linux, like test_freeze_thaw.py. No timing assertion: what is
checked is who thawed, and that it came after the marker and before the watchdog's deadline."""

import base64
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.documents.test_freeze_thaw import (
    alive,
    finished_at,
    freeze,
    params,
    thaw,
    wait_until,
    watchdog_log,
)
from tests.documents.xfs_lab import Lab
from tests.documents_util import run_document

MARKER = {"thaw": True, "backupId": "bk-signal"}


class Bucket:
    """One object per path; GET answers ``refuse`` (403, as S3 answers a missing key to a signer
    without ListBucket) until ``publish``; PUT stores the body."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.gets = 0
        self.refuse = 403
        self.published_at: float | None = None
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def publish(self, path: str, body: dict[str, object]) -> None:
        self.published_at = time.time()
        self.objects[path] = json.dumps(body).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        bucket = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                bucket.gets += 1
                body = bucket.objects.get(self.path.split("?")[0])
                self.send_response(200 if body is not None else bucket.refuse)
                self.end_headers()
                self.wfile.write(body or b"<Error/>")

            def do_PUT(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                bucket.objects[self.path.split("?")[0]] = self.rfile.read(length)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def bucket() -> Iterator[Bucket]:
    made = Bucket()
    yield made
    made.server.shutdown()


def signal(url: str) -> str:
    """A URL as the workflow passes it: base64url without padding (SSM's pattern allows no '&')."""
    return base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def test_the_watchdog_thaws_on_the_marker_and_thaw_io_reports_that_thaw(lab: Lab, bucket: Bucket) -> None:
    # Given a host frozen with both signals, a 20 s watchdog, and a blocked write
    data = lab.xfs()
    frozen = freeze(
        lab,
        [data],
        "bk-signal",
        timeout=20,
        ThawSignal=signal(f"{bucket.url}/signals/a/bk-signal/thaw?X-Amz-Signature=1"),
        FrozenSignal=signal(f"{bucket.url}/signals/a/bk-signal/hosts/i-1?X-Amz-Signature=2"),
    )
    assert frozen.returncode == 0, frozen.stderr
    assert frozen.report["thawSignal"] == "polled"
    # Then its report was PUT to the frozen signal, as printed
    put = json.loads(bucket.objects["/signals/a/bk-signal/hosts/i-1"])
    assert (put["status"], put["frozeAt"]) == ("frozen", frozen.report["frozeAt"])
    writer = lab.writer(data)
    # While the marker is missing (refused, then throttled), the watchdog polls and the write blocks
    assert wait_until(lambda: bucket.gets >= 3, 10)
    bucket.refuse = 503
    assert finished_at(writer, 0.5) is None, "a write completed on a frozen filesystem"

    # When the marker appears
    bucket.publish("/signals/a/bk-signal/thaw", MARKER)

    # Then the write completes (well before the 20 s deadline) and the watchdog is gone
    assert finished_at(writer, 10) is not None, "the write still blocks after the marker"
    assert wait_until(lambda: not alive(frozen.report["watchdogPid"]), 60)
    assert "thawed on the snapshot's signal" in watchdog_log(lab, "bk-signal")
    assert "polling with curl" not in watchdog_log(lab, "bk-signal")  # python3's poller found it
    # And thaw-io, run after, reports that thaw: after the marker, before the deadline
    thawed = thaw(lab, [data], "bk-signal")
    report = thawed.report
    assert (thawed.returncode, report["status"], report["thawedBy"]) == (0, "thawed", "signal"), thawed.stderr
    assert report["watchdog"] == "thawed-on-signal"
    assert report["watchdogFired"] is False
    assert report["mountpoints"][0]["result"] == "thawed"
    assert bucket.published_at is not None
    assert (
        bucket.published_at
        <= report["thawStartedAt"]
        <= report["thawedAt"]
        < frozen.report["watchdogDeadline"]
    )
    # and a second thaw-io says the same
    assert thaw(lab, [data], "bk-signal").report["thawedAt"] == report["thawedAt"]


def test_a_body_that_is_not_the_marker_thaws_nothing(lab: Lab, bucket: Bucket) -> None:
    data = lab.xfs()
    bucket.publish("/t", {"something": "else"})
    frozen = freeze(lab, [data], "bk-other", timeout=20, ThawSignal=signal(f"{bucket.url}/t"))
    assert frozen.returncode == 0, frozen.stderr
    writer = lab.writer(data)
    assert wait_until(lambda: bucket.gets >= 3, 10)
    assert finished_at(writer, 0.3) is None, "thawed on a body that is not the marker"
    thawed = thaw(lab, [data], "bk-other")
    assert (thawed.report["thawedBy"], thawed.report["watchdog"]) == ("thaw-io", "cancelled")
    assert finished_at(writer, 10) is not None


def test_thaw_io_first_cancels_the_polling_watchdog_and_a_later_marker_changes_nothing(
    lab: Lab, bucket: Bucket
) -> None:
    data = lab.xfs()
    frozen = freeze(lab, [data], "bk-first", timeout=20, ThawSignal=signal(f"{bucket.url}/m"))
    assert frozen.returncode == 0, frozen.stderr
    thawed = thaw(lab, [data], "bk-first")
    assert (thawed.report["thawedBy"], thawed.report["watchdog"]) == ("thaw-io", "cancelled")
    assert wait_until(lambda: not alive(frozen.report["watchdogPid"]), 60)
    bucket.publish("/m", MARKER)
    time.sleep(0.3)  # a watchdog still polling would act now; none is left to
    assert not (lab.state_dir / "bk-first.signaled").exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [("dGhpcyBpcyBub3QgYSB1cmwgYXQgYWxs", "not a base64url http(s) URL"), ("", None)],
    ids=["not-a-url", "none"],
)
def test_without_a_usable_signal_freeze_and_thaw_work_as_before(
    lab: Lab, value: str, why: str | None
) -> None:
    data = lab.xfs()
    frozen = freeze(lab, [data], "bk-plain", ThawSignal=value)
    assert frozen.returncode == 0, frozen.stderr
    assert (why or "none") in frozen.report["thawSignal"]
    thawed = thaw(lab, [data], "bk-plain")
    assert (thawed.report["status"], thawed.report["thawedBy"]) == ("thawed", "thaw-io")


def test_a_python3_that_cannot_run_the_poller_leaves_the_polling_to_curl(
    lab: Lab, bucket: Bucket, tmp_path: Path
) -> None:
    # Given a host whose python3 cannot run the poller (it exits 2, as on wrong arguments)
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "python3").write_text("#!/bin/sh\nexit 2\n")
    (stand_in / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in}:{os.environ['PATH']}"}
    data = lab.xfs()
    url = f"{bucket.url}/signals/a/bk-curl/thaw?X-Amz-Signature=1"
    values = params(
        lab, [data.mountpoint], "bk-curl", 20, ThawSignal=signal(url), SignalPollMilliseconds="20"
    )
    frozen = run_document("freeze-io", values, lab.root, env=env)
    assert frozen.returncode == 0, frozen.stderr
    writer = lab.writer(data)
    # When the watchdog polls with curl and the marker appears
    assert wait_until(lambda: bucket.gets >= 3, 10)
    bucket.publish("/signals/a/bk-curl/thaw", MARKER)
    # Then it thaws on it, and its log says why curl polled
    assert finished_at(writer, 10) is not None, "the write still blocks after the marker"
    assert wait_until(lambda: "thawed on the snapshot's signal" in watchdog_log(lab, "bk-curl"), 10)
    assert "the thaw signal's poller exited 2: polling with curl" in watchdog_log(lab, "bk-curl")
    assert thaw(lab, [data], "bk-curl").report["thawedBy"] == "signal"


@pytest.mark.parametrize("interval", ["5", "1001", "soon"])
def test_a_poll_interval_out_of_range_leaves_the_thaw_to_thaw_io(
    lab: Lab, bucket: Bucket, interval: str
) -> None:
    # SSM refuses such a value (the parameter's allowedPattern); the script's own check, behind it
    data = lab.xfs()
    values = params(lab, [data.mountpoint], "bk-every", ThawSignal=signal(f"{bucket.url}/m"))
    values["SignalPollMilliseconds"] = interval
    frozen = run_document("freeze-io", values, lab.root, check_patterns=False)
    assert frozen.returncode == 0, frozen.stderr
    assert frozen.report["thawSignal"].startswith(f"unusable: SignalPollMilliseconds '{interval}'")
    thawed = thaw(lab, [data], "bk-every")
    assert (thawed.report["status"], thawed.report["thawedBy"]) == ("thawed", "thaw-io")
    assert bucket.gets == 0


def recording(tmp_path: Path, *commands: str) -> tuple[dict[str, str], Path]:
    """A PATH whose ``commands`` append their arguments to a record, then run the real one."""
    stand_in, record = tmp_path / "bin", tmp_path / "record"
    stand_in.mkdir()
    record.touch()
    for command in commands:
        real = shutil.which(command)
        assert real is not None, f"{command} is not installed"
        (stand_in / command).write_text(f'#!/bin/sh\necho "{command} $*" >>{record}\nexec {real} "$@"\n')
        (stand_in / command).chmod(0o755)
    return {**os.environ, "PATH": f"{stand_in}:{os.environ['PATH']}"}, record


def test_with_an_instant_the_poller_puts_the_report_and_thaws_without_starting_a_process(
    lab: Lab, bucket: Bucket, tmp_path: Path
) -> None:
    # Given a host told to freeze at an instant 5 s ahead (the watchdog's poller announces itself
    # well before it even on a busy machine: with the instant past, freeze-io would use curl),
    # with both signals, and curl and fsfreeze recording each start
    env, record = recording(tmp_path, "curl", "fsfreeze")
    data = lab.xfs()
    values = params(
        lab,
        [data.mountpoint],
        "bk-relay",
        20,
        ThawSignal=signal(f"{bucket.url}/signals/a/bk-relay/thaw?X-Amz-Signature=1"),
        FrozenSignal=signal(f"{bucket.url}/signals/a/bk-relay/hosts/i-1?X-Amz-Signature=2"),
        FreezeAt=str(int(time.time() * 1000) + 5000),
    )
    frozen = run_document("freeze-io", values, lab.root, env=env)
    assert frozen.returncode == 0, frozen.stderr
    # Then the report reached the frozen signal through the watchdog's poller: no curl started
    put = json.loads(bucket.objects["/signals/a/bk-relay/hosts/i-1"])
    assert (put["status"], put["frozeAt"]) == ("frozen", frozen.report["frozeAt"])
    assert "curl" not in record.read_text()
    writer = lab.writer(data)
    assert finished_at(writer, 0.5) is None, "a write completed on a frozen filesystem"
    # When the marker appears, the poller thaws itself (FITHAW): no fsfreeze -u started
    bucket.publish("/signals/a/bk-relay/thaw", MARKER)
    assert finished_at(writer, 10) is not None, "the write still blocks after the marker"
    assert wait_until(lambda: "(by the poller)" in watchdog_log(lab, "bk-relay"), 10)
    assert [line for line in record.read_text().splitlines() if "-u" in line.split()] == []
    # And thaw-io reports that thaw as the watchdog's, with the filesystem's result
    report = thaw(lab, [data], "bk-relay").report
    assert (report["thawedBy"], report["watchdog"]) == ("signal", "thawed-on-signal")
    assert report["mountpoints"][0]["result"] == "thawed"
    assert bucket.published_at is not None
    assert bucket.published_at <= report["thawStartedAt"]


def test_another_freeze_command_is_left_to_the_watchdog_which_runs_it(
    lab: Lab, bucket: Bucket, tmp_path: Path
) -> None:
    # Given an operator's own freeze command (here a wrapper that records each call)
    env, record = recording(tmp_path, "fsfreeze")
    data = lab.xfs()
    values = params(
        lab,
        [data.mountpoint],
        "bk-own",
        20,
        ThawSignal=signal(f"{bucket.url}/m"),
        FsfreezeCommand=str(tmp_path / "bin" / "fsfreeze"),
        FreezeAt=str(int(time.time() * 1000) + 1000),
    )
    frozen = run_document("freeze-io", values, lab.root, env=env)
    assert frozen.returncode == 0, frozen.stderr
    writer = lab.writer(data)
    # When the marker appears
    bucket.publish("/m", MARKER)
    # Then the watchdog thaws with that command, not the poller with its ioctl
    assert finished_at(writer, 10) is not None, "the write still blocks after the marker"
    assert wait_until(lambda: "thawed on the snapshot's signal" in watchdog_log(lab, "bk-own"), 10)
    assert "(by the poller)" not in watchdog_log(lab, "bk-own")
    assert f"fsfreeze -u {data.mountpoint}" in record.read_text()
    assert thaw(lab, [data], "bk-own").report["thawedBy"] == "signal"
