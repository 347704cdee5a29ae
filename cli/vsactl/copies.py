"""``vsactl backup copies|restore-copy``: disaster recovery from the backup sets copied into a
Region.

A backup policy's copies send every completed set to other Regions (and accounts). The stack
deployed in such a Region lists the sets copied there (``GET /copies``) and restores a complete
one into a new array there (``POST /copies/{backupId}/restores``): run these commands against
the destination's stack (``--region``, ``--stack`` or ``--endpoint``), not the source's.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer
from rich.table import Table

from .backups import _cell, _client, _fail, _print, _table, out, print_restored, wait_available
from .client import CliError
from .drills import _when
from .output import Output, OutputOption, emit


def copies_table(copies: list[dict[str, Any]], array_id: str | None) -> Table:
    """The copied sets as the API lists them (newest first): each one's state and snapshots."""
    title = "backup sets copied into this Region" + (f" from array {array_id}" if array_id else "")
    table = _table(title, ["set", "array", "created", "state", "consistency", "snapshots", "label"])
    for column in table.columns:
        column.no_wrap = column.header != "label"  # ids whole, to copy into restore-copy
    for c in copies:
        snapshots = c.get("snapshots") or []
        done = sum(1 for s in snapshots if s.get("state") == "completed")
        table.add_row(
            _cell(c.get("backupId")),
            _cell(c.get("arrayId")),
            _when(c.get("createdAt")),
            _cell(c.get("state")),
            _cell(c.get("consistency")),
            f"{done}/{len(snapshots)}",
            _cell(c.get("label")),
        )
    return table


def list_copies(
    ctx: typer.Context,
    array_id: Annotated[
        str | None, typer.Option("--array", metavar="ID", help="Only the sets of this array.")
    ] = None,
    output: OutputOption = Output.table,
) -> None:
    """The backup sets copied into this Region, newest first (disaster recovery: run it against
    the destination's stack). Only a complete one restores, with backup restore-copy."""
    try:
        query = {"arrayId": array_id} if array_id else None
        answer = _client(ctx).request("GET", "/copies", query=query) or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    if not answer.get("copies"):
        of = f" of array {array_id}" if array_id else ""
        out.print(
            f"no backup sets{of} copied into this Region (a backup policy's copies send them here; "
            "run this against the destination's stack)",
            highlight=False,
            soft_wrap=True,
        )
        return
    _print([copies_table(answer["copies"], array_id)])


# Typer command: every parameter is a command-line argument or option.
def restore_copy(  # noqa: PLR0913
    ctx: typer.Context,
    backup_id: Annotated[str, typer.Argument(metavar="BACKUP", help="The copied set (backup copies).")],
    file: Annotated[
        str,
        typer.Option(
            "--filename",
            "-f",
            help="The new array's spec, as vsactl apply -f takes it (YAML or JSON; - reads stdin; "
            "`vsactl get ID -o yaml` output too). Its volumes are replaced by the restored ones.",
        ),
    ],
    key: Annotated[str | None, typer.Option("--idempotency-key", help="Repeat-safe restore.")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until every restored volume is available (EC2's waiter).")
    ] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")] = 1800,
    output: OutputOption = Output.table,
) -> None:
    """Restore a complete copied set into a new array in this Region: one io2 Multi-Attach volume
    per copied snapshot in the spec's AZ, and the array registered with them; `vsactl get NEW -o
    yaml | vsactl apply -f -` then creates its controllers."""
    from .main import load_spec  # the spec as apply reads it (main imports this module)

    try:
        client = _client(ctx)
        spec = load_spec(file)
        answer = client.request(
            "POST",
            f"/copies/{backup_id}/restores",
            body={"spec": spec},
            headers={"Idempotency-Key": key or f"vsactl-{uuid.uuid4()}"},
        )
        if wait:
            wait_available(client, [v["volumeId"] for v in answer.get("volumes", [])], timeout)
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    source = f" (array {_cell(answer.get('sourceArrayId'))})"
    new_array = (answer.get("target") or {}).get("arrayId") or spec["arrayId"]
    print_restored(answer, f"restored the copy of {backup_id}{source}", waited=wait, new_array=new_array)
