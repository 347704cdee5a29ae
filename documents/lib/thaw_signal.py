"""freeze-io's watchdog waiting for the backup's thaw marker (documents/freeze-io.sh).

Runs on the host as ``python3 -c "$THAW_SIGNAL_PY" URL DEADLINE_MS INTERVAL_MS [FROM_MS]``:
Python 3.9 or later, standard library only (tools/documents.py renders this file into freeze-io).

Connects at once, then from ``FROM_MS`` (epoch milliseconds, the array's freeze instant; default
now) GETs the presigned ``URL`` every ``INTERVAL_MS`` milliseconds over that one kept-alive
HTTP(S) connection until it answers 200 with the marker (a body with ``"thaw": true``). Started
before the instant, its start and its connection cost nothing in the freeze window. A refusal
(403 or 404 until the marker exists, 503 when S3 throttles) or a broken connection is only the
next look; a look never outlasts the deadline.

Two more duties, each only when the watchdog's environment names its files, so that nothing
inside the freeze window starts a process:

- **The frozen report** (``FROZEN_URL``, ``POLLER_FILE``, ``REPORT_FILE``, ``SENT_FILE``): with
  SIGUSR1 blocked it writes ``PID START`` to ``POLLER_FILE``; freeze-io, once frozen, writes its
  report to ``REPORT_FILE`` and sends SIGUSR1; a thread of the poller waiting for that signal PUTs
  the report to ``FROZEN_URL`` over a connection opened before the instant (beside the looks, never
  behind one that the server is slow to answer) and writes the answer's status to ``SENT_FILE``
  (freeze-io PUTs it itself when that is not a 2xx).
- **The thaw** (``LOCK_FILE``, ``PID_FILE``, ``MOUNTS_FILE``, ``SIGNALED_FILE``, ``MOUNTPOINTS``,
  and ``FSFREEZE_COMMAND`` = ``fsfreeze``): on the marker it takes the lock without waiting,
  checks that ``PID_FILE`` still names its parent (the armed watchdog) and that every mountpoint
  is still the filesystem freeze-io recorded, then thaws each with ``FITHAW`` (the ioctl
  ``fsfreeze -u`` makes) and writes ``SIGNALED_FILE`` as the watchdog does. Anything it cannot
  check (the lock busy, a mount changed, another freeze command) it leaves to the watchdog.

Exit status: 0 the marker (the watchdog thaws), 3 the marker and every mountpoint thawed here
(``PID_FILE`` removed), 4 the marker and a thaw here failed (the watchdog stays armed until its
deadline), 1 the deadline is less than 100 ms away (the watchdog's own deadline thaws), 2 wrong
arguments (freeze-io polls with curl instead).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import http.client
import os
import re
import signal
import sys
import threading
import time
from urllib.parse import urlsplit

MARKER = re.compile(rb'"thaw"\s*:\s*true')
MARGIN_MS = 100
"""The poller gives up this long before the deadline: the watchdog then thaws on time."""
LOOK_TIMEOUT_MS = 1000
PUT_TIMEOUT_S = 2.0
FITHAW = 0xC0045878
"""_IOWR('X', 120, int) from linux/fs.h: what ``fsfreeze -u`` calls on the mountpoint."""
THAWED_HERE, THAW_FAILED_HERE = 3, 4


def now_ms() -> int:
    return int(time.time() * 1000)


def connection(url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.netloc, timeout=timeout)
    return http.client.HTTPConnection(parts.netloc, timeout=timeout)


def target(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def connected(url: str, timeout: float) -> http.client.HTTPConnection | None:
    """A connection opened now, or None (the first request connects)."""
    try:
        conn = connection(url, timeout)
        conn.connect()
        return conn
    except OSError:
        return None


class Relay:
    """freeze-io's frozen report, PUT by the poller when freeze-io signals it (SIGUSR1)."""

    def __init__(self, url: str, report_file: str, sent_file: str) -> None:
        self.url, self.report_file, self.sent_file = url, report_file, sent_file
        self.conn: http.client.HTTPConnection | None = None

    def connect(self) -> None:
        self.conn = connected(self.url, PUT_TIMEOUT_S)

    def put(self, body: bytes) -> int:
        if self.conn is None:
            self.conn = connection(self.url, PUT_TIMEOUT_S)
        self.conn.request("PUT", target(self.url), body=body)
        answer = self.conn.getresponse()
        answer.read()
        return answer.status

    def send(self) -> None:
        """PUT the report (once more on a new connection if the kept one broke), then the
        status to ``sent_file``: 0 when it could not be sent."""
        try:
            with open(self.report_file, "rb") as f:
                body = f.read()
        except OSError:
            return
        status = 0
        for _ in range(2):
            try:
                status = self.put(body)
                break
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
        write_atomically(self.sent_file, f"{status}\n")

    def serve(self) -> None:
        """In its own thread: the report PUT each time freeze-io signals (once, in practice)."""
        self.connect()
        while True:
            signal.sigwait([signal.SIGUSR1])
            self.send()


def write_atomically(path: str, text: str) -> None:
    with open(f"{path}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)


def pause_until(until_ms: int) -> None:
    left = until_ms - now_ms()
    if left > 0:
        time.sleep(left / 1000)


def look(conn: http.client.HTTPConnection, path: str) -> bool:
    """One GET; True when it answered the marker. The body is always read, so the connection
    can carry the next look."""
    conn.request("GET", path)
    answer = conn.getresponse()
    body = answer.read()
    return answer.status == 200 and MARKER.search(body) is not None


def look_once(
    conn: http.client.HTTPConnection | None, url: str, left_ms: int
) -> tuple[bool, http.client.HTTPConnection | None]:
    """(found, the connection to keep: None after a failure, so the next look connects again)."""
    timeout = min(LOOK_TIMEOUT_MS, left_ms) / 1000
    try:
        if conn is None:
            conn = connection(url, timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return look(conn, target(url)), conn
    except (OSError, http.client.HTTPException):
        if conn is not None:
            conn.close()
        return False, None


def wait(url: str, deadline_ms: int, interval_ms: int, from_ms: int = 0) -> bool:
    """From ``from_ms`` on, poll until the marker (True) or the deadline's margin (False)."""
    conn: http.client.HTTPConnection | None = None
    first = min(from_ms, deadline_ms - MARGIN_MS)
    if first > now_ms():  # connected before the instant: the first look is one request
        conn = connected(url, min(LOOK_TIMEOUT_MS, first - now_ms()) / 1000)
        pause_until(first)
    while True:
        started = now_ms()
        left = deadline_ms - MARGIN_MS - started
        if left <= 0:
            return False
        found, conn = look_once(conn, url, left)
        if found:
            return True
        pause_until(min(started + interval_ms, deadline_ms - MARGIN_MS))


def proc_start(pid: int) -> str:
    """A process's start time (clock ticks since boot): with the PID it names one process."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1].split()[19]


def mounted(mountpoint: str) -> tuple[str, str, int] | None:
    """(fstype, source, device number) of the top filesystem mounted exactly at the path."""
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, rest = line.partition(" - ")
            parts, more = fields.split(), rest.split()
            if len(parts) >= 5 and len(more) >= 2 and parts[4] == mountpoint:
                major, minor = parts[2].split(":")
                found = (more[0], more[1], os.makedev(int(major), int(minor)))
    return found


def is_recorded(mountpoint: str, device: str, fstype: str) -> bool:
    """The mountpoint still holds the filesystem freeze-io froze there (as findmnt saw it)."""
    found = mounted(mountpoint)
    if found is None or not device or found[0] != fstype:
        return False
    try:
        return found[1] == device or os.stat(device).st_rdev == found[2]
    except OSError:
        return False


def fithaw(mountpoint: str) -> tuple[str, str]:
    """(thawed | not-frozen | failed, detail), as the watchdog's thaw_path reports."""
    try:
        fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return "failed", f"open {mountpoint}: {e.strerror}"
    try:
        fcntl.ioctl(fd, FITHAW, 0)
        return "thawed", ""
    except OSError as e:
        if e.errno == errno.EINVAL:
            return "not-frozen", "was not frozen"
        return "failed", f"FITHAW on {mountpoint}: {e.strerror}"
    finally:
        os.close(fd)


def armed(pid_file: str) -> bool:
    """PID_FILE still names this poller's parent: the watchdog nobody has cancelled."""
    try:
        with open(pid_file) as f:
            pid, start = f.read().split()[:2]
        return int(pid) == os.getppid() and proc_start(int(pid)) == start
    except (OSError, ValueError, IndexError):
        return False


def recorded(mounts_file: str) -> dict[str, tuple[str, str]]:
    records: dict[str, tuple[str, str]] = {}
    with open(mounts_file) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                records[parts[0]] = (parts[1], parts[2])
    return records


def thaw_all(mountpoints: list[str], signaled_file: str) -> bool:
    """Thaw each, in freeze-io's order; SIGNALED_FILE as the watchdog writes it. True if none failed."""
    started, lines, ok = now_ms(), [], True
    for i, mp in enumerate(mountpoints):
        result, detail = fithaw(mp)
        ok = ok and result != "failed"
        lines.append(f"{i}\t{result}\t{now_ms()}\t{detail}\n")
    write_atomically(signaled_file, f"{started} {now_ms()}\n" + "".join(lines))
    return ok


def thaw_here(env: dict[str, str]) -> int | None:
    """On the marker: THAWED_HERE, THAW_FAILED_HERE, or None (left to the watchdog)."""
    names = ("LOCK_FILE", "PID_FILE", "MOUNTS_FILE", "SIGNALED_FILE", "MOUNTPOINTS")
    if env.get("FSFREEZE_COMMAND") != "fsfreeze" or not all(env.get(n) for n in names):
        return None
    fd = os.open(env["LOCK_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        mountpoints = env["MOUNTPOINTS"].split(",")
        records = recorded(env["MOUNTS_FILE"])
        if not armed(env["PID_FILE"]) or not all(
            is_recorded(mp, *records.get(mp, ("", ""))) for mp in mountpoints
        ):
            return None
        if not thaw_all(mountpoints, env["SIGNALED_FILE"]):
            return THAW_FAILED_HERE
        os.unlink(env["PID_FILE"])
        return THAWED_HERE
    except OSError:
        return None
    finally:
        os.close(fd)


def relay_from(env: dict[str, str]) -> Relay | None:
    """The report's relay, its thread started and announced in POLLER_FILE once SIGUSR1 is
    blocked in every thread (never before: its default action would end the poller)."""
    names = ("FROZEN_URL", "POLLER_FILE", "REPORT_FILE", "SENT_FILE")
    if not all(env.get(n) for n in names) or urlsplit(env["FROZEN_URL"]).scheme not in ("http", "https"):
        return None
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    try:
        relay = Relay(env["FROZEN_URL"], env["REPORT_FILE"], env["SENT_FILE"])
        threading.Thread(target=relay.serve, daemon=True).start()
        write_atomically(env["POLLER_FILE"], f"{os.getpid()} {proc_start(os.getpid())}\n")
    except OSError:
        return None
    return relay


def run(url: str, deadline_ms: int, interval_ms: int, from_ms: int, env: dict[str, str]) -> int:
    relay = relay_from(env)
    try:
        if not wait(url, deadline_ms, interval_ms, from_ms):
            return 1
        return thaw_here(env) or 0
    finally:
        if relay is not None:
            with contextlib.suppress(OSError):
                os.unlink(env["POLLER_FILE"])


def main(argv: list[str], env: dict[str, str] | None = None) -> int:
    try:
        url, deadline, interval, *start = argv
        deadline_ms, interval_ms = int(deadline), int(interval)
        from_ms = int(start[0]) if start else 0
        if len(start) > 1:
            raise ValueError
    except ValueError:
        print("usage: thaw_signal URL DEADLINE_MS INTERVAL_MS [FROM_MS]", file=sys.stderr)
        return 2
    if urlsplit(url).scheme not in ("http", "https") or interval_ms <= 0:
        print("thaw_signal: an http(s) URL and a positive interval", file=sys.stderr)
        return 2
    return run(url, deadline_ms, interval_ms, from_ms, dict(os.environ) if env is None else env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
