"""The freeze window's signals (pure): where a backup's markers live, what the thaw marker says,
how long the hosts' presigned URLs must last, and how soon the Snapshot step looks again.

Each host PUTs its freeze-io report to ``hosts/<instance>`` the moment it froze (or failed to),
and its watchdog polls ``thaw`` from then on, thawing the moment the Snapshot step writes it (just
after ``CreateSnapshots`` returned: the snapshots' point in time is fixed). The Snapshot step
lists the hosts' markers, so it snapshots as soon as the last host has frozen, without a fixed
interval between looks. Run Command's own status stays the fallback for a host whose signals do
not reach S3, as thaw-io and the watchdog's deadline stay the thaw's.
"""

import base64
import json
import math
from collections.abc import Iterable

PREFIX = "signals"
SSM_CHECK_SECONDS = 1.0
"""While markers are missing, Run Command's status is read at most once a second (its
GetCommandInvocation is the fallback, and it has a rate limit); the markers, every look."""
DELIVERY_SECONDS = 60
"""freeze-io's SendCommand timeout: the latest a host may start it, arming its watchdog."""
URL_MARGIN_SECONDS = 60
GETS_PER_SECOND = 5000
"""What all of a backup's hosts may GET the one thaw marker at, together: under S3's 5,500 GET
requests a second per partitioned prefix, with a margin."""
POLL_MS_FLOOR = 50
"""No host polls more often than this. Set for the local cloud, not AWS: there every poll is
served by the one process that also runs the workflow, and 4 hosts polling every 10 or 25 ms
made the whole window longer (docs/backups.md, "Measured: the freeze window"). On AWS, where S3
serves the polls, a 10 ms floor would see the marker about 20 ms sooner (on a sandbox host alone:
12-21 ms after it was written, against 19-63 ms at 50 ms)."""
POLL_MS_CEILING = 1000
FREEZE_LEAD_SECONDS = 2.0
"""How long after its sends the hosts freeze, all at one instant (freeze-io's ``FreezeAt``; the
deployment's ``VSA_FREEZE_LEAD_MILLISECONDS`` overrides it, 0 for none): so
that no host holds its writes while another's command is still on its way. Long enough for Run
Command to deliver to an online agent (on AWS: usually well under a second; the local cloud's
realistic profile delivers after 1.5 s); a host whose command comes after the instant freezes at
once, the window it would have had without one. It lengthens the backup by that much, not any
host's pause. A whole number of seconds: the Snapshot step, invoked just after the sends, then
waits whole seconds that end just after the instant (``next_look``)."""
LOOK_SLACK_SECONDS = 0.25
"""Before the hosts' instant, the Snapshot step's wait (whole seconds: a Wait state's) may end
up to this long after it rather than most of a second before: a look before the instant only
finds the hosts still waiting, and each look costs the freeze window's shared resources (on
the local cloud, the one process that also serves the hosts' reports and polls)."""


def backup_prefix(array_id: str, backup_id: str) -> str:
    return f"{PREFIX}/{array_id}/{backup_id}/"


def thaw_key(array_id: str, backup_id: str) -> str:
    return backup_prefix(array_id, backup_id) + "thaw"


def host_key(array_id: str, backup_id: str, instance_id: str) -> str:
    return backup_prefix(array_id, backup_id) + f"hosts/{instance_id}"


def reported_hosts(keys: Iterable[str], array_id: str, backup_id: str) -> set[str]:
    """The instances whose frozen report is among ``keys`` (a listing of the backup's prefix)."""
    hosts = backup_prefix(array_id, backup_id) + "hosts/"
    return {
        key.removeprefix(hosts)
        for key in keys
        if key.startswith(hosts) and "/" not in key.removeprefix(hosts)
    }


def thaw_marker(backup_id: str, requested_at: float, returned_at: float) -> bytes:
    """The thaw marker: freeze-io's watchdog thaws when a body has ``"thaw": true``."""
    body = {
        "thaw": True,
        "backupId": backup_id,
        "snapshotRequestedAt": requested_at,
        "snapshotReturnedAt": returned_at,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def url_seconds(freeze_timeout: int) -> int:
    """How long the hosts' URLs must stay valid: the latest a host can start freeze-io, its
    watchdog's window, and a margin. (Signed with a Lambda's temporary credentials, a URL also
    ends with them: a host whose URL expired early falls back on thaw-io.)"""
    return DELIVERY_SECONDS + freeze_timeout + URL_MARGIN_SECONDS


def as_parameter(url: str) -> str:
    """A URL as freeze-io takes it: base64url without padding (SSM's allowedPattern admits no
    '&', '?' or '=', which every presigned URL has)."""
    return base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def freeze_at(sent_at: float, lead: float = FREEZE_LEAD_SECONDS) -> int | None:
    """The instant every host freezes at (freeze-io's ``FreezeAt``, epoch milliseconds) for
    sends that began at ``sent_at`` (epoch seconds); None with no lead (each host at once)."""
    return math.ceil((sent_at + lead) * 1000) if lead > 0 else None


def next_look(signals_on: bool, finished_without_signal: bool, until_freeze: float = 0.0) -> int:
    """Seconds before the Snapshot step looks again while a host is still freezing: the whole
    seconds left before the hosts' common instant (``until_freeze``), rounded up when that ends
    at most ``LOOK_SLACK_SECONDS`` after it, then at once while the hosts' markers are what it
    waits on, a second when it has only Run Command's status to go by (no signals, or a host
    finished without its marker arriving)."""
    if until_freeze + LOOK_SLACK_SECONDS >= 1:
        return int(until_freeze + LOOK_SLACK_SECONDS)
    return 0 if signals_on and not finished_without_signal else 1


def poll_milliseconds(hosts: int) -> int:
    """How often each host's watchdog polls the thaw marker: as often as the hosts together may
    (``GETS_PER_SECOND``), at most every ``POLL_MS_FLOOR`` ms, at least once a second. Up to 250
    hosts: 50 ms; 256 hosts: 52 ms; 1,000 hosts: 200 ms (5,000 GETs a second)."""
    wanted = math.ceil(max(1, hosts) * 1000 / GETS_PER_SECOND)
    return min(POLL_MS_CEILING, max(POLL_MS_FLOOR, wanted))
