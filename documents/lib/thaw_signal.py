"""freeze-io's watchdog waiting for the backup's thaw marker (documents/freeze-io.sh).

Runs on the host as ``python3 -c "$THAW_SIGNAL_PY" URL DEADLINE_MS INTERVAL_MS [FROM_MS]``:
Python 3.9 or later, standard library only (tools/documents.py renders this file into freeze-io).

Connects at once, then from ``FROM_MS`` (epoch milliseconds, the array's freeze instant; default
now) GETs the presigned ``URL`` every ``INTERVAL_MS`` milliseconds over that one kept-alive
HTTP(S) connection until it answers 200 with the marker (a body with ``"thaw": true``): exit 0.
Started before the instant, its start and its connection cost nothing in the freeze window. Exit 1
once ``DEADLINE_MS`` (epoch milliseconds) is less than 100 ms away, so the watchdog's own
deadline thaws. Anything else (wrong arguments): exit 2, and the script polls with curl instead.

One connection, not a process and a TLS handshake a look: a look then costs one request, so the
marker is seen within an interval of being written. A refusal (403 or 404 until the marker
exists, 503 when S3 throttles) or a broken connection is only the next look; a look never
outlasts the deadline.
"""

from __future__ import annotations

import http.client
import re
import sys
import time
from urllib.parse import urlsplit

MARKER = re.compile(rb'"thaw"\s*:\s*true')
MARGIN_MS = 100
"""The poller gives up this long before the deadline: the watchdog then thaws on time."""
LOOK_TIMEOUT_MS = 1000


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


def look(conn: http.client.HTTPConnection, path: str) -> bool:
    """One GET; True when it answered the marker. The body is always read, so the connection
    can carry the next look."""
    conn.request("GET", path)
    answer = conn.getresponse()
    body = answer.read()
    return answer.status == 200 and MARKER.search(body) is not None


def wait(url: str, deadline_ms: int, interval_ms: int, from_ms: int = 0) -> bool:
    """From ``from_ms`` on, poll until the marker (True) or the deadline's margin (False)."""
    path = target(url)
    conn: http.client.HTTPConnection | None = None
    ahead = min(from_ms, deadline_ms - MARGIN_MS) - now_ms()
    if ahead > 0:
        try:  # connected before the instant: the first look is one request
            conn = connection(url, min(LOOK_TIMEOUT_MS, ahead) / 1000)
            conn.connect()
        except OSError:
            conn = None  # the first look connects
        time.sleep(max(0, min(from_ms, deadline_ms - MARGIN_MS) - now_ms()) / 1000)
    while True:
        started = now_ms()
        left = deadline_ms - MARGIN_MS - started
        if left <= 0:
            return False
        try:
            if conn is None:
                conn = connection(url, min(LOOK_TIMEOUT_MS, left) / 1000)
            conn.timeout = min(LOOK_TIMEOUT_MS, left) / 1000
            if conn.sock is not None:
                conn.sock.settimeout(conn.timeout)
            if look(conn, path):
                return True
        except (OSError, http.client.HTTPException):
            if conn is not None:
                conn.close()
            conn = None  # the next look connects again
        pause = interval_ms - (now_ms() - started)
        if pause > 0:
            time.sleep(min(pause, max(0, deadline_ms - MARGIN_MS - now_ms())) / 1000)


def main(argv: list[str]) -> int:
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
    return 0 if wait(url, deadline_ms, interval_ms, from_ms) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
