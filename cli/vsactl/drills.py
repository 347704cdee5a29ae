"""``vsactl backup drill|drills|drill-show``: restore drills, the proof that a backup set restores.

A drill restores a set onto throw-away volumes, attaches them to a throw-away instance, checks
every filesystem (and runs a check command, when one is given), then deletes what it made. The
API runs it (``POST /arrays/{id}/drills``); ``drill --wait`` follows it with
``GET /arrays/{id}/drills/{drillId}`` every few seconds until it has passed or failed.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from .backups import _cell, _client, _fail, _print, _table, out, progress
from .client import ApiClient, CliError, ExitCode
from .output import ListOutput, ListOutputOption, Output, OutputOption, emit

POLL_SECONDS = 5.0
"""drill --wait: a drill takes minutes (volumes from snapshots, an instance booting), so a read
every few seconds is prompt enough (restore --wait polls EC2 as often)."""
TAG = "vsa:drill"
"""The tag every volume and instance a drill makes carries, its value the drill's id."""


def duration(seconds: Any) -> str:
    """Seconds as people read them: ``2.5s``, ``37s``, ``4m05s``, ``1h02m``, ``3d04h``; ``-`` for
    none."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "-"
    if seconds < 9.95:  # a mount or a check: tenths tell them apart
        return f"{max(0.0, seconds):.1f}s"
    total = round(seconds)
    minutes, secs = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _when(value: Any) -> str:
    """An ISO 8601 UTC time to the second, ``2026-11-29 20:30:00Z`` (any other text as given)."""
    text = _cell(value)
    if text.endswith(("Z", "+00:00")) and len(text) >= 19:
        return text[:19].replace("T", " ") + "Z"
    return text


def _state(drill: dict[str, Any]) -> str:
    """The state, and while running the stage it is at: ``running (attaching)``."""
    state = _cell(drill.get("state"))
    return f"{state} ({drill['stage']})" if state == "running" and drill.get("stage") else state


def _cleaned(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _caller(by: Any) -> str:
    """Who started it: an IAM principal's ARN, or ``schedule:<name>`` (as the timeline shows it)."""
    if not isinstance(by, dict):
        return _cell(by)
    kind, arn = by.get("kind", "iam"), by.get("arn")
    return _cell(arn) if kind == "iam" else f"{kind}:{_cell(arn)}"


def drills_table(array_id: str, drills: list[dict[str, Any]], *, wide: bool) -> Table:
    """The array's drills, as the API lists them (newest first); wide: the instance and cleanup."""
    columns = ["drill", "set", "state", "rpo", "rto", "started", "message"]
    table = _table(f"restore drills of {array_id}", columns + (["instance", "cleaned up"] if wide else []))
    for column in table.columns:
        column.no_wrap = column.header != "message"  # ids whole, to copy; the message wraps
    for d in drills:
        row = [
            _cell(d.get("drillId")),
            _cell(d.get("backupId")),
            _state(d),
            duration(d.get("rpoSeconds")),
            duration(d.get("rtoSeconds")),
            _when(d.get("startedAt")),
            _cell(d.get("message")),
        ]
        if wide:
            row += [_cell(d.get("instanceId")), _cleaned(d.get("cleanedUp"))]
        table.add_row(*row)
    return table


def _head(drill: dict[str, Any]) -> Table:
    head = _table(f"drill {drill.get('drillId')}", ["field", "value"])
    rows = [
        ("array", _cell(drill.get("arrayId"))),
        ("set", _cell(drill.get("backupId"))),
        ("set created", _when(drill.get("setCreatedAt"))),
        ("trigger", _cell(drill.get("trigger"))),
        ("by", _caller(drill.get("by"))),
        ("state", _cell(drill.get("state"))),
        ("stage", _cell(drill.get("stage"))),
        ("started", _when(drill.get("startedAt"))),
        ("ended", _when(drill.get("endedAt"))),
        ("RPO (set's age at start)", duration(drill.get("rpoSeconds"))),
        ("RTO (start to checks passed)", duration(drill.get("rtoSeconds"))),
        ("instance", _cell(drill.get("instanceId"))),
        ("cleaned up", _cleaned(drill.get("cleanedUp"))),
        ("message", _cell(drill.get("message"))),
    ]
    for key, value in rows:
        head.add_row(key, value)
    return head


def _volumes(drill: dict[str, Any], checks: dict[str, Any]) -> Table:
    """Each restored volume: where it came from, and what the instance found on it."""
    found = {v.get("volumeId"): v for v in checks.get("volumes") or [] if isinstance(v, dict)}
    table = _table("volumes", ["source", "snapshot", "drill volume", "device", "found"])
    for v in drill.get("volumes") or []:
        seen = found.get(v.get("volumeId"), {})
        table.add_row(
            _cell(v.get("sourceVolumeId")),
            _cell(v.get("snapshotId")),
            _cell(v.get("volumeId")),
            _cell(seen.get("device")),
            _cell(seen.get("found")),
        )
    return table


def _filesystems(checks: dict[str, Any]) -> RenderableType:
    rows = [
        (volume, fs)
        for volume in checks.get("volumes") or []
        if isinstance(volume, dict)
        for fs in volume.get("filesystems") or []
        if isinstance(fs, dict)
    ]
    if not rows:
        return Text("filesystems: none checked", style="dim")
    table = _table(
        "filesystems", ["volume", "device", "type", "mount", "check", "mountpoint", "took", "detail"]
    )
    for volume, fs in rows:
        table.add_row(
            _cell(volume.get("volumeId")),
            _cell(fs.get("device")),
            _cell(fs.get("type")),
            _cell(fs.get("mount")),
            _cell(fs.get("check")),
            _cell(fs.get("mountpoint")),
            duration(fs.get("seconds")),
            _cell(fs.get("detail")),
        )
    return table


def _command(checks: dict[str, Any]) -> Text:
    command = checks.get("command")
    if not isinstance(command, dict):
        return Text("command: none given")
    outcome = "timed out" if command.get("timedOut") else f"exit code {_cell(command.get('exitCode'))}"
    lines = [f"command: {_cell(command.get('given'))}: {outcome} after {duration(command.get('seconds'))}"]
    output = str(command.get("output") or "").rstrip()
    lines += [f"  | {line}" for line in output.splitlines()]
    return Text("\n".join(lines))


def _checks(drill: dict[str, Any]) -> list[RenderableType]:
    checks = drill.get("checks")
    if not isinstance(checks, dict):
        return [_volumes(drill, {}), Text("checks: not run (yet)", style="dim")]
    parts: list[RenderableType] = [
        _volumes(drill, checks),
        _filesystems(checks),
        _command(checks),
        Text(f"checks: {_cell(checks.get('status'))} in {duration(checks.get('seconds'))}"),
    ]
    problems = [str(p) for p in checks.get("problems") or []]
    if problems:
        parts.append(Text("\n".join(["problems:", *(f"  - {p}" for p in problems)])))
    return parts


def cleanup_lines(drill: dict[str, Any]) -> list[str]:
    """What the drill left behind, said plainly with how to find it (its tag), or that it left
    nothing."""
    drill_id, cleaned, leftovers = drill.get("drillId"), drill.get("cleanedUp"), drill.get("leftovers") or []
    if cleaned is None and not leftovers:
        return [] if drill.get("state") == "running" else ["cleanup: not reported"]
    if cleaned and not leftovers:
        return ["cleaned up: every drill volume and the instance are gone"]
    return [
        f"NOT CLEANED UP: left behind: {', '.join(str(x) for x in leftovers) or 'unknown resources'}",
        f"each carries the tag {TAG}={drill_id}: find them with",
        f"  aws ec2 describe-volumes --filters Name=tag:{TAG},Values={drill_id}",
        f"  aws ec2 describe-instances --filters Name=tag:{TAG},Values={drill_id}",
        "and delete them (they belong to no array); they cost until then",
    ]


def drill_view(drill: dict[str, Any]) -> list[RenderableType]:
    """One drill: its fields, the volumes and what was found on them, each filesystem's mount and
    check, the command's outcome, the problems, and what it left behind."""
    lines = cleanup_lines(drill)
    tail: list[RenderableType] = [Text("\n".join(lines))] if lines else []
    return [_head(drill), *_checks(drill), *tail]


def _goes_on(array_id: str, drill_id: str) -> str:
    return f"the drill goes on: look at it with vsactl backup drill-show {array_id} {drill_id}"


def follow(client: ApiClient, array_id: str, drill_id: str, timeout: float) -> dict[str, Any]:
    """Read the drill every ``POLL_SECONDS`` until it is no longer running, printing each new
    stage on stderr; ``CliError`` (timed out) past ``timeout``."""
    path = f"/arrays/{array_id}/drills/{drill_id}"
    deadline, shown = time.monotonic() + timeout, ""
    while True:
        drill: dict[str, Any] = client.request("GET", path) or {}
        state = _state(drill)
        if state != shown:
            progress.print(f"{drill_id}: {state}", highlight=False, soft_wrap=True)
            shown = state
        if drill.get("state") != "running":
            return drill
        left = deadline - time.monotonic()
        if left <= 0:
            raise CliError(
                f"drill {drill_id} still {state} after {timeout:.0f} s; {_goes_on(array_id, drill_id)}",
                ExitCode.TIMED_OUT,
            )
        time.sleep(min(POLL_SECONDS, left))


def _started_line(array_id: str, drill: dict[str, Any]) -> str:
    the_set = drill.get("backupId") or "the newest completed set"
    line = f"drill {drill.get('drillId')} started on {array_id}: set {the_set}"
    if drill.get("rpoSeconds") is not None:
        line += f" (RPO {duration(drill.get('rpoSeconds'))})"
    return line


# Typer command: every parameter is a command-line argument or option.
def start(  # noqa: PLR0913
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    set_id: Annotated[
        str | None, typer.Option("--set", help="The backup set to restore (default: the newest completed).")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Repeat-safe: the same key gives the same drill."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the drill until it passed or failed.")] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")] = 3600,
    output: OutputOption = Output.table,
) -> None:
    """Start a restore drill: the set restored onto throw-away volumes and instance, every
    filesystem checked, then all of it deleted. --wait follows it and exits 1 if it failed."""
    client = _client(ctx)
    try:
        drill = client.request(
            "POST",
            f"/arrays/{array_id}/drills",
            body={"backupId": set_id} if set_id else {},
            headers={"Idempotency-Key": key or f"vsactl-{uuid.uuid4()}"},
        )
    except CliError as e:
        raise _fail(e) from e
    drill_id = str(drill.get("drillId"))
    if not wait:
        if not emit(out, drill, output):
            out.print(_started_line(array_id, drill), highlight=False, soft_wrap=True)
            out.print(
                f"follow it with: vsactl backup drill-show {array_id} {drill_id} (or start it with --wait)",
                highlight=False,
                soft_wrap=True,
            )
        return
    progress.print(_started_line(array_id, drill), highlight=False, soft_wrap=True)
    try:
        drill = follow(client, array_id, drill_id, timeout)
    except CliError as e:
        failure = _fail(e)
        if e.exit_code != ExitCode.TIMED_OUT:  # the timeout's own message says it
            progress.print(_goes_on(array_id, drill_id), highlight=False, soft_wrap=True)
        raise failure from e
    if not emit(out, drill, output):
        _print(drill_view(drill))
    if drill.get("state") != "passed":
        raise _fail(CliError(f"drill {drill_id} {drill.get('state')}: {_cell(drill.get('message'))}"))


def list_drills(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    output: ListOutputOption = ListOutput.table,
) -> None:
    """The array's restore drills, newest first: the set, the outcome, RPO and RTO."""
    try:
        answer = _client(ctx).request("GET", f"/arrays/{array_id}/drills") or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    if not answer.get("drills"):
        out.print(f"no restore drills (start one with: vsactl backup drill {array_id})", highlight=False)
        return
    _print([drills_table(array_id, answer["drills"], wide=output is ListOutput.wide)])


def show(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    drill_id: Annotated[str, typer.Argument(metavar="DRILL", help="The drill's id.")],
    output: OutputOption = Output.table,
) -> None:
    """One drill: its set, RPO and RTO, each volume's filesystems with their mount and check, the
    check command's outcome, the problems, and anything it left behind."""
    try:
        drill = _client(ctx).request("GET", f"/arrays/{array_id}/drills/{drill_id}") or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, drill, output):
        return
    _print(drill_view(drill))
