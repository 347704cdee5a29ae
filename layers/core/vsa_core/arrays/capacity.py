"""What an array can deliver, and how many controllers its demand needs. Pure.

Two limits. Each controller moves at most its own EBS IOPS (``perControllerIops``, by default
its instance type's, ``vsa_core.instances``). And on io2 Multi-Attach all the
attachments of a volume together get at most the volume's provisioned IOPS, however many
instances attach it: the array delivers at most the sum of its volumes' provisioned IOPS. So
``n`` controllers deliver ``min(n x perControllerIops, sum of the volumes' IOPS)``, and a
controller beyond ``volume_controllers`` adds none.

With one owner controller per volume (``fencing: reservations``) a volume is served by one
controller at a time: it moves at most ``min(its provisioned IOPS, perControllerIops)``
(``owned_volume_iops``), and only as many controllers as there are volumes carry IO
(``owner_controllers``): the others stand by for a failover.

One set of functions, used by the planner (ScaleArray's PlanScale), by the simulator and the
benchmark, and by the array's status.
"""

import math
from collections.abc import Iterable


def controllers_needed(demand_iops: float, per_controller_iops: int, target_utilisation: float) -> int:
    """ceil(demand / (per-controller IOPS x target utilisation)); 0 for no demand."""
    if demand_iops <= 0:
        return 0
    return math.ceil(demand_iops / (per_controller_iops * target_utilisation))


def volume_controllers(volume_iops: int, per_controller_iops: int, target_utilisation: float) -> int:
    """The most controllers that can add IOPS: enough to move the volumes' whole provisioned
    IOPS at the target utilisation (at least 1). Any further controller finds the volumes
    already giving all they have."""
    if volume_iops <= 0:
        raise ValueError(f"the volumes' provisioned IOPS must be more than 0, got {volume_iops}")
    return max(1, controllers_needed(volume_iops, per_controller_iops, target_utilisation))


def deliverable_iops(controllers: int, per_controller_iops: int, volume_iops: int | None) -> float:
    """What ``controllers`` controllers deliver at 100%: ``min(n x perControllerIops, the
    volumes' total)``; without the volumes' total (None: unknown), the controllers' part alone."""
    by_controllers = float(controllers * per_controller_iops)
    return by_controllers if volume_iops is None else min(by_controllers, float(volume_iops))


def owned_volume_iops(volume_iops: Iterable[int], per_controller_iops: int) -> int:
    """The volumes' IOPS in total with one owner per volume: each at most its owner's
    ``perControllerIops``, however many controllers attach it."""
    return sum(min(int(iops), per_controller_iops) for iops in volume_iops)


def owner_controllers(volume_count: int) -> int:
    """With one owner per volume, the most controllers that carry IO: one per volume."""
    return max(1, volume_count)


def owner_bound_reason(owners: int) -> str:
    """What an array bound by its volumes' owners says, and what to change."""
    return (
        f"owner-bound: with one owner controller per volume (fencing: reservations) the {owners} "
        f"volume(s) keep at most {owners} controller(s) busy; more stand by for a failover and add no "
        "IOPS: spread the data over more volumes (or raise a volume's IOPS up to one controller's)"
    )


def volume_bound_reason(volume_iops: int, useful: int) -> str:
    """What a volume-bound array says, and what to raise."""
    return (
        f"volume-bound: the volumes provide {volume_iops:,} IOPS in total (io2 Multi-Attach shares a "
        f"volume's provisioned IOPS among all its controllers), which {useful} controller(s) "
        "already move: raise the volumes' provisioned IOPS (or add volumes); more controllers add none"
    )
