"""Controllers of an array: slots, device names, what bootstrap and drain act on. Pure.

A controller holds a **slot** 0..15 for as long as it is in the array (the registry item
``pk=ARRAY#<id>, sk=SLOT#<nn>``, leased by a conditional write in the BootstrapController
workflow and released by DrainController). The slot gives the controller its NVMe controller-id
range (``vsa_core.nvme.cntlid_range``): two controllers exporting the same subsystem never hand
a host the same cntlid, which a host refuses ("Duplicate cntlid … rejecting").

Slot states: ``bootstrapping`` (leased, not yet serving) → ``serving`` → ``draining``; the item
is deleted when the controller has left.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vsa_core.arrays import keys
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT, ArraySpec
from vsa_core.controllers.batches import instance_batches
from vsa_core.errors import ConflictError
from vsa_core.nvme import host_nqn

# EC2 device names for data volumes on Linux (EC2 User Guide, "Device names on Linux
# instances"): /dev/sd[f-z] first, then /dev/sd[f-z][a-z] style names are not accepted by
# every AMI, so continue with /dev/xvd[b-c][a-z] as the guide recommends. On Nitro instances the
# name is only a hint: the volume appears as /dev/nvmeXn1 and is found by its serial (volume id).
_FIRST = [f"/dev/sd{c}" for c in "fghijklmnopqrstuvwxyz"]
_MORE = [f"/dev/xvd{a}{b}" for a in "bc" for b in "abcdefghijklmnopqrstuvwxyz"]
DEVICE_NAMES: tuple[str, ...] = tuple(_FIRST + _MORE)


def choose_slot(leased: Mapping[int, str], instance_id: str) -> int:
    """The slot for ``instance_id``: the one it already holds (a retried bootstrap), else the
    lowest free one. ``leased`` maps slot → instance id."""
    for slot, holder in leased.items():
        if holder == instance_id:
            return slot
    for slot in range(MULTI_ATTACH_LIMIT):
        if slot not in leased:
            return slot
    raise ConflictError(
        f"all {MULTI_ATTACH_LIMIT} controller slots are leased ({', '.join(sorted(leased.values()))}): "
        "an array has at most 16 controllers (io2 Multi-Attach); a slot frees when its controller drains"
    )


def devices_for(volume_ids: Sequence[str], in_use: Iterable[str]) -> dict[str, str]:
    """A free device name for each volume (``in_use``: names already taken on the instance)."""
    free = [d for d in DEVICE_NAMES if d not in set(in_use)]
    if len(free) < len(volume_ids):
        raise ConflictError(
            f"{len(volume_ids)} volumes to attach but only {len(free)} free device names on the controller"
        )
    return dict(zip(volume_ids, free, strict=False))


@dataclass(frozen=True)
class Paths:
    """What the host documents take: the array's subsystems and hosts, comma-separated."""

    volumes: str
    hosts: tuple[str, ...]
    host_nqns: str
    allow_any_host: str
    host_targets: tuple[tuple[str, str], ...]
    """(instance id, host NQN) of every host: connect-path runs per host with its own NQN."""
    host_batches: tuple[tuple[str, ...], ...]
    """The hosts in batches of at most 50: a document for every host (disconnect-path) is one
    SendCommand per batch (``vsa_core.controllers.batches``)."""
    authentication: str = keys.NONE
    """The spec's: with dh-hmac-chap each host reads its keys from its own secret."""
    array_id: str = ""

    def keys_secret(self, instance_id: str) -> str:
        """The secret a node reads its keys from (``none`` without authentication)."""
        if self.authentication != keys.DH_HMAC_CHAP:
            return "none"
        return keys.node_secret_name(self.array_id, instance_id)

    def as_dict(self) -> dict[str, Any]:
        return {
            "volumes": self.volumes,
            "hosts": list(self.hosts),
            "hostNqns": self.host_nqns,
            "allowAnyHost": self.allow_any_host,
            "authentication": self.authentication,
            "hostTargets": [
                {"instanceId": i, "hostNqn": n, "keysSecretId": self.keys_secret(i)}
                for i, n in self.host_targets
            ],
            "hostBatches": [list(batch) for batch in self.host_batches],
        }


def paths(spec: ArraySpec, volume_ids: Sequence[str]) -> Paths:
    return Paths(
        volumes=",".join(volume_ids),
        hosts=tuple(h.instance_id for h in spec.hosts),
        host_nqns=",".join(host_nqn(h) for h in spec.hosts),
        allow_any_host="true" if spec.allow_any_host else "false",
        host_targets=tuple((h.instance_id, host_nqn(h)) for h in spec.hosts),
        host_batches=instance_batches([h.instance_id for h in spec.hosts]),
        authentication=spec.authentication,
        array_id=spec.array_id,
    )


def last_serving(slots: Mapping[int, Mapping[str, str]], instance_id: str) -> bool:
    """Whether ``instance_id`` is the only serving controller left (``slots``: slot → item
    with ``instanceId`` and ``state``)."""
    others = [s for s in slots.values() if s.get("state") == "serving" and s.get("instanceId") != instance_id]
    return not others


def leavers(slots: Mapping[int, Mapping[str, str]], in_service: Iterable[str], count: int) -> list[str]:
    """The ``count`` controllers a scale-in removes, in the order ``leaver`` picks them (each the
    one it would pick after the ones before it left); fewer when fewer are in service."""
    left, chosen = list(in_service), list[str]()
    while len(chosen) < count and (one := leaver(slots, left)) is not None:
        chosen.append(one)
        left.remove(one)
    return chosen


def leaver(slots: Mapping[int, Mapping[str, str]], in_service: Iterable[str]) -> str | None:
    """The controller a scale-in removes, among those in service in the group: the serving one
    in the highest slot, so the slots in use stay low and a new controller gets a slot back.
    A controller in service without a serving slot (the lifecycle workflows turned off) goes
    only after those, the highest instance id first. None when no controller is in service."""
    serving_slot = {s["instanceId"]: slot for slot, s in slots.items() if s.get("state") == "serving"}
    return max(in_service, key=lambda i: (i in serving_slot, serving_slot.get(i, -1), i), default=None)
