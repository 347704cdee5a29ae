"""The DH-HMAC-CHAP keys of a secret's JSON, for lib/dhchap.sh; never shows a key in an error.

Runs on the node with the secret's JSON on stdin (never in argv), Python 3.9 or later, standard
library only (tools/documents.py renders this file into the documents that include
lib/dhchap.sh):

``python3 -c "$DHCHAP_SECRET_PY" keys SOURCE NAME...``
    prints ``<NAME> <key>`` for each NAME (``a/b``: the entry b inside a), one a line; exits 1
    naming the secret SOURCE and every NAME missing or not a DHHC-1 key, showing no key.
``python3 -c "$DHCHAP_SECRET_PY" has NAME``
    prints ``yes`` if the secret has an entry NAME, whatever it holds, else ``no`` (also when the
    secret is not JSON: ``keys`` then fails naming why).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

# DHHC-1:<hash id 00-03>:<base64 of the key (32, 48 or 64 bytes) and its CRC-32>:
KEY = re.compile(r"DHHC-1:0[0-3]:[A-Za-z0-9+/]{44,}={0,2}:")


def lookup(secret: Any, name: str) -> Any:
    """The entry ``name`` of ``secret`` (``a/b``: b inside a); None when there is none."""
    where = secret
    for part in name.split("/"):
        where = where.get(part) if isinstance(where, dict) else None
    return where


def keys(secret: Any, source: str, wanted: list[str]) -> dict[str, str]:
    """Each of ``wanted`` -> its key in ``secret``; SystemExit naming (never showing) what is wrong."""
    if not isinstance(secret, dict):
        raise SystemExit(f"the secret {source} is not a JSON object")
    missing, malformed, found = [], [], {}
    for name in wanted:
        where = lookup(secret, name)
        if where is None or where == "":
            missing.append(name)
        elif not isinstance(where, str) or not KEY.fullmatch(where):
            malformed.append(name)
        else:
            found[name] = where
    errors = []
    if missing:
        errors.append("no key for " + ", ".join(missing))
    if malformed:
        errors.append(
            "not a DHHC-1 key (DHHC-1:<hash>:<base64 of key and CRC-32>:) for " + ", ".join(malformed)
        )
    if errors:
        raise SystemExit(f"the secret {source}: " + "; ".join(errors))
    return found


def parse(text: str, source: str) -> Any:
    """The secret's JSON; SystemExit (without the text) when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        raise SystemExit(f"the secret {source} is not JSON") from None


def has(text: str, name: str) -> bool:
    """Whether the secret ``text`` has an entry ``name``; False when it is not JSON."""
    try:
        secret = json.loads(text)
    except ValueError:
        return False
    return lookup(secret, name) is not None


def main(argv: list[str]) -> int:
    command, *arguments = argv
    text = sys.stdin.read()
    if command == "has":
        print("yes" if has(text, arguments[0]) else "no")
        return 0
    if command == "keys":
        source, *wanted = arguments
        found = keys(parse(text, source), source, wanted)
        print("\n".join(f"{name} {key}" for name, key in found.items()))
        return 0
    raise SystemExit(f"unknown command {command!r}: keys or has")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
