"""Narrated run of the control plane on the local cloud (called by tools/demo.sh after deploy).

What a newcomer sees: an array registered, an IOPS alarm firing, the ScaleArray workflow
deciding how many controllers the demand needs, the decision recorded with its inputs, and a
repeated alarm event starting nothing new.
"""

import json
import time
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console
from rich.table import Table

from vsa_core.model import ArraySpec
from vsa_core.naming import AlarmKind, iops_alarm_name, scale_execution_name
from vsa_core.registry import ArrayRegistry
from vsa_core.waiters import execution_arn, execution_finished

ROOT = Path(__file__).resolve().parents[1]
STACK = "vsa-control-plane"
console = Console(highlight=False, width=110)


def say(step: str, text: str) -> None:
    console.print(f"[bold cyan]==> {step}[/] {text}")


def outputs() -> dict[str, str]:
    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


def alarm_event(array_id: str, demand: float, stamp: str, kind: AlarmKind) -> dict[str, Any]:
    event = json.loads((ROOT / "events/cloudwatch/iops_alarm_high.json").read_text())
    name = iops_alarm_name(array_id, kind)
    event["detail"]["alarmName"] = name
    event["resources"] = [f"arn:aws:cloudwatch:us-east-1:000000000000:alarm:{name}"]
    reason = json.loads(event["detail"]["state"]["reasonData"])
    reason["recentDatapoints"] = [demand * 0.93, demand * 0.97, demand]
    event["detail"]["state"]["reasonData"] = json.dumps(reason)
    event["detail"]["state"]["timestamp"] = stamp
    return event


def put(event: dict[str, Any]) -> None:
    boto3.client("events").put_events(
        Entries=[
            {
                "Source": event["source"],
                "DetailType": event["detail-type"],
                "Detail": json.dumps(event["detail"]),
                "Resources": event["resources"],
            }
        ]
    )


def run_alarm(out: dict[str, str], array_id: str, demand: float, kind: AlarmKind) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())
    event = alarm_event(array_id, demand, stamp, kind)
    name = scale_execution_name(array_id, event["resources"][0], stamp)
    started = time.monotonic()
    put(event)
    sfn = boto3.client("stepfunctions")
    arn = execution_arn(out["ScaleArrayStateMachineArn"], name)
    execution_finished(sfn).wait(executionArn=arn)
    execution = sfn.describe_execution(executionArn=arn)
    history = sfn.get_execution_history(executionArn=arn)["events"]
    steps = [e["stateEnteredEventDetails"]["name"] for e in history if e["type"] == "TaskStateEntered"]
    console.print(
        f"    EventBridge -> on_iops_alarm -> ScaleArray [bold]{execution['status']}[/] "
        f"in {time.monotonic() - started:.1f} s; steps: {' -> '.join(steps)}"
    )
    return {"event": event, "name": name, "execution": execution}


def main() -> None:
    out = outputs()
    registry = ArrayRegistry(out["RegistryTableName"], boto3.client("dynamodb"))
    array_id = f"demo-{time.strftime('%H%M%S')}"

    say("4.", f"registering array [bold]{array_id}[/] (2..8 controllers, 260,000 IOPS each at 70% target)")
    console.print(
        "    (the PUT /arrays API arrives with issue #4; until then the registry is written directly)"
    )
    spec = ArraySpec(
        arrayId=array_id,
        availabilityZone="us-east-1a",
        volumes=[{"volumeId": "vol-0a1b2c3d4e5f60001"}],
        controllers={"instanceType": "r5b.2xlarge", "imageId": "ami-0a1b2c3d4e5f60001"},
        minControllers=2,
        maxControllers=8,
    )
    registry.create(spec)

    say("5.", f"alarm {iops_alarm_name(array_id, 'high')} fires: the hosts now drive 612,345 IOPS")
    first = run_alarm(out, array_id, 612_345.0, "high")
    decision = json.loads(first["execution"]["output"])
    table = Table(title="ScaleArray decision (recorded in DynamoDB with its inputs)")
    columns = ("demand_iops", "current_controllers", "needed_controllers", "desired_controllers", "action")
    for key in columns:
        table.add_column(key)
    table.add_row(*(str(decision[k]) for k in columns))
    console.print(table)
    console.print(f"    reason: {decision['reason']}")
    console.print(
        "    why: ceil(612,345 / (260,000 x 0.7)) = 4 controllers; the registry now wants "
        f"{registry.get(array_id).desired_controllers}"
    )

    say("6.", "EventBridge delivers the same alarm state change again (at-least-once delivery)")
    put(first["event"])
    logs = boto3.client("logs")
    group = f"/aws/lambda/{out['OnIopsAlarmFunctionName']}"
    deadline = time.monotonic() + 30
    seen = False
    while not seen and time.monotonic() < deadline:  # bounded: the duplicate invoke is asynchronous
        events = logs.filter_log_events(logGroupName=group)["events"]
        seen = any("duplicate alarm event" in e["message"] and first["name"] in e["message"] for e in events)
        if not seen:
            time.sleep(0.5)
    executions = boto3.client("stepfunctions").list_executions(
        stateMachineArn=out["ScaleArrayStateMachineArn"]
    )
    count = [e["name"] for e in executions["executions"]].count(first["name"])
    console.print(
        f"    on_iops_alarm saw it as a duplicate: {seen}; executions for that state change: {count} "
        "(its execution name is derived from alarm ARN + state timestamp)"
    )

    say("7.", f"demand falls to 150,000 IOPS: alarm {iops_alarm_name(array_id, 'low')} fires")
    second = run_alarm(out, array_id, 150_000.0, "low")
    low = json.loads(second["execution"]["output"])
    console.print(
        f"    {low['action']}: {low['current_controllers']} -> {low['desired_controllers']} ({low['reason']})"
    )

    history = registry.decisions(array_id)
    console.print(f"\n[bold green]done[/]: {len(history)} decisions recorded for {array_id}. Look around:")
    console.print(
        f"    aws --endpoint-url {boto3.client('sts').meta.endpoint_url} dynamodb scan "
        f"--table-name {out['RegistryTableName']}"
    )
    console.print("    make localcloud-logs   |   make localcloud-stop")


if __name__ == "__main__":
    main()
