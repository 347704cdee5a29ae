"""Volume ownership and fenced handover: which controller serves each volume's IO, and how that
moves without a stale write. Pure.

With fencing (``docs/dataplane.md``, "Fencing"), each volume has one **owner**: a controller
slot. On every controller the volume's namespace sits in the owner's ANA group (slot + 2);
a controller's port serves its own group *optimized* and every other group *inaccessible*. A
host therefore sends a volume's IO through its owner only, and while the owner is lost it
queues that IO instead of resending it through another controller. Spreading the owners over
the serving controllers keeps the array as a whole active/active.

Ownership moves in two ways, and neither may leave two controllers serving a volume, nor let a
controller that may still hold writes keep its registration once another serves the volume:

* **from a lost controller** (a failover): every survivor that takes a volume first preempts
  and aborts the lost controller's reservation key on every volume, confirms it gone, and only
  then serves its group (configure-target's ``FenceKeys``); the fenced controller never
  registers again on that boot.
* **from a live controller** (a rebalance after a scale-out, a planned drain): the giver runs
  first with the new owners (its groups for those volumes become inaccessible: the host queues
  their IO), and the takers run only once every giver has succeeded. A giver that cannot be run
  is treated as lost: it is fenced like one.

``owners`` keeps each volume where it is while its owner serves and the split stays even, and
moves as few volumes as an even split allows; ``handover`` orders the configure-target runs.
"""

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from vsa_core.errors import FencingError

RESERVATIONS = "reservations"
"""The spec's ``fencing`` that gives each volume an owner."""

ANA_GROUP_OFFSET = 2
"""A slot's ANA group id (nvmet's group 1 is every port's default group)."""


def ana_group(slot: int) -> int:
    return slot + ANA_GROUP_OFFSET


def _weight(volume_id: str, slot: int) -> int:
    """Rendezvous weight of ``slot`` for ``volume_id``: stable across processes and releases."""
    return int.from_bytes(hashlib.sha256(f"vsa-owner:{volume_id}:{slot}".encode()).digest()[:8], "big")


def _quotas(count: int, slots: Sequence[int]) -> dict[int, int]:
    """How many volumes each slot owns: an even split, the remainder to the lowest slots."""
    base, extra = divmod(count, len(slots))
    return {slot: base + (1 if i < extra else 0) for i, slot in enumerate(sorted(slots))}


def owners(
    volumes: Sequence[str], slots: Collection[int], previous: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Each volume's owner slot among ``slots`` (the serving controllers'): every slot owns its
    quota (an even split, loads differ by at most one), a volume keeps its ``previous`` owner
    while that slot still serves and is within its quota (those it ranks highest stay), and the
    rest go to the slots with room in rendezvous order. Deterministic; no volume, no owner."""
    if not volumes:
        return {}
    if not slots:
        raise FencingError("no serving controller to own the array's volumes")
    quota = _quotas(len(volumes), list(slots))
    chosen: dict[str, int] = {}
    kept: dict[int, list[str]] = {slot: [] for slot in quota}
    for volume in volumes:
        owner = (previous or {}).get(volume)
        if owner is not None and owner in kept:
            kept[owner].append(volume)
    for slot, held in kept.items():
        for volume in sorted(held, key=lambda v: _weight(v, slot), reverse=True)[: quota[slot]]:
            chosen[volume] = slot
    load = {slot: sum(1 for s in chosen.values() if s == slot) for slot in quota}
    pairs = sorted(((_weight(v, s), v, s) for v in volumes if v not in chosen for s in quota), reverse=True)
    for _, volume, slot in pairs:
        if volume not in chosen and load[slot] < quota[slot]:
            chosen[volume] = slot
            load[slot] += 1
    return {volume: chosen[volume] for volume in volumes}


@dataclass(frozen=True)
class Move:
    volume_id: str
    giver: int | None  # None: the volume had no owner (new to the array)
    taker: int


def moves(before: Mapping[str, int], after: Mapping[str, int]) -> list[Move]:
    """The volumes whose owner changes, in ``after``'s order."""
    return [Move(v, before.get(v), s) for v, s in after.items() if before.get(v) != s]


@dataclass(frozen=True)
class Run:
    """One configure-target run of a handover: on ``slot``, with the new owners and these keys
    to fence first."""

    slot: int
    fence_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Handover:
    """The configure-target runs that move ownership, in two waves: every run of ``first`` must
    succeed before any of ``then`` starts (the live givers release before the takers serve; with
    no live giver, one wave). Every serving controller is in exactly one wave, so each ends with
    the same owners."""

    first: tuple[Run, ...]
    then: tuple[Run, ...]


def handover(
    before: Mapping[str, int],
    after: Mapping[str, int],
    serving: Collection[int],
    lost_keys: Mapping[int, str],
) -> Handover:
    """Order the runs that take the array from ``before``'s owners to ``after``'s. ``serving``:
    the slots that run configure-target (the lost are not among them); ``lost_keys``: each lost
    slot's reservation key (its last configure-target report's). A taker of a lost slot's volume
    fences that slot's key; a volume whose lost owner's key is unknown cannot move safely."""
    taken = moves(before, after)
    unknown = sorted(
        {
            m.giver
            for m in taken
            if m.giver is not None and m.giver not in serving and m.giver not in lost_keys
        }
    )
    if unknown:
        raise FencingError(
            f"slot(s) {', '.join(map(str, unknown))} own volumes, serve no more and have no known "
            "reservation key: their volumes cannot move until they are fenced (their last "
            "configure-target report names the key)"
        )
    givers = {m.giver for m in taken if m.giver is not None and m.giver in serving}
    takers = {m.taker for m in taken}
    if givers & takers:
        raise FencingError(
            f"slot(s) {', '.join(map(str, sorted(givers & takers)))} would give and take volumes "
            "in one handover: split it in two (owners() never asks for one)"
        )
    fences: dict[int, set[str]] = {}
    for m in taken:
        if m.giver is not None and m.giver in lost_keys:
            fences.setdefault(m.taker, set()).add(lost_keys[m.giver])
    runs = {slot: Run(slot, tuple(sorted(fences.get(slot, ())))) for slot in sorted(serving)}
    if not givers:  # nothing to release first (a failover, new volumes): one wave
        return Handover(first=tuple(runs.values()), then=())
    first = tuple(runs[s] for s in sorted(serving) if s in givers or s not in takers)
    then = tuple(runs[s] for s in sorted(serving) if s in takers and s not in givers)
    return Handover(first=first, then=then)


def owners_parameter(volumes: Sequence[str], owned: Mapping[str, int]) -> str:
    """configure-target's ``Owners``: each volume's owner slot, in ``volumes``' order (its
    ``Volumes``)."""
    missing = [v for v in volumes if v not in owned]
    if missing:
        raise FencingError(f"no owner for {', '.join(missing)}")
    return ",".join(str(owned[v]) for v in volumes)
