"""documents/lib/thaw_signal.py, freeze-io's poller of the thaw marker, against a loopback HTTP
server that answers as S3 answers a presigned GET: 403 (or 404) until the marker exists, 503 when
throttled, 200 with the marker. The whole freeze-io with it: tests/documents/test_freeze_signals.py.
"""

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import thaw_signal

MARKER = json.dumps({"thaw": True, "backupId": "bk-1"}).encode()


class Key:
    """One presigned key: ``answers`` are served in turn (status, body), the last one for good."""

    def __init__(self, answers: list[tuple[int, bytes]], keep_alive: bool = True, hang: bool = False) -> None:
        self.answers = answers
        self.gets: list[str] = []
        self.puts: list[bytes] = []
        self.connections: set[int] = set()
        self.hang = hang
        self.answered = threading.Event()
        key = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_GET(self) -> None:
                key.gets.append(self.path)
                key.connections.add(self.client_address[1])
                if key.hang:
                    time.sleep(60)  # longer than any test: the poller must not wait for it
                    key.answered.set()
                    return
                status, body = key.answers[min(len(key.gets), len(key.answers)) - 1]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                key.connections.add(self.client_address[1])
                key.puts.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def get_request(self) -> tuple[socket.socket, Any]:
                key.accepted.append(time.time())
                return super().get_request()

        self.accepted: list[float] = []
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = (
            f"http://127.0.0.1:{self.server.server_address[1]}/signals/a/bk-1/thaw?X-Amz-Signature=ab%2Fc"
        )
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def serve() -> Iterator[list[Key]]:
    keys: list[Key] = []
    yield keys
    for key in keys:
        key.server.shutdown()
        key.server.server_close()


def key(serve: list[Key], answers: list[tuple[int, bytes]], **kwargs: bool) -> Key:
    made = Key(answers, **kwargs)
    serve.append(made)
    return made


def deadline(seconds: float) -> int:
    return int((time.time() + seconds) * 1000)


def test_the_marker_is_found_after_refusals_over_one_kept_alive_connection(serve: list[Key]) -> None:
    # Given a key refused (missing), then throttled, then the marker
    marker = key(serve, [(403, b"<Error/>"), (404, b"<Error/>"), (503, b"<SlowDown/>"), (200, MARKER)])
    # When the poller waits for it with a 30 s deadline
    found = thaw_signal.wait(marker.url, deadline(30), 10)
    # Then it found it on the fourth look, each a GET of the presigned path and query as given
    assert found is True
    assert marker.gets == ["/signals/a/bk-1/thaw?X-Amz-Signature=ab%2Fc"] * 4
    # over one connection: no new connection (nor TLS handshake, on S3) a look
    assert len(marker.connections) == 1


def test_started_before_the_instant_it_connects_at_once_and_looks_only_from_the_instant(
    serve: list[Key],
) -> None:
    # Given the marker already there, and an instant 0.4 s away (the poller started during the lead)
    marker = key(serve, [(200, MARKER)])
    instant = deadline(0.4)
    # When the poller waits for it from that instant
    assert thaw_signal.wait(marker.url, deadline(30), 10, instant) is True
    # Then its one look came at the instant or after, never before (nothing is frozen before it)
    assert time.time() * 1000 >= instant
    assert len(marker.gets) == 1
    # over the connection it opened before the instant
    assert len(marker.connections) == 1


def test_an_instant_past_the_deadline_gives_up_at_the_deadline_without_a_look(serve: list[Key]) -> None:
    # Given the marker already there, but an instant after the deadline's margin
    marker = key(serve, [(200, MARKER)])
    # When the poller waits from that instant, Then it gives up (the watchdog's deadline thaws),
    # never having looked: a look could only come before the instant
    assert thaw_signal.wait(marker.url, deadline(0.3), 10, deadline(5)) is False
    assert marker.gets == []


def test_a_server_that_closes_each_connection_is_connected_to_again(serve: list[Key]) -> None:
    marker = key(serve, [(403, b""), (403, b""), (200, MARKER)], keep_alive=False)
    assert thaw_signal.wait(marker.url, deadline(30), 10) is True
    assert len(marker.gets) == 3
    assert len(marker.connections) == 3


def test_a_body_that_is_not_the_marker_is_not_a_thaw_and_the_deadline_ends_the_wait(serve: list[Key]) -> None:
    # Given a key that answers 200 with something else
    other = key(serve, [(200, b'{"thaw": false}')])
    # When the poller waits until a deadline 3 s away (looks 20 ms apart: many, however busy the
    # machine), Then it gives up (the watchdog's deadline thaws), having looked more than once
    assert thaw_signal.wait(other.url, deadline(3), 20) is False
    assert len(other.gets) > 1


def test_a_look_that_hangs_never_outlasts_the_deadline(serve: list[Key]) -> None:
    # Given a key whose GET never answers (within any test)
    hanging = key(serve, [(200, MARKER)], hang=True)
    # When the poller waits until a deadline 3 s away (its GET has reached the server by then,
    # however busy the machine), Then it gives up without the answer
    assert thaw_signal.wait(hanging.url, deadline(3), 10) is False
    assert hanging.gets
    assert not hanging.answered.is_set()


def test_nothing_listening_is_only_the_next_look() -> None:
    assert thaw_signal.wait("http://127.0.0.1:9/thaw", deadline(0.4), 10) is False


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["http://x/t", "1"],
        ["http://x/t", "soon", "10"],
        ["ftp://x/t", "1", "10"],
        ["http://x/t", "1", "0"],
        ["http://x/t", "1", "10", "later"],
        ["http://x/t", "1", "10", "1", "2"],
    ],
    ids=["none", "two", "not-a-number", "not-http", "no-interval", "instant-not-a-number", "five"],
)
def test_wrong_arguments_exit_2_so_freeze_io_polls_with_curl(argv: list[str]) -> None:
    assert thaw_signal.main(argv) == 2


def test_main_exits_0_on_the_marker_and_1_at_the_deadline(serve: list[Key]) -> None:
    marker = key(serve, [(200, MARKER)])
    assert thaw_signal.main([marker.url, str(deadline(30)), "10"]) == 0
    other = key(serve, [(403, b"")])
    assert thaw_signal.main([other.url, str(deadline(0.3)), "10"]) == 1
    assert thaw_signal.main([marker.url, str(deadline(30)), "10", str(deadline(0.2))]) == 0


POLLER = Path(thaw_signal.__file__)


def wait_for(check: Callable[[], object], seconds: float) -> bool:
    give_up = time.monotonic() + seconds
    while not check():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True


def test_the_report_freeze_io_hands_over_is_put_over_a_connection_opened_before_the_instant(
    serve: list[Key], tmp_path: Path
) -> None:
    # Given the poller started as the watchdog starts it, the instant a minute away (no start
    # outlasts it), and the frozen signal's key
    marker = key(serve, [(403, b"<Error/>")])
    frozen = key(serve, [(200, b"")])
    files = {name: str(tmp_path / name) for name in ("POLLER_FILE", "REPORT_FILE", "SENT_FILE")}
    env = {**os.environ, **files, "FROZEN_URL": frozen.url}
    poller = subprocess.Popen(
        [sys.executable, str(POLLER), marker.url, str(deadline(90)), "20", str(deadline(60))], env=env
    )
    try:
        # When it has announced itself, and freeze-io writes its report and signals it
        assert wait_for(lambda: Path(files["POLLER_FILE"]).exists(), 10)
        pid, start = Path(files["POLLER_FILE"]).read_text().split()
        assert (int(pid), start) == (poller.pid, thaw_signal.proc_start(poller.pid))
        assert wait_for(lambda: len(frozen.accepted) == 1, 10), "the PUT's connection is not open"
        Path(files["REPORT_FILE"]).write_text('{"status": "frozen"}\n')
        signalled = time.time()
        os.kill(poller.pid, signal.SIGUSR1)
        # Then it PUTs the report over the connection it holds, and says how that went
        assert wait_for(lambda: Path(files["SENT_FILE"]).exists(), 10)
        assert frozen.puts == [b'{"status": "frozen"}\n']
        assert len(frozen.connections) == 1
        assert frozen.accepted[0] < signalled
        assert Path(files["SENT_FILE"]).read_text() == "200\n"
        # and waits on for the instant (a SIGUSR1 is not its end), having looked at nothing yet
        assert poller.poll() is None
        assert marker.gets == []
    finally:
        poller.kill()
        poller.wait()


def test_without_the_watchdog_s_files_it_leaves_the_thaw_to_the_watchdog(tmp_path: Path) -> None:
    env = {
        "FSFREEZE_COMMAND": "fsfreeze",
        "LOCK_FILE": str(tmp_path / "lock"),
        "PID_FILE": str(tmp_path / "pid"),
        "MOUNTS_FILE": str(tmp_path / "mounts"),
        "SIGNALED_FILE": str(tmp_path / "signaled"),
        "MOUNTPOINTS": "/proc",
    }
    (tmp_path / "mounts").write_text("/proc proc proc\n")
    # another freeze command: the watchdog runs it
    assert thaw_signal.thaw_here({**env, "FSFREEZE_COMMAND": "/usr/local/bin/my-freeze"}) is None
    # a PID file naming another process (the watchdog was cancelled, or is another one's)
    (tmp_path / "pid").write_text(f"{os.getpid()} {thaw_signal.proc_start(os.getpid())}\n")
    assert thaw_signal.thaw_here(env) is None
    # the lock held by someone else (freeze-io still freezing, or thaw-io)
    (tmp_path / "pid").write_text(f"{os.getppid()} {thaw_signal.proc_start(os.getppid())}\n")
    with open(tmp_path / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert thaw_signal.thaw_here(env) is None
    # a mountpoint that is not the filesystem freeze-io recorded there
    (tmp_path / "mounts").write_text("/proc /dev/vda1 xfs\n")
    assert thaw_signal.thaw_here(env) is None
    assert not (tmp_path / "signaled").exists()
    assert (tmp_path / "pid").exists()


def test_a_mountpoint_is_the_recorded_filesystem_only_with_its_type_and_source() -> None:
    assert thaw_signal.is_recorded("/proc", "proc", "proc")
    assert not thaw_signal.is_recorded("/proc", "proc", "xfs")
    assert not thaw_signal.is_recorded("/proc", "/dev/vda1", "proc")
    assert not thaw_signal.is_recorded("/proc/self", "proc", "proc")  # not a mountpoint
