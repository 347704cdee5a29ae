"""How long AWS takes: the local cloud's latency profile, and one timer thread that applies the
delayed state transitions.

moto answers every call at once in its final state: a volume is ``available`` the moment
CreateVolume returns, an attachment ``attached`` at once, an instance ``running`` at launch. A
product written against that never learns that AWS reports intermediate states, and that a call
on a resource in one of them is refused (AttachVolume on a ``creating`` volume:
``IncorrectState``). Two profiles:

* ``fast`` (the default; every tier that is not about timing): the transitions that have always
  been instant stay instant, so the quick tiers stay quick.
* ``realistic``: each transition takes about as long as on AWS at the quick end of what AWS's
  documentation and our measurements on real accounts show (``REALISTIC`` below, one line of
  evidence each). The controller-lifecycle and backup integration tests run under it.

A test switches profile through the control endpoint: ``POST /_localcloud/timings/configure``
``{"profile": "realistic"}`` (optionally with single overrides, e.g. ``{"ssm_agent_online": 5}``);
``{"profile": "fast"}`` goes back. The start-up profile comes from ``VSA_LOCALCLOUD_PROFILE``.

The models that own a resource (``ebs_model`` for volumes, ``ebs_modify`` for volume
modifications, ``ec2_instances`` for instances, ``ssm_nodes`` and ``ssm_commands`` for Run
Command) read ``current()`` when a transition starts and hand the end of it to ``after`` (run
at once when the delay is 0).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Profile:
    """Seconds each transition takes."""

    volume_creating: float = 0.0  # CreateVolume: creating → available
    volume_attaching: float = 0.0  # AttachVolume: attaching → attached (device appears on the node)
    volume_detaching: float = 0.0  # DetachVolume: detaching → gone (device disappears first)
    instance_pending: float = 0.0  # RunInstances: pending → running
    instance_shutting_down: float = 0.0  # TerminateInstances: shutting-down → terminated
    ssm_agent_online: float = 0.0  # running → the SSM agent registered and Online
    command_delivery: float = 0.0  # SendCommand: Pending → InProgress on each node
    snapshot_pending: float = 5.0  # CreateSnapshot(s): pending → completed
    volume_modifying: float = 0.0  # ModifyVolume: modifying → optimizing (new size visible)
    volume_optimizing: float = 0.0  # ModifyVolume: optimizing → completed


FAST = Profile()

# The quick end of AWS, so the realistic tier stays minutes long and still meets every
# intermediate state the product will meet on AWS.
REALISTIC = Profile(
    # "Amazon EBS volume lifecycle": creating → available; an empty io2 volume takes seconds.
    volume_creating=6.0,
    # AttachVolume answers "attaching"; the attachment is "attached" seconds later.
    volume_attaching=4.0,
    # DetachVolume answers "detaching"; "If the volume is busy, the detachment may take longer".
    volume_detaching=4.0,
    # "Instance lifecycle": pending until the instance is ready; ~10-30 s for a Nitro instance.
    instance_pending=15.0,
    # TerminateInstances: shutting-down before terminated.
    instance_shutting_down=10.0,
    # SSM Agent starts after boot and registers the node: tens of seconds to minutes on AWS.
    ssm_agent_online=30.0,
    # Run Command: the agent polls for commands (its MGS channel): about a second to deliver.
    command_delivery=1.5,
    # "Snapshots are created asynchronously": minutes for a first, full snapshot on AWS.
    snapshot_pending=30.0,
    # "Monitor the progress of volume modifications": modifying for seconds to minutes, then
    # optimizing (the new size already usable) for minutes to hours. Optimizing is 2 minutes here,
    # not the 30 s it was: a caller's next apply (a PUT taking up to API Gateway's 29 s on a loaded
    # machine, then another) must still meet the modification unfinished, as it would on AWS.
    volume_modifying=10.0,
    volume_optimizing=120.0,
)

PROFILES = {"fast": FAST, "realistic": REALISTIC}


class _Current:
    def __init__(self) -> None:
        name = os.environ.get("VSA_LOCALCLOUD_PROFILE", "fast")
        if name not in PROFILES:
            LOG.warning("VSA_LOCALCLOUD_PROFILE=%r unknown (%s); using fast", name, ", ".join(PROFILES))
            name = "fast"
        self.name = name
        self.profile = PROFILES[name]
        self.lock = threading.Lock()


_CURRENT = _Current()


def current() -> Profile:
    """The profile in force (read it when a transition starts)."""
    return _CURRENT.profile


def configure(body: dict[str, Any]) -> dict[str, Any]:
    """``{"profile": "fast"|"realistic", <field>: seconds, ...}``: a profile, then overrides."""
    known = {f.name for f in fields(Profile)}
    name = str(body.get("profile", _CURRENT.name))
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; one of {', '.join(PROFILES)}")
    overrides = {k: v for k, v in body.items() if k != "profile"}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"unknown timing {key!r}; one of {', '.join(sorted(known))}")
        if float(value) < 0:
            raise ValueError(f"{key} must be >= 0 seconds, not {value}")
    with _CURRENT.lock:
        _CURRENT.name = name
        _CURRENT.profile = replace(PROFILES[name], **{k: float(v) for k, v in overrides.items()})
        LOG.info("latency profile %s: %s", name, asdict(_CURRENT.profile))
        return show({})


def show(_: dict[str, Any]) -> dict[str, Any]:
    return {"profile": _CURRENT.name, "seconds": asdict(_CURRENT.profile), "scheduled": _TIMER.pending()}


# --- one timer thread for every delayed transition ----------------------------------------------


class _Timer:
    """A heap of (deadline, seq, fn) run by one daemon thread; a failing fn is logged, never
    kills the thread. Callbacks run outside every model lock, one at a time, in deadline order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None], str]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, delay: float, fn: Callable[[], None], what: str) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), fn, what))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vsa-timings", daemon=True)
                self._thread.start()
            self._cv.notify()

    def pending(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        with self._cv:
            return [{"in": round(d - now, 3), "what": w} for d, _, _, w in sorted(self._heap)]

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cv.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic()))
                _, _, fn, what = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                LOG.exception("delayed transition failed: %s", what)


_TIMER = _Timer()


def after(delay: float, fn: Callable[[], None], what: str) -> None:
    """Run ``fn`` ``delay`` seconds from now on the timer thread; at once (in the caller) when
    the delay is 0, so the fast profile behaves exactly as before. Call it outside model locks."""
    if delay <= 0:
        fn()
    else:
        _TIMER.schedule(delay, fn, what)


# POST /_localcloud/timings/<action>
CONTROL: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "configure": configure,  # {"profile": "realistic"} or {"profile": "fast", "volume_attaching": 2}
    "show": show,  # the profile in force and the transitions scheduled
}
