"""NVMe reservations on the controller's EBS devices (lib/fencing.sh): the controller's key for
this boot, and the keys registered on a volume, read from ``nvme resv-report -o json``.

Runs on the node as ``python3 -c "$RESERVATIONS_PY" <command> ...``: Python 3.9 or later,
standard library only (tools/documents.py renders this file into the documents that include
lib/fencing.sh).

* ``key BOOT_ID``: the controller's reservation key for this boot, in hex (``0x...``): 52 bits of
  SHA-256 over the kernel's boot id, never 0 (a zero key means "every other registrant" to
  Preempt under the all-registrants types). A new boot is a new key, so a controller fenced on
  an earlier boot never writes again under the key it was fenced by. 52 bits, not 64: a key
  printed as a JSON number then reads back exactly in any JSON reader (IEEE doubles hold 53).
* ``keys``: the resv-report JSON on stdin; prints the reservation type, then each registered
  key in hex, one per line. nvme-cli 2.x names the registrants ``regctls`` (``regctlext`` in
  some versions); either is read.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

KEY_BITS = 52


def key(boot_id: str) -> str:
    digest = hashlib.sha256(b"vsa-reservation-key:" + boot_id.strip().encode()).digest()
    value = int.from_bytes(digest, "big") >> (256 - KEY_BITS)
    return f"{value or 1:#x}"


def registered(report: dict[str, Any]) -> tuple[int, list[str]]:
    """The reservation type (0: none) and every registrant's key, in hex."""
    entries = report.get("regctls", report.get("regctlext", []))
    return int(report.get("rtype", 0)), [f"{int(entry['rkey']):#x}" for entry in entries]


def main(argv: list[str]) -> int:
    if argv[:1] == ["key"] and len(argv) == 2:
        print(key(argv[1]))
        return 0
    if argv == ["keys"]:
        try:
            report = json.load(sys.stdin)
            rtype, keys = registered(report)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            print(f"not a resv-report JSON: {error}", file=sys.stderr)
            return 1
        print(rtype)
        for registrant in keys:
            print(registrant)
        return 0
    print("usage: reservations.py key BOOT_ID | keys < resv-report.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
