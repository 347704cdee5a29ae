"""Run inside the host guest (python3 nvme_state.py NQN): what its kernel shows of subsystem NQN,
as one JSON object on stdout.

From sysfs: the subsystem (``/sys/class/nvme-subsystem/nvme-subsysN``: iopolicy, serial,
model), its multipath head (``nvmeXnY``: uuid, nguid, wwid), and each controller (a path:
state, address, cntlid, kato) with its hidden per-path disk ``nvmeXcZnY``, that disk's IO
counters (``stat``: reads and writes completed) and its ANA state. From each controller itself, through
nvme-cli's admin commands on ``/dev/nvmeZ``: Identify Controller (serial, subsystem NQN) and
the namespace identification descriptors (uuid, nguid), so identity is read through each path.
"""

import json
import subprocess
import sys
from pathlib import Path


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def nvme_json(*args: str) -> dict:
    done = subprocess.run(["nvme", *args, "-o", "json"], capture_output=True, text=True, check=False)
    try:
        return json.loads(done.stdout) if done.returncode == 0 else {}
    except ValueError:
        return {}


def ns_descs(device: str) -> dict[str, str]:
    """The namespace identification descriptors (nvme-cli 2.3's JSON has none of them)."""
    done = subprocess.run(
        ["nvme", "ns-descs", device, "-n", "1"], capture_output=True, text=True, check=False
    )
    found = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(":")
        if value and key.strip() in ("uuid", "nguid"):
            found[key.strip()] = value.strip()
    return found


def main(nqn: str) -> None:
    found: dict = {"nqn": nqn, "subsystem": None, "heads": [], "paths": []}
    for subsystem in sorted(Path("/sys/class/nvme-subsystem").glob("nvme-subsys*")):
        if read(subsystem / "subsysnqn") != nqn:
            continue
        found["subsystem"] = subsystem.name
        found["iopolicy"] = read(subsystem / "iopolicy")
        found["serial"] = read(subsystem / "serial")
        found["model"] = read(subsystem / "model")
        for head in sorted(subsystem.glob("nvme*n*")):
            if head.name.startswith("nvme") and "c" not in head.name[4:]:
                found["heads"].append(
                    {"name": head.name, **{k: read(head / k) for k in ("uuid", "nguid", "wwid", "size")}}
                )
        for ctrl in sorted(subsystem.glob("nvme[0-9]*")):
            if "n" in ctrl.name[4:]:
                continue
            path = {
                "controller": ctrl.name,
                **{k: read(ctrl / k) for k in ("state", "address", "cntlid", "kato", "transport")},
                "disks": [],
            }
            for disk in sorted(ctrl.glob(f"{ctrl.name.replace('nvme', 'nvme*c')}n*")) or sorted(
                Path("/sys/block").glob(f"nvme*c{ctrl.name[4:]}n*")
            ):
                stat = read(disk / "stat").split()
                path["disks"].append(
                    {
                        "name": disk.name,
                        "reads": int(stat[0]) if stat else 0,
                        "writes": int(stat[4]) if len(stat) > 4 else 0,
                        "uuid": read(disk / "uuid"),
                        "nguid": read(disk / "nguid"),
                        "anaState": read(disk / "ana_state"),
                    }
                )
            ident = nvme_json("id-ctrl", f"/dev/{ctrl.name}") if path["state"] == "live" else {}
            descs = ns_descs(f"/dev/{ctrl.name}") if path["state"] == "live" else {}
            path["identify"] = {
                "serial": str(ident.get("sn", "")).strip(),
                "subnqn": ident.get("subnqn", ""),
                "cntlid": ident.get("cntlid"),
                "uuid": descs.get("uuid", ""),
                "nguid": descs.get("nguid", ""),
            }
            found["paths"].append(path)
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1])
