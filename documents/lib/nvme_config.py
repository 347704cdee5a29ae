"""connect-path's failover settings and keys, merged into nvme-cli's JSON config.

Runs on the node as::

    printf '%s\\n%s\\n' "$HOST_KEY" "$CTRL_KEY" | python3 -c "$NVME_CONFIG_PY" PATH HOSTNQN HOSTID \\
        TRADDR TRSVCID KEEP_ALIVE_TMO CTRL_LOSS_TMO RECONNECT_DELAY FAST_IO_FAIL_TMO NQN...

Python 3.9 or later, standard library only (tools/documents.py renders this file into
connect-path). The DH-HMAC-CHAP keys come on stdin, never in argv (``/proc/<pid>/cmdline`` is
world-readable): the host key, then the controller key; empty lines for none.

The config is libnvme's ``hosts -> subsystems -> ports``. This host NQN's entry gets, for each
NQN, the port ``tcp TRADDR:TRSVCID`` with ``keep_alive_tmo``, ``ctrl_loss_tmo``,
``reconnect_delay``, ``fast_io_fail_tmo`` (removed when negative: off) and the keys as
``dhchap_key`` / ``dhchap_ctrl_key`` (removed without keys). Every other host, subsystem, port
and key is kept. A file that holds any key is written root-only (0600), else 0644.

Runs on one host overlap (a connect-path per controller, sent side by side), so the
read-modify-write holds an exclusive lock on ``PATH.lock`` and writes a temporary file of its own
that is renamed over PATH: a reader never sees half a file and no run loses another's ports.
A warning (a host entry's own ``dhchap_key``, which nvme-cli uses before the port's) is printed
on stdout; an error exits non-zero with the reason on stderr.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Port:
    """What connect-path asks for one address of the array, on every one of its subsystems."""

    hostnqn: str
    hostid: str  # empty: the host entry gets no hostid
    traddr: str
    trsvcid: str
    keep_alive_tmo: int
    ctrl_loss_tmo: int
    reconnect_delay: int
    fast_io_fail_tmo: int  # negative: off
    nqns: tuple[str, ...]
    host_key: str = ""  # empty: no authentication
    ctrl_key: str = ""

    @classmethod
    def from_command(cls, argv: list[str], keys: str) -> Port:
        """From the command's arguments (after the program) and its stdin (the two keys)."""
        hostnqn, hostid, traddr, trsvcid, kato, loss, delay, failfast, *nqns = argv
        host_key, ctrl_key = ([*keys.split("\n"), "", ""])[:2]
        return cls(
            hostnqn=hostnqn,
            hostid=hostid,
            traddr=traddr,
            trsvcid=trsvcid,
            keep_alive_tmo=int(kato),
            ctrl_loss_tmo=int(loss),
            reconnect_delay=int(delay),
            fast_io_fail_tmo=int(failfast),
            nqns=tuple(nqns),
            host_key=host_key,
            ctrl_key=ctrl_key,
        )


def _entry(entries: list[Any], match: dict[str, str], new: dict[str, Any]) -> Any:
    """The first entry of ``entries`` whose keys hold ``match``, else ``new`` appended."""
    found = next((e for e in entries if all(e.get(k) == v for k, v in match.items())), None)
    if found is None:
        entries.append(new)
        return new
    return found


def merge(hosts: list[Any], port: Port) -> list[str]:
    """Writes ``port`` into ``hosts`` (the parsed config) in place; returns the warnings."""
    host_entry = {
        "hostnqn": port.hostnqn,
        **({"hostid": port.hostid} if port.hostid else {}),
        "subsystems": [],
    }
    host = _entry(hosts, {"hostnqn": port.hostnqn}, host_entry)
    for nqn in port.nqns:
        subsystem = _entry(host.setdefault("subsystems", []), {"nqn": nqn}, {"nqn": nqn, "ports": []})
        address = {"transport": "tcp", "traddr": port.traddr, "trsvcid": port.trsvcid}
        entry = _entry(subsystem.setdefault("ports", []), address, dict(address))
        entry.update(
            keep_alive_tmo=port.keep_alive_tmo,
            ctrl_loss_tmo=port.ctrl_loss_tmo,
            reconnect_delay=port.reconnect_delay,
        )
        if port.fast_io_fail_tmo >= 0:
            entry["fast_io_fail_tmo"] = port.fast_io_fail_tmo
        else:
            entry.pop("fast_io_fail_tmo", None)
        if port.host_key:
            entry.update(dhchap_key=port.host_key, dhchap_ctrl_key=port.ctrl_key)
        else:
            entry.pop("dhchap_key", None)
            entry.pop("dhchap_ctrl_key", None)
    if port.host_key and host.get("dhchap_key"):
        return [
            f"the host entry of {port.hostnqn} has its own dhchap_key,"
            " which nvme-cli uses before the port key"
        ]
    return []


def keyed(hosts: list[Any]) -> bool:
    """Whether the config holds a key anywhere (a host's, or a port's host or controller key)."""
    return any(
        "dhchap_key" in host
        or any(
            "dhchap_key" in port or "dhchap_ctrl_key" in port
            for subsystem in host.get("subsystems") or []
            for port in subsystem.get("ports") or []
        )
        for host in hosts
    )


def parse(path: str, text: str) -> list[Any]:
    """The hosts of the config ``text`` read from ``path`` (none for an empty file)."""
    text = text.strip()
    hosts = json.loads(text) if text else []
    if not isinstance(hosts, list):
        raise SystemExit(f"{path} is not a list of hosts")
    return hosts


def update(path: str, port: Port) -> list[str]:
    """Merges ``port`` into the config file ``path`` under its lock; returns the warnings."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as current:
                text = current.read()
        except FileNotFoundError:
            text = ""
        hosts = parse(path, text)
        warnings = merge(hosts, port)
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=".config.", suffix=".json")
        with os.fdopen(fd, "w") as out:
            json.dump(hosts, out, indent=2)
            out.write("\n")
        os.chmod(temporary, 0o600 if keyed(hosts) else 0o644)  # keys: root-only
        os.replace(temporary, path)
    return [f"warning: {path}: {warning}" for warning in warnings]


def main(argv: list[str]) -> int:
    path, *rest = argv
    for warning in update(path, Port.from_command(rest, sys.stdin.read())):
        print(warning)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
