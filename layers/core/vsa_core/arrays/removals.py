"""Volumes leaving an array's spec: whether a host still has one mounted (then an apply removing
it is refused unless forced), and which of them the array may delete. Pure.

What a host has mounted comes from its own last ``report-paths`` report (``mounts`` per
subsystem: device, mountpoint, file system type, read from the host's mount table; ``null``
when the host could not read it). A host whose report is missing, older than the health
check's freshness bound, or without ``mounts`` cannot tell: the removal is refused as well,
naming it, since a disconnect under a mounted file system fails its IO.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from vsa_core.arrays.dataplane import Report, subsystems_of


@dataclass(frozen=True)
class Removed:
    """A volume an apply removes: its id and how the operator knows it (a name or the id)."""

    volume_id: str
    label: str
    owned: bool = False


@dataclass(frozen=True)
class Mount:
    host: str
    volume: Removed
    mountpoint: str
    device: str


@dataclass(frozen=True)
class Unknown:
    host: str
    reason: str


def removed_volumes(
    before_existing: tuple[str, ...],
    after_existing: tuple[str, ...],
    before_owned: tuple[str, ...],
    after_owned: tuple[str, ...],
    owned_ids: Mapping[str, str],
) -> list[Removed]:
    """The volumes an apply removes: existing ids no longer listed, and owned volumes (by name)
    no longer listed that exist (``owned_ids``: name → volume id)."""
    gone = [Removed(v, v) for v in before_existing if v not in after_existing]
    gone += [
        Removed(owned_ids[name], f"{name} ({owned_ids[name]})", owned=True)
        for name in before_owned
        if name not in after_owned and name in owned_ids
    ]
    return gone


def mounts_of_removed(
    array_id: str,
    removed: list[Removed],
    reports: Mapping[str, Report | None],
    *,
    now: datetime,
    max_age: timedelta,
) -> tuple[list[Mount], list[Unknown]]:
    """What each host (``reports``: instance id → its last report-paths report) has mounted
    from a removed volume, and the hosts that cannot tell (no fresh report with ``mounts``)."""
    mounts: list[Mount] = []
    unknown: list[Unknown] = []
    if not removed:
        return mounts, unknown
    for host, report in sorted(reports.items()):
        if report is None:
            unknown.append(Unknown(host, "it has sent no report-paths report of the array in the last hour"))
            continue
        at = datetime.fromisoformat(report.at) if report.at else None
        if at is None or now - at > max_age:
            reason = f"its last report-paths report ({report.at}) is older than {max_age}"
            unknown.append(Unknown(host, reason))
            continue
        subsystems = subsystems_of(report, array_id)
        for volume in removed:
            subsystem = subsystems.get(volume.volume_id)
            if subsystem is None:
                continue  # the report does not list it: no path, nothing mounted from it
            listed = subsystem.get("mounts")
            if not isinstance(listed, list):
                reason = f"its report ({report.at}) does not say what is mounted from {volume.label}"
                unknown.append(Unknown(host, reason))
                continue
            mounts += [
                Mount(host, volume, str(m.get("mountpoint")), str(m.get("device")))
                for m in listed
                if isinstance(m, Mapping)
            ]
    return mounts, unknown


FORCE_HINT = (
    "apply with force (PUT /arrays/{id}?force=true, vsactl apply --force) to remove it anyway: "
    "the hosts' disconnect then fails every IO on that mount"
)


def refusal(mounts: list[Mount], unknown: list[Unknown]) -> str | None:
    """The 409's message when a removal must wait (None: nothing mounted, every host told)."""
    if not mounts and not unknown:
        return None
    parts = [
        f"host {m.host} has volume {m.volume.label} mounted at {m.mountpoint} ({m.device})" for m in mounts
    ]
    parts += [
        f"host {u.host} cannot tell whether it has a removed volume mounted: {u.reason}" for u in unknown
    ]
    fix = "unmount it there first" if mounts else "run the health check (report-paths) on it first"
    return (
        "refusing to remove a volume a host may still use: "
        + "; ".join(parts)
        + f". Nothing was changed: {fix}, or {FORCE_HINT}"
    )
