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

The states themselves still change at once (the latency profile's ``instance_pending`` and
``instance_shutting_down`` are not applied here). Events go out through one queue in the
order the transitions happened, never from inside a model lock.

The patches are applied by both the EC2 and the Auto Scaling providers (whichever loads first),
so a group's instances are announced even before any EC2 call loaded the EC2 provider.
"""

import logging
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from moto.ec2.models.instances import Instance, InstanceBackend, InstanceState

from vsa_localcloud import eventbus

LOG = logging.getLogger(__name__)
DETAIL_TYPE = "EC2 Instance State-change Notification"

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


def _run_instances(original: Callable[..., Any]) -> Callable[..., Any]:
    def run_instances(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
        reservation = original(self, *args, **kwargs)
        for instance in reservation.instances:
            announce(instance, "pending")
            announce(instance, instance.state)  # running (moto launches straight into it)
        return reservation

    return run_instances


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
        Instance.terminate = _changing(Instance.terminate, "terminated", "shutting-down")  # type: ignore[method-assign]
        _applied = True
