"""The host's NVMe paths from ``nvme list-subsys -o json``, one line per path (lib/host-paths.sh).

Runs on the node as ``python3 -c "$NVME_PATHS_PY"`` with the JSON on stdin: Python 3.9 or later,
standard library only (tools/documents.py renders this file into the documents that include
lib/host-paths.sh).

nvme-cli 2.x prints an array of hosts::

    [{"HostNQN": ..., "HostID": ..., "Subsystems": [{"Name": "nvme-subsys0", "NQN": ...,
      "IOPolicy": "round-robin", "Paths": [{"Name": "nvme0", "Transport": "tcp",
      "Address": "traddr=10.0.1.5,trsvcid=4420,src_addr=10.0.2.9", "State": "live"}]}]}]

nvme-cli 1.x prints one host object whose "Subsystems" list alternates {Name, NQN} and {Paths}
entries: a path belongs to the last subsystem named before it. Both are read.

Each line holds, separated by \\x1f (empty fields survive a bash ``read``, unlike with a tab):
the subsystem NQN, the controller device, its state, traddr, trsvcid, the host NQN, the
subsystem's IO policy and the subsystem's sysfs name (nvme-subsysN).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

SEPARATOR = "\x1f"


def address_fields(address: str) -> dict[str, str]:
    """``traddr=10.0.1.5,trsvcid=4420`` -> ``{"traddr": "10.0.1.5", "trsvcid": "4420"}``."""
    fields: dict[str, str] = {}
    for item in address.split(","):
        if "=" in item:
            key, value = item.split("=", 1)
            fields[key] = value
    return fields


def paths(listing: Any) -> Iterator[tuple[str, ...]]:
    """The fields of each path in ``listing`` (the parsed JSON), in the order nvme-cli lists them."""
    for host in listing if isinstance(listing, list) else [listing]:
        if not isinstance(host, dict):
            continue
        nqn, policy, name = "", "", ""
        for subsystem in host.get("Subsystems") or []:
            if "NQN" in subsystem:
                nqn, policy, name = subsystem["NQN"], subsystem.get("IOPolicy", ""), subsystem.get("Name", "")
            for path in subsystem.get("Paths") or []:
                address = address_fields(path.get("Address") or "")
                yield (
                    nqn,
                    path.get("Name", ""),
                    path.get("State", ""),
                    address.get("traddr", ""),
                    address.get("trsvcid", ""),
                    host.get("HostNQN", ""),
                    policy,
                    name,
                )


def lines(text: str) -> list[str]:
    """The lines for nvme-cli's JSON ``text`` (nothing for an empty output); ValueError if not JSON."""
    text = text.strip()
    listing = json.loads(text) if text else []
    return [SEPARATOR.join(fields) for fields in paths(listing)]


def main() -> int:
    for line in lines(sys.stdin.read()):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
