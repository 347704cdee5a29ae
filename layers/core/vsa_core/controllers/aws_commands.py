"""Run Command fan-outs of the controller and reconcile workflows: documents to many instances
in one step (each command with its own parameters), and where every invocation stands from one
ListCommandInvocations."""

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from vsa_core.controllers.aws_context import ControllerContext
from vsa_core.controllers.steps import (
    Commands,
    Connect,
    HostTarget,
)

# SendCommand calls in flight at once in the connect step (the API's own rate limits, not this,
# bound a large fleet; the clients retry throttling with backoff)
FANOUT = 8
RUNNING = ("Pending", "InProgress", "Delayed", "Cancelling")
# InvokedAfter compares with SSM's clock, not the Lambda's: look a little further back (the
# command ids pick ours out of whatever else the window holds)
CLOCK_MARGIN = timedelta(minutes=5)


def connect(ctx: ControllerContext, request: Connect) -> dict[str, Any]:
    """The document to every host at once, one SendCommand per host (each carries its own
    host NQN), sent side by side; answers the command ids the ``commands`` step follows, and
    since when to look for them. Re-sending after a failed step is harmless: connect-path is
    idempotent."""
    since = datetime.now(UTC) - CLOCK_MARGIN

    def send(host: HostTarget) -> dict[str, str]:
        answer = ctx.ssm.send_command(
            DocumentName=request.document,
            InstanceIds=[host.instance_id],
            Comment=request.comment,
            TimeoutSeconds=request.timeout_seconds,
            # each host its own NQN and its own key secret (read on the host: never a key here)
            Parameters={
                **request.parameters,
                "HostNqn": [host.host_nqn],
                "KeysSecretId": [host.keys_secret_id],
            },
        )
        return {"instanceId": host.instance_id, "commandId": answer["Command"]["CommandId"]}

    with ThreadPoolExecutor(max_workers=min(FANOUT, len(request.hosts))) as pool:
        commands = list(pool.map(send, request.hosts))
    return {"document": request.document, "since": since.isoformat(), "commands": commands}


def commands(ctx: ControllerContext, request: Commands) -> dict[str, Any]:
    """Where every host's invocation stands (``invocation_states``)."""
    wanted = {(c.command_id, c.instance_id) for c in request.commands}
    return invocation_states(ctx.ssm, request.document, request.since, wanted)


def send(ssm: Any, invocations: Sequence[Mapping[str, Any]], timeout_seconds: int) -> dict[str, Any]:
    """SendCommand for each invocation (``{document, instanceId, parameters, comment}``), side
    by side; answers each command's id and instance, and since when to look for them."""
    since = datetime.now(UTC) - CLOCK_MARGIN

    def one(invocation: Mapping[str, Any]) -> dict[str, Any]:
        answer = ssm.send_command(
            DocumentName=invocation["document"],
            InstanceIds=[invocation["instanceId"]],
            Comment=invocation.get("comment", ""),
            TimeoutSeconds=timeout_seconds,
            Parameters={k: [v] for k, v in invocation["parameters"].items()},
        )
        return {"commandId": answer["Command"]["CommandId"], "instanceId": invocation["instanceId"]}

    sent: list[dict[str, Any]] = []
    if invocations:
        with ThreadPoolExecutor(max_workers=min(FANOUT, len(invocations))) as pool:
            sent = list(pool.map(one, invocations))
    return {"since": since.isoformat(), "commands": sent}


def invocation_states(
    ssm: Any, document: str, since: datetime, wanted: set[tuple[str, str]]
) -> dict[str, Any]:
    """Where every (command id, instance id) invocation stands, from one ListCommandInvocations
    (the document's invocations since the commands were sent; one page holds 50) however many
    there are: ``done`` once all succeeded; ``failed`` lists any that ended otherwise (status
    and the tail of the script's output, to say why); ``running`` the rest, including any not
    visible yet. The commands' own TimeoutSeconds bound how long anything stays running."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    pages = ssm.get_paginator("list_command_invocations").paginate(
        Details=True,
        Filters=[
            {"key": "DocumentName", "value": document},
            {"key": "InvokedAfter", "value": since.strftime("%Y-%m-%dT%H:%M:%SZ")},
        ],
    )
    for page in pages:
        for invocation in page["CommandInvocations"]:
            key = (invocation["CommandId"], invocation["InstanceId"])
            if key in wanted:
                found[key] = invocation
        if len(found) == len(wanted):
            break
    states = []
    for command_id, instance_id in sorted(wanted, key=lambda k: (k[1], k[0])):
        invocation = found.get((command_id, instance_id), {"Status": "Pending"})
        plugins = invocation.get("CommandPlugins") or []
        # the tail of a failed script's output says why (the documents print the reason last)
        error = " ".join(str(p.get("Output", ""))[-300:] for p in plugins if p.get("Status") != "Success")
        states.append({"instanceId": instance_id, "status": invocation["Status"], "error": error.strip()})
    failed = [s for s in states if s["status"] not in RUNNING and s["status"] != "Success"]
    running = [s["instanceId"] for s in states if s["status"] in RUNNING]
    return {
        "done": not failed and not running,
        "failed": failed,
        "running": running,
        "succeeded": sum(s["status"] == "Success" for s in states),
        # since the commands were sent: the workflow gives up past the commands' own timeout
        # (a bound on its loop should an invocation never be listed)
        "waitedSeconds": int((datetime.now(UTC) - since - CLOCK_MARGIN).total_seconds()),
    }
