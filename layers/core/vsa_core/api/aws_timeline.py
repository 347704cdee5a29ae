"""An array's timeline from AWS (``GET /arrays/{id}/events``): reads the records
``vsa_core.api.timeline`` merges, within bounds that keep a busy array's request well inside
API Gateway's 29 s.

What is read, for one array:

- the registry (keyed, never a scan): the SPEC item (404 for an unknown array), the scale
  ``DECISION#`` items from ``since`` on (one query, at most ``limit`` items, newest first), the
  stored changes and their callers (``CHANGE#``, likewise), the backup sets (``BACKUP#``) and the
  slots;
- ``ListExecutions`` of ScaleArray, ReconcileArray and DeleteArray, whose names carry the array
  id (``naming``), and of BootstrapController and DrainController, whose names carry only the
  instance (``controllers.events``);
- ``DescribeScalingActivities`` of the array's controller group;
- ``DescribeExecution`` of the array's runs that failed, timed out or were aborted, for their
  error and cause.

**Which controller runs are the array's.** A bootstrap or drain run is named after its
instance; the array is in its input (the lifecycle event's group name, or for a lost controller
only the instance) and in the registry's ``instances`` index while the controller holds a slot
(a drained controller's slot is released, and the index forgets it). Reading every run's input
(``DescribeExecution`` per run) costs one call per controller run of *every* array of the
deployment, and the index knows only the controllers of today. The array's own controller group
knows every instance it launched: its scaling activities ("Launching a new EC2 instance: i-…",
kept six weeks by Auto Scaling), one call per 100 activities of *this* array. Those instance
ids, with the slots' (a controller the activities no longer list), pick the array's runs out of
the listings by name. The listings themselves are shared by all arrays: one call per 1,000
runs, newest first, stopped at ``since``. So the cost grows with this array's history and the
deployment's recent runs, never with one ``DescribeExecution`` per run of every array.

**Bounds.** At most ``MAX_PAGES`` listing pages per workflow and per group,
``MAX_DESCRIBED`` ``DescribeExecution`` calls: a source cut short by them is named in the answer's
``incomplete`` (narrow ``since`` to see further back), never a timeout.
"""

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vsa_core.api import timeline
from vsa_core.api.timeline import Event, Execution
from vsa_core.arrays.aws_registry import ArrayRegistry, ScaleDecisions
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.naming import group_name
from vsa_core.waiters import execution_arn

MAX_PAGES = 3
"""ListExecutions pages (1,000 runs each) per workflow, DescribeScalingActivities pages (100)."""
MAX_DESCRIBED = 20
"""DescribeExecution calls per request: the newest failed runs get their error and cause."""
FAILED = ("FAILED", "TIMED_OUT", "ABORTED")


@dataclass(frozen=True)
class Workflows:
    """The state machines' ARNs (an empty one is not read: named in ``incomplete``)."""

    scale: str
    bootstrap: str
    drain: str
    reconcile: str
    delete: str


@dataclass(frozen=True)
class EventClients:
    sfn: Any
    dynamodb: Any
    autoscaling: Any
    table: str
    workflows: Workflows


def read_events(
    clients: EventClients, array_id: str, *, since: datetime | None, limit: int
) -> dict[str, Any]:
    """The array's timeline, JSON-able: ``{arrayId, since, limit, events, truncated, incomplete}``.
    ``ArrayNotFoundError`` for an array that is not registered."""
    registry = ArrayRegistry(clients.table, clients.dynamodb)
    registry.get(array_id)  # 404 first, before any other read
    incomplete: list[str] = []
    flows = clients.workflows

    def runs(arn: str, what: str, mine: Callable[[str], bool]) -> list[Execution]:
        if not arn:
            incomplete.append(f"{what} runs: not read (the function has no state machine ARN for it)")
            return []
        found, cut = _list_runs(clients.sfn, arn, mine, since)
        if cut:
            incomplete.append(
                f"{what} runs: only the newest {MAX_PAGES * 1000} of the deployment were listed"
            )
        return found

    instances, group_failures = _group_history(clients, array_id, since, incomplete)
    instances |= {s["instanceId"] for s in registry.slots(array_id).values() if s.get("instanceId")}
    scale = runs(flows.scale, "ScaleArray", lambda n: timeline.is_array_run("scale", array_id, n))
    reconcile = runs(
        flows.reconcile, "ReconcileArray", lambda n: timeline.is_array_run("reconcile", array_id, n)
    )
    delete = runs(flows.delete, "DeleteArray", lambda n: timeline.is_array_run("delete", array_id, n))
    controllers = [
        run
        for arn, what in ((flows.bootstrap, "BootstrapController"), (flows.drain, "DrainController"))
        for run in runs(arn, what, lambda n: _controller_of(n) in instances)
    ]
    details = _failure_details(
        clients.sfn,
        [(flows.scale, r) for r in scale]
        + [(flows.reconcile, r) for r in reconcile]
        + [(flows.delete, r) for r in delete]
        + [(flows.bootstrap if r.name.startswith("bootstrap-") else flows.drain, r) for r in controllers],
        incomplete,
    )

    def described(found: list[Execution]) -> list[Execution]:
        return [details.get(r.name, r) for r in found]

    found = timeline.timeline(
        [
            timeline.scale_events(_decisions(clients, array_id, since, limit), described(scale)),
            timeline.controller_events(described(controllers), instances),
            [timeline.reconcile_event(r) for r in described(reconcile)],
            timeline.attributed(
                [timeline.delete_event(r) for r in described(delete)],
                registry.history.read(array_id, since, limit),
            ),
            [
                timeline.backup_event(b)
                for b in BackupRegistry(clients.table, clients.dynamodb).sets(array_id)
            ],
            group_failures,
        ],
        since=since,
        limit=limit,
    )
    return {
        "arrayId": array_id,
        "since": since.isoformat() if since else None,
        "limit": limit,
        **found.as_dict(),
        "incomplete": incomplete,
    }


def _controller_of(name: str) -> str | None:
    parsed = timeline.controller_run(name)
    return parsed[1] if parsed else None


def _list_runs(
    sfn: Any, arn: str, mine: Callable[[str], bool], since: datetime | None
) -> tuple[list[Execution], bool]:
    """The runs ``mine`` accepts, newest first (ListExecutions answers newest first), stopping at
    ``since``; ``True`` when ``MAX_PAGES`` cut the listing short."""
    found: list[Execution] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        page = sfn.list_executions(
            stateMachineArn=arn, maxResults=1000, **({"nextToken": token} if token else {})
        )
        for run in page.get("executions", []):
            if since is not None and run["startDate"] < since:
                return found, False
            if mine(run["name"]):
                found.append(
                    Execution(
                        name=run["name"],
                        status=run["status"],
                        started_at=run["startDate"],
                        stopped_at=run.get("stopDate"),
                    )
                )
        token = page.get("nextToken")
        if not token:
            return found, False
    return found, True


def _failure_details(
    sfn: Any, runs: list[tuple[str, Execution]], incomplete: list[str]
) -> dict[str, Execution]:
    """The newest ``MAX_DESCRIBED`` failed ``(state machine ARN, run)`` with their error and cause,
    by run name."""
    failed = sorted((c for c in runs if c[1].status in FAILED), key=lambda c: c[1].started_at, reverse=True)
    if len(failed) > MAX_DESCRIBED:
        incomplete.append(
            f"failed runs: only the newest {MAX_DESCRIBED} of {len(failed)} carry their error and cause"
        )
    details: dict[str, Execution] = {}
    for arn, run in failed[:MAX_DESCRIBED]:
        answer = sfn.describe_execution(executionArn=execution_arn(arn, run.name))
        details[run.name] = dataclasses.replace(run, error=answer.get("error"), cause=answer.get("cause"))
    return details


def _group_history(
    clients: EventClients, array_id: str, since: datetime | None, incomplete: list[str]
) -> tuple[set[str], list[Event]]:
    """Every instance the array's group launched or terminated (newest activities first, all of
    them: an instance launched before ``since`` may have been drained after it), and the
    activities that failed or were cancelled."""
    instances: set[str] = set()
    failures: list[Event] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        page = clients.autoscaling.describe_scaling_activities(
            AutoScalingGroupName=group_name(array_id),
            MaxRecords=100,
            **({"NextToken": token} if token else {}),
        )
        for activity in page.get("Activities", []):
            instances |= timeline.instances_in(str(activity.get("Description", "")))
            if activity.get("StatusCode") in ("Failed", "Cancelled"):
                failures.append(timeline.group_event(activity))
        token = page.get("NextToken")
        if not token:
            return instances, failures
    incomplete.append(f"controller group activities: only the newest {MAX_PAGES * 100} were read")
    return instances, failures


def _decisions(
    clients: EventClients, array_id: str, since: datetime | None, limit: int
) -> Iterable[tuple[datetime, str, dict[str, Any]]]:
    """The newest ``limit`` decisions from ``since`` on: ``(when, execution name, decision)``."""
    return ScaleDecisions(clients.table, clients.dynamodb).since(array_id, since, limit)
