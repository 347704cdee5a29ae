"""The controller workflows' own overhead, on the local cloud: 4 volumes x 2 hosts against
16 volumes x 8 hosts.

    make bench-lifecycle   # starts the local cloud, builds and deploys, then runs this

For each shape an array is applied with ``minControllers`` controllers (each bootstrapped by
BootstrapController), then one controller is replaced (TerminateInstanceInAutoScalingGroup without
decrement: DrainController, then a BootstrapController for the replacement). From each
execution's history:

* **wall**: start to end of the execution;
* **waiting on AWS**: the union of the intervals in which at least one Wait state (volume
  attachments, the node, Run Command invocations running on the nodes) or one AWS API call
  (aws-sdk and DynamoDB integrations: SendCommand, ListCommands, AttachVolume, heartbeats, …)
  was in progress;
* **overhead**: wall less waiting, i.e. the time in the workflow's own steps (its Lambda tasks,
  including the AWS calls they make, and the state transitions between steps) while nothing of
  AWS was in progress;
* **less polls**: the overhead less the Lambda steps that only ask whether a wait is over
  (``attachment``, ``node``, ``commands``: one per poll round, and the rounds are as many as
  the awaited thing takes), i.e. the time in the steps that do the work;
* **states** and **Lambda steps**: the workflow's own work counted, not timed. On the local
  cloud the hosts' scripts run on the same cores as the engine, so the timed overhead of a
  larger array also grows with the load its own nodes put on the machine; the counts do not.

Prints figures and the 16x8 / 4x2 ratios; nothing is asserted (machines here are shared and noisy).
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the integration tier's helpers (Api signs as vsactl does)

from tests.integration import conftest as _conftest  # noqa: E402, F401 - arrays_world imports it first
from tests.integration.arrays_world import World, settle  # noqa: E402
from tests.integration.conftest import Api  # noqa: E402

AZ = "us-east-1a"
AMI = "ami-1e749f67"
console = Console(highlight=False, width=120)


def outputs() -> dict[str, str]:
    stack = boto3.client("cloudformation").describe_stacks(StackName="vsa-control-plane")["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


# task_controller steps that only ask whether something awaited is over (attachments, the SSM
# agent, the hosts' connect-path invocations): the mechanism of a wait, one per poll round
POLL_STEPS = ("attachment", "node", "commands")


def _union(intervals: list[tuple[datetime, datetime]]) -> float:
    """Seconds covered by at least one of ``intervals``."""
    total, current = 0.0, None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += (current[1] - current[0]).total_seconds()
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    if current is not None:
        total += (current[1] - current[0]).total_seconds()
    return total


def timings(execution_arn: str) -> dict[str, float]:
    sfn = boto3.client("stepfunctions")
    described = sfn.describe_execution(executionArn=execution_arn)
    events: list[dict[str, Any]] = []
    token = None
    while True:
        page = sfn.get_execution_history(
            executionArn=execution_arn, maxResults=1000, **({"nextToken": token} if token else {})
        )
        events += page["events"]
        token = page.get("nextToken")
        if not token:
            break
    names = {e["id"]: e for e in events}
    intervals: list[tuple[datetime, datetime]] = []  # waiting on AWS: Wait states and AWS API calls
    polls: list[tuple[datetime, datetime]] = []  # Lambda steps that only ask whether a wait is over
    opened: dict[int, datetime] = {}
    polling: dict[int, datetime] = {}
    for event in events:
        kind = event["type"]
        if kind in ("WaitStateEntered", "TaskScheduled"):
            opened[event["id"]] = event["timestamp"]
        elif kind == "LambdaFunctionScheduled":
            step = json.loads(event["lambdaFunctionScheduledEventDetails"]["input"]).get("step")
            if step in POLL_STEPS:
                polling[event["id"]] = event["timestamp"]
        elif kind in ("LambdaFunctionSucceeded", "LambdaFunctionFailed", "LambdaFunctionTimedOut"):
            entry = event.get("previousEventId")
            while (
                entry is not None
                and entry not in polling
                and names.get(entry, {}).get("type")
                not in (
                    "LambdaFunctionScheduled",
                    None,
                )
            ):
                entry = names.get(entry, {}).get("previousEventId")
            if entry in polling:
                polls.append((polling.pop(entry), event["timestamp"]))
        elif kind == "WaitStateExited" or kind in ("TaskSucceeded", "TaskFailed", "TaskTimedOut"):
            # walk back to the entry (a Wait's entry, or the Task's TaskScheduled: an aws-sdk or
            # optimised integration; Lambda tasks log LambdaFunction* events and stay ours)
            entry = event.get("previousEventId")
            while entry is not None and entry not in opened:
                entry = names.get(entry, {}).get("previousEventId")
            if entry is not None:
                intervals.append((opened.pop(entry), event["timestamp"]))
    waiting = _union(intervals)
    waiting_or_polling = _union(intervals + polls)
    wall = (described["stopDate"] - described["startDate"]).total_seconds()
    return {
        "wall": wall,
        "waiting": waiting,
        "overhead": wall - waiting,
        "working": wall - waiting_or_polling,
        # the workflow's own work, counted rather than timed (the same on any machine): the
        # states it went through and the Lambda steps it ran
        "states": sum(e["type"].endswith("StateEntered") for e in events),
        "lambdas": sum(e["type"] == "LambdaFunctionScheduled" for e in events),
        "status": described["status"],
    }


def run_shape(
    api: Api, world: World, out: dict[str, str], volumes: int, hosts: int, controllers: int
) -> list[dict[str, Any]]:
    array_id = f"bench-{uuid.uuid4().hex[:6]}"
    spec = {
        "specVersion": 1,
        "arrayId": array_id,
        "availabilityZone": AZ,
        "volumes": [{"volumeId": world.volume()} for _ in range(volumes)],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI},
        "minControllers": controllers,
        "maxControllers": controllers + 1,
        "hosts": [{"instanceId": world.host()} for _ in range(hosts)],
    }
    status, reply = api.call("PUT", f"/arrays/{array_id}", spec)
    if status != 201:
        raise SystemExit(f"apply failed: {status} {reply}")
    settle(array_id, timeout=600)
    autoscaling = boto3.client("autoscaling")
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[f"vsa-{array_id}-controllers"])[
        "AutoScalingGroups"
    ][0]
    leaving = group["Instances"][0]["InstanceId"]
    autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=leaving, ShouldDecrementDesiredCapacity=False
    )
    time.sleep(5)
    settle(array_id, timeout=600)
    sfn = boto3.client("stepfunctions")
    rows = []
    instances = {i["InstanceId"] for i in group["Instances"]} | {
        i["InstanceId"]
        for i in autoscaling.describe_auto_scaling_groups(
            AutoScalingGroupNames=[f"vsa-{array_id}-controllers"]
        )["AutoScalingGroups"][0]["Instances"]
    }
    for kind, machine in (
        ("bootstrap", out["BootstrapControllerStateMachineArn"]),
        ("drain", out["DrainControllerStateMachineArn"]),
    ):
        for execution in sfn.list_executions(stateMachineArn=machine)["executions"]:
            instance = execution["name"].split("-")[1] + "-" + execution["name"].split("-")[2]
            if instance in instances and execution["status"] != "RUNNING":
                rows.append({"kind": kind, "instance": instance, **timings(execution["executionArn"])})
    api.call("DELETE", f"/arrays/{array_id}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--controllers", type=int, default=3, help="controllers per array (bootstraps measured)"
    )
    args = parser.parse_args()
    out = outputs()
    api = Api(os.environ["AWS_ENDPOINT_URL"], out["ApiId"])
    world = World(os.environ["AWS_ENDPOINT_URL"])
    results: dict[str, dict[str, dict[str, float]]] = {}
    try:
        for volumes, hosts in ((4, 2), (16, 8)):
            shape = f"{volumes} vol x {hosts} hosts"
            console.print(f"[bold]{shape}[/]: {args.controllers} controllers, then one replaced")
            rows = run_shape(api, world, out, volumes, hosts, args.controllers)
            for kind in ("bootstrap", "drain"):
                mine = [r for r in rows if r["kind"] == kind and r["status"] == "SUCCEEDED"]
                if not mine:
                    raise SystemExit(f"{shape}: no successful {kind}: {rows}")
                results.setdefault(kind, {})[shape] = {
                    k: statistics.median(r[k] for r in mine)
                    for k in ("wall", "waiting", "overhead", "working", "states", "lambdas")
                } | {"n": len(mine)}
    finally:
        world.close()
    table = Table(title="controller workflows: median seconds per execution (local cloud)")
    for column in (
        "workflow",
        "shape",
        "n",
        "wall",
        "waiting on AWS",
        "own overhead",
        "less polls",
        "states",
        "Lambda steps",
    ):
        table.add_column(column, justify="right" if column not in ("workflow", "shape") else "left")
    for kind, shapes in results.items():
        for shape, figures in shapes.items():
            table.add_row(
                kind,
                shape,
                f"{figures['n']:.0f}",
                f"{figures['wall']:.1f}",
                f"{figures['waiting']:.1f}",
                f"{figures['overhead']:.1f}",
                f"{figures['working']:.1f}",
                f"{figures['states']:.0f}",
                f"{figures['lambdas']:.0f}",
            )
    console.print(table)
    for kind, shapes in results.items():
        small, large = shapes["4 vol x 2 hosts"], shapes["16 vol x 8 hosts"]
        console.print(
            f"{kind}: overhead 16x8 / 4x2 = {large['overhead'] / small['overhead']:.2f}x "
            f"({small['overhead']:.1f} s -> {large['overhead']:.1f} s); less polls "
            f"{large['working'] / small['working']:.2f}x "
            f"({small['working']:.1f} s -> {large['working']:.1f} s); "
            f"wall {large['wall'] / small['wall']:.2f}x; "
            f"states {small['states']:.0f} -> {large['states']:.0f}, "
            f"Lambda steps {small['lambdas']:.0f} -> {large['lambdas']:.0f}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
