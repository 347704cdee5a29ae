"""The rolling replacement of controllers whose launch settings (AMI, instance type) are no
longer what the group launches: ReconcileArray's ``roll`` phase, one controller at a time. Pure.

An apply that changes ``controllers`` (``imageId``, ``instanceType``, or the launch template
the spec names) changes what the group *launches*; the controllers already running keep what
they were launched with. This module says what to do next, from what is observed, so the
phase is resumable from wherever a run stopped:

1. **surge**: one controller more than the array's count (the group's desired capacity + 1;
   its maximum size raised to match when the array is at its maximum, never beyond io2
   Multi-Attach's 16). The new controller launches with the new settings and is bootstrapped
   by the launch hook (attached, exported, every host connected through it) like any other.
2. **wait** until it serves.
3. **retire** the oldest outdated controller: TerminateInstanceInAutoScalingGroup with the
   desired capacity decremented; the terminate hook drains it (every host disconnects its
   paths first) before EC2 terminates it. The count is back to the array's.
4. **wait** until it is gone; then the next outdated controller, from 1.

So the serving count never drops below what it was before the roll (the new one serves before
the old one drains), every host keeps every other path, and at most one controller is in
flight at a time. At 16 controllers there is no room to surge: the oldest outdated one is
drained first, only if the count stays at or above ``minControllers`` meanwhile; otherwise the
roll is refused in words (lower ``minControllers`` or ``maxControllers`` by one).

"Outdated" compares what EC2 runs with what the group's launch template launches: the
instance's AMI and instance type against the template version the group names (``$Default``,
``$Latest`` or a number, resolved). A template change that changes neither (user data, tags)
replaces nothing; a setting the template leaves out is not compared.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT

SURGE_TIMEOUT_SECONDS = 1800
"""How long a surge controller may take to serve: a launch, the launch hook's bootstrap (its
heartbeat-extended hook) and every host's connect; then the roll fails saying so."""
RETIRE_TIMEOUT_SECONDS = 1800
"""How long a retired controller may take to leave: the terminate hook's drain (every host's
disconnect-path) and EC2's termination."""


@dataclass(frozen=True)
class LaunchSettings:
    """What the group launches now (None: the template leaves it out, not compared)."""

    image_id: str | None
    instance_type: str | None


@dataclass(frozen=True)
class Member:
    """A controller of the array: the group's instance with what EC2 says it runs and, when it
    holds a slot, the slot's state (``bootstrapping``, ``serving``, ``draining``)."""

    instance_id: str
    lifecycle_state: str
    """The group's word for it (``InService``, ``Pending:Wait``, ``Terminating:Wait``, …)."""
    image_id: str
    instance_type: str
    slot: int | None = None
    slot_state: str | None = None
    launched_at: str = ""
    """EC2's LaunchTime (ISO 8601): the oldest outdated controller leaves first."""

    @property
    def serving(self) -> bool:
        return self.lifecycle_state == "InService" and self.slot_state == "serving"

    @property
    def leaving(self) -> bool:
        return self.lifecycle_state.startswith("Terminat") or self.slot_state == "draining"

    @property
    def in_flight(self) -> bool:
        """Launching, bootstrapping or draining: the roll waits until it has settled."""
        return (
            self.leaving or self.lifecycle_state.startswith("Pending") or self.slot_state == "bootstrapping"
        )


@dataclass(frozen=True)
class Group:
    target: int
    """The array's controller count (ScaleArray's, held to the spec's bounds): where the roll
    leaves the group."""
    desired: int
    """The group's desired capacity now: ``target`` + 1 while the roll's extra controller is up,
    ``target`` - 1 while an outdated one drains first at the Multi-Attach limit."""
    max_size: int
    min_controllers: int
    """The spec's: the serving count the roll never goes below."""


Kind = Literal["done", "surge", "retire", "wait", "blocked"]


@dataclass(frozen=True)
class Step:
    kind: Kind
    reason: str
    instance_id: str | None = None
    """``retire``: the controller to drain and terminate."""
    desired: int | None = None
    """``surge``: the group's desired capacity to set (its maximum size raised to it if below).
    A ``retire`` always decrements the desired capacity (TerminateInstanceInAutoScalingGroup's
    ShouldDecrementDesiredCapacity): the group never launches a replacement of its own while
    the old one still holds its Multi-Attach attachments."""


def outdated(members: Sequence[Member], wanted: LaunchSettings) -> list[Member]:
    """Controllers (not already leaving) that run other settings than the group launches,
    oldest first."""
    stale = [
        m
        for m in members
        if not m.leaving
        and (
            (wanted.image_id is not None and m.image_id != wanted.image_id)
            or (wanted.instance_type is not None and m.instance_type != wanted.instance_type)
        )
    ]
    return sorted(stale, key=lambda m: (m.launched_at, m.instance_id))


def describe(member: Member, wanted: LaunchSettings) -> str:
    """Why a controller is outdated, in words."""
    differs = []
    if wanted.image_id is not None and member.image_id != wanted.image_id:
        differs.append(f"AMI {member.image_id}, the group launches {wanted.image_id}")
    if wanted.instance_type is not None and member.instance_type != wanted.instance_type:
        differs.append(f"instance type {member.instance_type}, the group launches {wanted.instance_type}")
    return f"controller {member.instance_id} runs " + " and ".join(differs)


def next_step(members: Sequence[Member], wanted: LaunchSettings, group: Group) -> Step:
    """What the roll does next (see the module's text)."""
    stale = outdated(members, wanted)
    busy = [m for m in members if m.in_flight]
    serving = sum(1 for m in members if m.serving)
    target, desired = group.target, group.desired
    if busy:  # one at a time: a controller launching or leaving settles first
        states = ", ".join(f"{m.instance_id} {m.slot_state or m.lifecycle_state}" for m in busy)
        return Step("wait", f"waiting for {states}")
    if desired < target:  # an outdated one drained first (at the limit): its replacement
        return Step(
            "surge", f"{serving} of {target} controllers serve: launching the replacement", desired=target
        )
    if desired > target:  # the roll's extra controller is up
        if serving < desired:
            return Step("wait", f"{serving} of {desired} controllers serve: waiting for the new one")
        if stale:
            oldest = stale[0]
            return Step(
                "retire", describe(oldest, wanted) + ": draining it, the new one serves", oldest.instance_id
            )
        first = min((m for m in members if m.serving), key=lambda m: (m.launched_at, m.instance_id))
        reason = f"every controller runs the new settings: one goes ({first.instance_id}), the roll's extra"
        return Step("retire", reason, first.instance_id)
    if not stale:
        return Step("done", "every controller runs the launch settings the group launches")
    if target + 1 <= MULTI_ATTACH_LIMIT:
        return Step(
            "surge",
            f"{len(stale)} controller(s) to replace ({describe(stale[0], wanted)}): "
            f"one more controller first ({target + 1})",
            desired=target + 1,
        )
    if target - 1 >= group.min_controllers:
        oldest = stale[0]
        return Step(
            "retire",
            describe(oldest, wanted)
            + f": {MULTI_ATTACH_LIMIT} controllers leave no room for one more, so it drains first "
            f"({target - 1} serve meanwhile), then its replacement launches",
            oldest.instance_id,
        )
    return Step(
        "blocked",
        f"{len(stale)} controller(s) to replace ({describe(stale[0], wanted)}), but the array runs "
        f"{target} controllers, io2 Multi-Attach's limit, and minControllers "
        f"{group.min_controllers} leaves none to drain first: lower minControllers to "
        f"{target - 1} for the roll",
    )
