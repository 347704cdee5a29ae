"""Rich tables for the API's answers. Every function tolerates missing keys: the CLI shows what
the API sends and never fails on a field it does not know."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

DECISIONS_SHOWN = 5


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


SYMBOLS = {"create": "+", "delete": "-", "update": "~", "unchanged": "="}
SHORT = 24
"""A field's before and after are shown inline when both fit in this many characters (JSON);
otherwise only its name (``-o json`` has every value)."""


def _short(value: Any) -> str | None:
    text = _cell(value) if not isinstance(value, (dict, list)) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= SHORT else None


def _field(change: dict[str, Any], field: dict[str, Any]) -> str:
    name = str(field.get("field", "?"))
    after = _short(field.get("after"))
    if change.get("action") == "update" or field.get("before") is not None:
        before = _short(field.get("before"))
        return f"{name} {before} -> {after}" if before is not None and after is not None else name
    return f"{name}={after}" if after is not None else name


def plan_lines(changes: list[dict[str, Any]]) -> list[str]:
    """One line per resource and action, the changed fields named (short values inline):
    ``~ update   group/vsa-demo-controllers: MaxSize 8 -> 12``. A create names no field (all of
    them are new); unchanged resources are only counted (``summary``)."""
    lines = []
    for change in changes:
        action = str(change.get("action", "?"))
        if action == "unchanged":
            continue
        fields = change.get("fields") or []
        line = f"{SYMBOLS.get(action, '>')} {action:<10} {change.get('resource', '?')}"
        if action not in ("create", "delete") and fields:
            line += ": " + ", ".join(_field(change, f) for f in fields)
        lines.append(line)
    return lines


def summary(changes: list[dict[str, Any]]) -> str:
    """``3 to create, 1 to update, 6 unchanged`` (data-plane steps counted apart)."""
    counts: dict[str, int] = {}
    for change in changes:
        action = str(change.get("action", "?"))
        key = action if action in SYMBOLS else "node step"
        counts[key] = counts.get(key, 0) + 1
    words = {"create": "to create", "update": "to update", "delete": "to delete", "node step": "node steps"}
    parts = [f"{counts[k]} {w}" for k, w in words.items() if counts.get(k)]
    parts.append(f"{counts.get('unchanged', 0)} unchanged")
    return ", ".join(parts)


def changes_table(changes: list[dict[str, Any]]) -> Table:
    table = _table("Changes", ["Resource", "Action", "Field", "Before", "After"])
    for change in changes:
        fields = change.get("fields") or []
        resource, action = _cell(change.get("resource")), _cell(change.get("action"))
        if not fields:
            table.add_row(resource, action, "", "", "")
        for i, field in enumerate(fields):
            table.add_row(
                resource if i == 0 else "",
                action if i == 0 else "",
                _cell(field.get("field")),
                _cell(field.get("before")),
                _cell(field.get("after")),
            )
    return table


def arrays_table(arrays: list[dict[str, Any]]) -> Table:
    table = _table("Arrays", ["Array", "Version", "AZ", "Volumes", "Hosts", "Desired", "Min", "Max"])
    for a in arrays:
        table.add_row(
            _cell(a.get("arrayId")),
            _cell(a.get("version")),
            _cell(a.get("availabilityZone")),
            _cell(a.get("volumes")),
            _cell(a.get("hosts")),
            _cell(a.get("desiredControllers")),
            _cell(a.get("minControllers")),
            _cell(a.get("maxControllers")),
        )
    return table


def _spec_summary(array_id: str, answer: dict[str, Any]) -> Table:
    spec = answer.get("spec") or {}
    controllers = spec.get("controllers") or {}
    template = controllers.get("launchTemplate") or {}
    backup = spec.get("backup")
    backup_text = (
        f"{backup.get('schedule')} ({backup.get('mode', 'crash')}, keep {backup.get('retention', 7)})"
        if isinstance(backup, dict)
        else None
    )
    table = Table(title=f"Array {array_id}", title_justify="left", box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    rows: list[tuple[str, Any]] = [
        ("Version", answer.get("version")),
        ("Availability zone", spec.get("availabilityZone")),
        (
            "Controllers",
            f"desired {_cell(answer.get('desiredControllers'))}, "
            f"min {_cell(spec.get('minControllers'))}, max {_cell(spec.get('maxControllers'))}",
        ),
        (
            "Launch",
            controllers.get("instanceType")
            or template.get("launchTemplateName")
            or template.get("launchTemplateId"),
        ),
        ("Volumes declared", len(spec.get("volumes") or [])),
        ("Hosts declared", len(spec.get("hosts") or [])),
        ("Backup", backup_text),
    ]
    deleting = answer.get("deleting")
    if isinstance(deleting, dict):
        since = deleting.get("requestedAt")
        rows.append(("Deleting", f"workflow {deleting.get('executionName')} since {since}"))
    applying = answer.get("applying")
    if isinstance(applying, dict):
        label = "Awaiting apply" if applying.get("reason") == "restored" else "Apply unfinished"
        rows.append((label, str(applying.get("message"))))
    if answer.get("deleteFailure"):
        rows.append(("Delete failed", f"{answer['deleteFailure']} (delete again to retry)"))
    reconcile = answer.get("reconcile")
    if isinstance(reconcile, dict):
        state = reconcile.get("state")
        detail = f"step {reconcile.get('step')}" if state == "converging" else reconcile.get("error") or ""
        rows.append(("Data plane", f"{state} {detail} (spec v{reconcile.get('version')})".replace("  ", " ")))
    for key, value in rows:
        table.add_row(key, _cell(value))
    return table


def _rows(title: str, columns: list[tuple[str, str]], items: list[dict[str, Any]]) -> RenderableType:
    if not items:
        return Text(f"{title}: none", style="dim")
    table = _table(title, [header for header, _ in columns])
    for item in items:
        table.add_row(*(_cell(item.get(key)) for _, key in columns))
    return table


def _attachments(volume: dict[str, Any]) -> dict[str, Any]:
    attached = [a.get("instanceId", a) if isinstance(a, dict) else a for a in volume.get("attachments") or []]
    return {**volume, "attachments": attached}


def _decisions(decisions: list[Any]) -> RenderableType:
    """The API answers decisions newest first; each carries its inputs and its reason."""
    last = [d for d in decisions[:DECISIONS_SHOWN] if isinstance(d, dict)]
    if not last:
        return Text("Decisions: none", style="dim")
    table = _table(
        f"Last decisions ({len(last)} of {len(decisions)})",
        ["When", "Action", "Controllers", "Demand IOPS", "Reason"],
    )
    for d in last:
        when = str(d.get("sk", "")).split("#")[1] if str(d.get("sk", "")).count("#") >= 2 else "-"
        demand = d.get("demand_iops")
        table.add_row(
            when,
            _cell(d.get("action")),
            f"{_cell(d.get('current_controllers'))} -> {_cell(d.get('desired_controllers'))}",
            f"{demand:,.0f}" if isinstance(demand, int | float) else _cell(demand),
            _cell(d.get("reason")),
        )
    return table


def _paths(value: Any) -> Any:
    """A host's live paths as its own report counts them (older APIs sent a list of addresses)."""
    return len(value) if isinstance(value, list) else value


def _data_plane(data: Any) -> RenderableType:
    """The data plane as the nodes report it: converged, or every difference in words."""
    if not isinstance(data, dict):
        return Text("Data plane: not observed", style="dim")
    serving = data.get("servingControllers")
    differences = [d for d in data.get("differences") or [] if isinstance(d, dict)]
    if not differences:
        return Text(f"Data plane: converged ({serving} serving controllers, as every node reports)")
    lines = [f"Data plane: {len(differences)} difference(s) from the spec ({serving} serving controllers)"]
    lines += [f"  - {d.get('text', d)}" for d in differences]
    return Text("\n".join(lines))


def array_view(array_id: str, answer: dict[str, Any]) -> Group:
    status = answer.get("status") or {}
    parts: list[RenderableType] = [
        _spec_summary(array_id, answer),
        _rows(
            "Controllers",
            [
                ("Instance", "instanceId"),
                ("Slot", "slot"),
                ("Lifecycle", "lifecycleState"),
                ("Health", "healthStatus"),
                ("Private IP", "privateIp"),
                ("AZ", "availabilityZone"),
                ("Protected", "protectedFromScaleIn"),
            ],
            status.get("controllers") or [],
        ),
        _rows(
            "Volumes",
            [("Volume", "volumeId"), ("Owned", "owned"), ("State", "state"), ("Attached to", "attachments")],
            [_attachments(v) for v in status.get("volumes") or []],
        ),
        _rows(
            "Alarms",
            [("Alarm", "name"), ("State", "state"), ("Threshold", "threshold")],
            status.get("alarms") or [],
        ),
        _rows(
            "Hosts",
            [
                ("Instance", "instanceId"),
                ("Mountpoints", "mountpoints"),
                ("SSM ping", "pingStatus"),
                ("Paths", "paths"),
            ],
            [{**h, "paths": _paths(h.get("paths"))} for h in status.get("hosts") or []],
        ),
        _data_plane(status.get("dataPlane")),
        _decisions(answer.get("decisions") or []),
        _rows(
            "Last backups",
            [
                ("Backup", "backupId"),
                ("Mode", "mode"),
                ("State", "state"),
                ("Consistency", "consistency"),
                ("Message", "message"),
            ],
            list(answer.get("backups") or []),
        ),
    ]
    spaced: list[RenderableType] = []
    for part in parts:
        spaced.extend([part, Text("")])
    return Group(*spaced[:-1])


def print_json(console: Console, payload: Any) -> None:
    console.print_json(json.dumps(payload, default=str))


def simulation_table(title: str, results: list[dict[str, Any]]) -> Table:
    """One row a policy: the figures of ``vsactl simulate`` (already computed, as plain values).
    Under-provisioned: minutes whose demand exceeded the serving controllers at 100%."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    columns = [
        "Policy",
        "Ctrl-hours",
        "x oracle",
        "Under min",
        "Under %",
        "Avg util",
        "Peak",
        "Scalings",
        "Cost $",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column == "Policy" else "right", no_wrap=True)
    for r in results:
        table.add_row(
            r["policy"],
            f"{r['controller_hours']:,.1f}",
            f"{r['ratio_to_oracle']:.3f}",
            str(r["under_provisioned_minutes"]),
            f"{r['under_provisioned_share']:.2%}",
            f"{r['average_utilisation']:.1%}",
            str(r["peak_controllers"]),
            str(r["scalings"]),
            f"{r['cost']:,.2f}",
        )
    return table


def reconcile_lines(reconcile: Any) -> list[str]:
    """What an apply's answer says of the ReconcileArray run it started: the run, then each
    volume or host it will converge (none: the data plane did not change)."""
    if not isinstance(reconcile, dict):
        return []
    lines = [f"data plane converging: ReconcileArray {reconcile.get('executionName')} (vsactl get to follow)"]
    lines += [f"  - {item}" for item in reconcile.get("remaining") or []]
    return lines


def event_lines(events: list[Any]) -> list[str]:
    """One line per event of an array's timeline, oldest first: when (UTC, to the second), kind,
    outcome, who asked (the BY column, ``-`` for what the control plane did on its own; shown
    when any event has a caller), what happened, the run or set to look up, and a failure's
    error and cause (its first line: ``-o json`` has all of it)."""
    lines = []
    shown = [e for e in events if isinstance(e, dict)]
    callers = [_cell(e.get("by")) if e.get("by") else "-" for e in shown]
    width = max((len(c) for c in callers), default=0) if any(e.get("by") for e in shown) else 0
    kinds = max((len(_cell(e.get("kind"))) for e in shown), default=0)
    for event, by in zip(shown, callers, strict=True):
        when = str(event.get("at", "?"))[:19].replace("T", " ")
        kind, outcome = _cell(event.get("kind")), _cell(event.get("outcome"))
        column = f"{by:<{width}} " if width else ""
        line = f"{when}  {kind:<{max(9, kinds)}} {outcome:<10} {column}{_cell(event.get('what'))}"
        if event.get("reference"):
            line += f" [{event['reference']}]"
        if event.get("error") or event.get("cause"):
            cause = str(event.get("cause") or "").strip().splitlines()
            line += f": {event.get('error') or 'failed'}" + (f": {cause[0][:200]}" if cause else "")
        lines.append(line)
    return lines
