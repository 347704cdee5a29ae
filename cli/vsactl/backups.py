"""``vsactl backup create|list|show|delete|prune`` and ``vsactl restore``: the backups API.

``backup create --wait`` follows the set with a live progress bar (the snapshots' mean progress,
from ``GET /arrays/{id}/backups/{backupId}`` once a second) until it has completed or failed.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import botocore.exceptions
import typer
from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .client import ApiClient, CliError, ExitCode
from .output import ListOutput, ListOutputOption, Output, OutputOption, YesOption, confirm, emit

backup_app = typer.Typer(
    help="Back an array up, list, show and delete its backup sets, apply retention, prove a set "
    "restores (restore drills), restore a set copied into this Region (disaster recovery)."
)

FINAL = ("completed", "failed")
VOLUME_POLL_SECONDS = 5
"""restore --wait: EC2's volume_available waiter's own delay."""
DRAW_WIDTH = 200
"""Tables are drawn this wide at least: ids stay whole (they are copied into other commands) and
a row is as long as it needs, as kubectl's are (the terminal wraps it), never squeezed into 80
columns; only a cell longer than the room left (a message) wraps."""


class Mode(StrEnum):
    crash = "crash"
    application = "application"


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column)
    return table


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def backups_table(array_id: str, backups: list[dict[str, Any]], *, wide: bool = False) -> Table:
    """The array's sets, as the API lists them; wide: where each is copied, and the copy's state."""
    columns = ["backup", "created", "mode", "state", "consistency", "snapshots", "freeze s"]
    columns += ["locked until", "label", "message"] + (["copies"] if wide else [])
    table = _table(f"backup sets of {array_id}", columns)
    table.columns[0].no_wrap = True  # ids are copied into vsactl restore / backup show: always whole
    table.columns[0].min_width = max((len(b["backupId"]) for b in backups), default=6)
    for b in backups:
        row = [
            b["backupId"],
            _cell(b.get("createdAt")),
            _cell(b.get("mode")),
            _cell(b.get("state")),
            _cell(b.get("consistency")),
            f"{b.get('completedSnapshots', 0)}/{b.get('snapshots', 0)}",
            _cell(b.get("freezeWindowSeconds")),
            _locked(b.get("lock")),
            _cell(b.get("label")),
            _cell(b.get("message")),
        ]
        if wide:
            row.append(_copy_states(b.get("copies")))
        table.add_row(*row)
    return table


def _copy_states(copies: Any) -> str:
    """A listed set's copies (``{place: state}``) as ``eu-west-1: completed, ...``, or -."""
    if not isinstance(copies, dict) or not copies:
        return "-"
    return ", ".join(f"{place}: {state}" for place, state in copies.items())


def _place(copy: dict[str, Any]) -> str:
    """Where a copy went: its Region, or ``region/account`` when another account holds it."""
    region, account = _cell(copy.get("region")), copy.get("accountId")
    return f"{region}/{account}" if account else region


def copies_of_set(backup: dict[str, Any]) -> Table:
    """A set's copies in other Regions (accounts): each one's state, snapshots copied, failure."""
    table = _table("copies", ["destination", "state", "snapshots", "started", "completed", "failure"])
    for column in table.columns[:5]:
        column.no_wrap = True  # places and instants whole; the failure wraps
    for c in backup.get("copies") or []:
        snapshots = c.get("snapshots") or []
        done = sum(1 for s in snapshots if s.get("state") == "completed")
        # a copy that failed before any snapshot copy began lists none: count the set's
        total = len(snapshots) or len(backup.get("snapshots") or [])
        table.add_row(
            _place(c),
            _cell(c.get("state")),
            f"{done}/{total} copied",
            _cell(c.get("startedAt")),
            _cell(c.get("completedAt")),
            _cell(c.get("failure")),
        )
    return table


def _locked(lock: Any) -> str:
    """A set's EBS snapshot lock as the list shows it: its expiry and mode, or -."""
    if not isinstance(lock, dict) or not lock.get("until"):
        return "-"
    return f"{lock['until']} ({lock.get('mode', '?')})"


def _instant(epoch: Any) -> str:
    """A host's own clock reading (epoch seconds) as UTC time of day to the millisecond."""
    if not isinstance(epoch, int | float):
        return _cell(epoch)
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"


def backup_view(backup: dict[str, Any]) -> list[RenderableType]:
    """A set: its summary, its snapshots, its hosts' freeze and thaw, and its copies (if any)."""
    head = _table(f"backup {backup['backupId']}", ["field", "value"])
    for key in (
        "arrayId",
        "mode",
        "label",
        "trigger",
        "state",
        "consistency",
        "consistencyReason",
        "failure",
    ):
        head.add_row(key, _cell(backup.get(key)))
    head.add_row("createdAt", _cell(backup.get("createdAt")))
    head.add_row("controller", _cell(backup.get("controllerInstanceId")))
    head.add_row("freeze window (longest, s)", _cell(backup.get("freezeWindowSeconds")))
    head.add_row("locked until", _locked(backup.get("lock")))
    snapshots = _table("snapshots", ["volume", "snapshot", "state", "progress", "message"])
    for s in backup.get("snapshots", []):
        snapshots.add_row(
            s["volumeId"], s["snapshotId"], s["state"], f"{s['progress']}%", _cell(s.get("stateMessage"))
        )
    hosts = _table(
        "hosts (each on its own clock, UTC)", ["host", "froze", "thawed", "pause s", "watchdog", "error"]
    )
    for column in hosts.columns[:3]:
        column.no_wrap, column.min_width = True, 12  # ids and instants whole; the error column wraps
    for h in backup.get("hosts", []):
        hosts.add_row(
            h["instanceId"],
            _instant(h.get("frozeAt")),
            _instant(h.get("thawedAt")),
            _cell(h.get("windowSeconds")),
            "fired" if h.get("watchdogFired") else "-",
            _cell(h.get("error")),
        )
    parts: list[RenderableType] = [head, snapshots, hosts]
    if backup.get("copies"):
        parts.append(copies_of_set(backup))
    return parts


def follow(
    client: ApiClient, array_id: str, backup_id: str, console: Console, timeout: float
) -> dict[str, Any]:
    """Poll the set once a second with a live progress bar until it has completed or failed."""
    path = f"/arrays/{array_id}/backups/{backup_id}"
    deadline = time.monotonic() + timeout
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(backup_id, total=100, detail="requested")
        while True:
            backup: dict[str, Any] = client.request("GET", path) or {}
            snapshots = backup.get("snapshots") or []
            done = sum(s.get("progress", 0) for s in snapshots) / len(snapshots) if snapshots else 0
            ready = sum(1 for s in snapshots if s.get("state") == "completed")
            detail = (
                f"{backup.get('state')}: {ready}/{len(snapshots)} snapshots"
                if snapshots
                else backup.get("state")
            )
            bar.update(task, completed=done, detail=detail)
            if backup.get("state") in FINAL:
                if backup.get("state") == "completed":
                    bar.update(task, completed=100)
                return backup
            if time.monotonic() > deadline:
                raise CliError(
                    f"backup {backup_id} still {backup.get('state')} after {timeout:.0f} s",
                    ExitCode.TIMED_OUT,
                )
            time.sleep(1)


out = Console(soft_wrap=False)
progress = Console(stderr=True)  # a live bar on stderr: stdout stays the answer (-o json|yaml)


def _print(parts: list[RenderableType]) -> None:
    """Tables at least ``DRAW_WIDTH`` wide, any text as is."""
    draw = Console(soft_wrap=False, width=max(out.width, DRAW_WIDTH))
    for part in parts:
        if isinstance(part, Table):
            draw.print(part, highlight=False)
        else:
            out.print(part, highlight=False, soft_wrap=True)


def _client(ctx: typer.Context) -> ApiClient:
    from .main import _client as client_of  # the main app's settings (endpoint, profile, region)

    return client_of(ctx)


def _fail(e: CliError) -> typer.Exit:
    from .main import _fail as fail

    return fail(e)


@backup_app.command("create")
def create(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    mode: Annotated[Mode | None, typer.Option(help="crash or application (default: the policy's)")] = None,
    label: Annotated[str | None, typer.Option(help="A label kept on the set and its snapshots.")] = None,
    key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Repeat-safe: the same key and options give the same set."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the snapshots with a progress bar.")] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")] = 3600,
    output: OutputOption = Output.table,
) -> None:
    """Back the array up: one CreateSnapshots across every volume (application: hosts frozen first)."""
    body: dict[str, Any] = {}
    if mode is not None:
        body["mode"] = mode.value
    if label is not None:
        body["label"] = label
    client = _client(ctx)
    try:
        backup = client.request(
            "POST",
            f"/arrays/{array_id}/backups",
            body=body,
            headers={"Idempotency-Key": key or f"vsactl-{uuid.uuid4()}"},
        )
        if wait:
            backup = follow(client, array_id, backup["backupId"], progress, timeout)
    except CliError as e:
        raise _fail(e) from e
    if not emit(out, backup, output):
        _print(backup_view(backup))
    if wait and backup.get("state") == "failed":
        raise typer.Exit(1)


@backup_app.command("list")
def list_backups(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    output: ListOutputOption = ListOutput.table,
) -> None:
    """The array's backup sets, newest first; -o wide adds where each is copied and how far."""
    try:
        answer = _client(ctx).request("GET", f"/arrays/{array_id}/backups") or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        pass
    elif not answer.get("backups"):
        out.print(f"no backup sets (make one with: vsactl backup create {array_id})", highlight=False)
    elif output is ListOutput.wide:
        _print([backups_table(array_id, answer["backups"], wide=True)])
    else:
        out.print(backups_table(array_id, answer["backups"]))


@backup_app.command("show")
def show(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    backup_id: Annotated[str, typer.Argument(metavar="BACKUP", help="The backup set's id.")],
    output: OutputOption = Output.table,
) -> None:
    """One set: state, snapshots and progress, each host's freeze and thaw, the consistency and why."""
    try:
        backup = _client(ctx).request("GET", f"/arrays/{array_id}/backups/{backup_id}") or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, backup, output):
        return
    _print(backup_view(backup))


@backup_app.command("delete")
def delete(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    backup_id: Annotated[str, typer.Argument(metavar="BACKUP", help="The backup set's id.")],
    yes: YesOption = False,
    output: OutputOption = Output.table,
) -> None:
    """Delete a set and its snapshots (refused while it is in progress). Asks first unless --yes."""
    try:
        confirm(f"Delete backup {backup_id} of {array_id} and its snapshots?", yes)
        answer = _client(ctx).request("DELETE", f"/arrays/{array_id}/backups/{backup_id}") or {}
    except CliError as e:
        raise _fail(e) from e
    if not emit(out, answer, output):
        out.print(
            f"deleted {backup_id}: {len(answer.get('deletedSnapshots', []))} snapshot(s)", highlight=False
        )


@backup_app.command("prune")
def prune(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    keep: Annotated[
        int | None,
        typer.Option(min=1, max=1000, help="Completed sets to keep, at least 1 (default: the policy's)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be deleted.")] = False,
    yes: YesOption = False,
    output: OutputOption = Output.table,
) -> None:
    """Apply retention: whole sets, oldest first, never one in progress, capped per run. Shows
    the plan and asks before deleting anything unless --yes."""
    try:
        client = _client(ctx)
        query = {"keep": str(keep)} if keep is not None else None
        path = f"/arrays/{array_id}/retention"
        answer = client.request("GET", path, query=query) or {}
        doomed = [d for d in answer.get("plan", []) if d.get("action") == "delete"]
        if not dry_run and doomed:
            if output is Output.table:
                out.print(retention_table(array_id, answer, dry_run=True))
            confirm(f"Delete these {len(doomed)} backup set(s) of {array_id} and their snapshots?", yes)
            body = {"keep": keep} if keep is not None else {}
            answer = client.request("POST", path, body=body) or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    out.print(retention_table(array_id, answer, dry_run=dry_run))


def retention_table(array_id: str, answer: dict[str, Any], *, dry_run: bool) -> Table:
    title = f"retention of {array_id}: keep {answer.get('keep')}" + (" (dry run)" if dry_run else "")
    table = _table(title, ["backup", "created", "state", "action", "why"])
    for d in answer.get("plan", []):
        table.add_row(d["backupId"], d["createdAt"], d["state"], d["action"], d["reason"])
    return table


def restore(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The source array's id.")],
    backup_id: Annotated[str, typer.Argument(metavar="BACKUP", help="The backup set to restore.")],
    new_array: Annotated[
        str | None, typer.Option("--new-array", help="Register a new array with the restored volumes.")
    ] = None,
    volumes_only: Annotated[bool, typer.Option("--volumes-only", help="Only create the volumes.")] = False,
    key: Annotated[str | None, typer.Option("--idempotency-key", help="Repeat-safe restore.")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until every restored volume is available (EC2's waiter).")
    ] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")] = 1800,
    output: OutputOption = Output.table,
) -> None:
    """Create io2 Multi-Attach volumes from a backup set (never touching the source). With
    --new-array the new array is registered with them: `vsactl get NEW -o yaml | vsactl apply -f -`
    then creates its controllers."""
    if (new_array is None) == (not volumes_only):
        raise _fail(CliError("give exactly one of --new-array ID or --volumes-only", ExitCode.BAD_INPUT))
    target: dict[str, Any] = {"arrayId": new_array} if new_array else {"volumesOnly": True}
    client = _client(ctx)
    try:
        answer = client.request(
            "POST",
            f"/arrays/{array_id}/restores",
            body={"backupId": backup_id, "target": target},
            headers={"Idempotency-Key": key or f"vsactl-{uuid.uuid4()}"},
        )
        if wait:
            wait_available(client, [v["volumeId"] for v in answer.get("volumes", [])], timeout)
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    print_restored(answer, f"restored {backup_id}", waited=wait, new_array=new_array)


def print_restored(answer: dict[str, Any], what: str, *, waited: bool, new_array: str | None) -> None:
    """A restore's answer for people: each volume and the snapshot it came from, that they are
    available (after --wait), and how to give the new array its controllers."""
    table = _table(f"{what} in {answer.get('availabilityZone')}", ["source", "snapshot", "volume"])
    for v in answer.get("volumes", []):
        table.add_row(v["sourceVolumeId"], v["snapshotId"], v["volumeId"])
    out.print(table)
    if waited:
        out.print(f"{len(answer.get('volumes', []))} volume(s) available", highlight=False)
    if new_array:
        out.print(
            f"array {new_array} is registered with these volumes; create its controllers with: "
            f"vsactl get {new_array} -o yaml | vsactl apply -f -",
            highlight=False,
        )


def wait_available(client: ApiClient, volume_ids: list[str], timeout: float) -> None:
    """Wait with EC2's own ``volume_available`` waiter (every 5 s) until the volumes are available."""
    if not volume_ids:
        return
    delay = VOLUME_POLL_SECONDS
    ec2 = client.aws_client("ec2")
    try:
        ec2.get_waiter("volume_available").wait(
            VolumeIds=volume_ids,
            WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(timeout // max(delay, 1)))},
        )
    except botocore.exceptions.WaiterError as e:
        if "Max attempts exceeded" in str(e):
            raise CliError(
                f"restored volumes not all available after {timeout:.0f} s: {', '.join(volume_ids)}",
                ExitCode.TIMED_OUT,
            ) from e
        raise CliError(f"restored volumes did not become available: {e}") from e
    except botocore.exceptions.ClientError as e:
        raise CliError(f"cannot follow the restored volumes (EC2 DescribeVolumes): {e}") from e
