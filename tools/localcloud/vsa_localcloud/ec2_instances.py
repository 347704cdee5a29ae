"""EC2 instance state changes as AWS reports them: an ``EC2 Instance State-change Notification``
on the default event bus for every transition.

AWS ("State change events for Amazon EC2 instances",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instance-state-changes.html):
"Amazon EC2 sends an EC2 Instance State-change Notification event to Amazon EventBridge when the
state of an instance changes", with ``detail`` ``{"instance-id": …, "state": …}`` and the
instance's ARN as the only resource; "When you launch or start an instance, it enters the
pending state and then the running state. When you stop an instance, it enters the stopping
state and then the stopped state. When you terminate an instance, it enters the shutting-down
state and then the terminated state."

moto emits nothing and jumps straight to the final state. Its instance model is patched here,
below every caller (RunInstances, Start/Stop/TerminateInstances, an Auto Scaling group's
launches and terminations, CloudFormation), so every transition is announced, in order, once:

* a launch (``run_instances``): ``pending`` then ``running``;
* ``Instance.start`` of a stopped instance: ``pending`` then ``running``;
* ``Instance.stop`` of a running instance: ``stopping`` then ``stopped``;
* ``Instance.terminate`` of an instance not yet terminated: ``shutting-down`` then
  ``terminated`` (a second TerminateInstances changes nothing and announces nothing, as on AWS).

A launch and a termination take the latency profile's time ("Instance lifecycle": an
instance is ``pending`` until it is ready, ``shutting-down`` before ``terminated``): a launched
instance stays ``pending`` for ``instance_pending`` seconds (RunInstances answers it pending, as
AWS does; AttachVolume is refused meanwhile), a terminated one ``shutting-down`` for
``instance_shutting_down`` seconds (its volumes are let go at once). The fast profile (0 s)
keeps both instant. ``when_running`` lets Auto Scaling start a launch's lifecycle only once the
instance runs ("your newly launched instance completes its startup sequence and transitions to
a wait state"). Events go out through one queue in the order the transitions happened, never
from inside a model lock. Stopping and starting stay instant.

The patches are applied by both the EC2 and the Auto Scaling providers (whichever loads first),
so a group's instances are announced even before any EC2 call loaded the EC2 provider.
"""

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from moto.ec2.models.instances import Instance, InstanceBackend, InstanceState

from vsa_localcloud import eventbus, timings

LOG = logging.getLogger(__name__)
DETAIL_TYPE = "EC2 Instance State-change Notification"
CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}
_LOCK = threading.RLock()  # the delayed transitions and the callbacks waiting for them

_outbox: "queue.Queue[Callable[[], None]]" = queue.Queue()
_worker_lock = threading.Lock()
_worker: threading.Thread | None = None


def _deliver() -> None:
    while True:
        send = _outbox.get()
        try:
            send()
        except Exception:
            LOG.exception("instance state-change event not delivered")


def _post(send: Callable[[], None]) -> None:
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = threading.Thread(target=_deliver, name="ec2-state-events", daemon=True)
            _worker.start()
    _outbox.put(send)


def announce(instance: Instance, state: str) -> None:
    """Queue the state-change event of ``instance`` entering ``state`` (taken now)."""
    account, region = instance.ec2_backend.account_id, instance.ec2_backend.region_name
    moment = datetime.now(UTC)
    arn = f"arn:aws:ec2:{region}:{account}:instance/{instance.id}"
    detail = {"instance-id": instance.id, "state": state}
    _post(
        lambda: eventbus.emit(
            account_id=account,
            region=region,
            source="aws.ec2",
            detail_type=DETAIL_TYPE,
            detail=detail,
            resources=[arn],
            time=moment,
        )
    )


def _set(instance: Instance, state: str) -> None:
    instance._state.name, instance._state.code = state, CODES[state]


def when_running(instance: Instance, fn: Callable[[], None]) -> None:
    """Call ``fn`` once ``instance`` runs: now if it does, when it leaves ``pending`` if it is
    pending, never if it is gone (it ended before it ran)."""
    with _LOCK:
        if instance.state == "pending":
            instance.__dict__.setdefault("vsa_when_running", []).append(fn)
            return
        if instance.state != "running":
            return
    fn()


def _running(instance: Instance) -> None:
    """pending → running (unless it was terminated meanwhile)."""
    with _LOCK:
        if instance.state not in ("pending", "running"):
            return
        _set(instance, "running")
        instance.__dict__["vsa_running_since"] = time.time()  # the SSM agent's clock starts here
        waiting = instance.__dict__.pop("vsa_when_running", [])
    announce(instance, "running")
    for fn in waiting:
        fn()


def _run_instances(original: Callable[..., Any]) -> Callable[..., Any]:
    def run_instances(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
        reservation = original(self, *args, **kwargs)
        delay = timings.current().instance_pending
        for instance in reservation.instances:
            announce(instance, "pending")
            if delay > 0:
                _set(instance, "pending")  # moto launches straight into running
                timings.after(delay, functools.partial(_running, instance), f"launch {instance.id}")
            else:
                _running(instance)
        return reservation

    return run_instances


def _terminated(instance: Instance) -> None:
    with _LOCK:
        if instance.state != "shutting-down":
            return
        _set(instance, "terminated")
    announce(instance, "terminated")


def _terminate(original: Callable[[Instance], InstanceState]) -> Callable[..., Any]:
    """moto terminates at once (volumes let go, state terminated); the instance is shutting-down
    for the profile's ``instance_shutting_down`` first. Terminating it again changes nothing."""

    def terminate(self: Instance) -> InstanceState:
        with _LOCK:
            previous = original(self)
            if previous.name in ("shutting-down", "terminated"):
                _set(self, previous.name)  # moto set terminated again
                return previous
            delay = timings.current().instance_shutting_down
            if delay > 0:
                _set(self, "shutting-down")
        announce(self, "shutting-down")
        if delay > 0:
            timings.after(delay, lambda: _terminated(self), f"terminate {self.id}")
        else:
            announce(self, "terminated")
        return previous

    return terminate


def _changing(original: Callable[[Instance], InstanceState], unchanged: str, via: str) -> Callable[..., Any]:
    """Wrap a moto state change: announce ``via`` and the final state unless the instance was
    already ``unchanged`` (its final state) before the call."""

    def change(self: Instance) -> InstanceState:
        previous = original(self)
        if previous.name != unchanged:
            announce(self, via)
            announce(self, self.state)
        return previous

    return change


_applied = False
_apply_lock = threading.Lock()


def apply_patches() -> None:
    """Patch moto's instance model once (idempotent)."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        InstanceBackend.run_instances = _run_instances(InstanceBackend.run_instances)  # type: ignore[method-assign]
        Instance.start = _changing(Instance.start, "running", "pending")  # type: ignore[method-assign]
        Instance.stop = _changing(Instance.stop, "stopped", "stopping")  # type: ignore[method-assign]
        Instance.terminate = _terminate(Instance.terminate)  # type: ignore[method-assign]
        _applied = True
