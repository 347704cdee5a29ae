"""``vsactl``: apply, get, list and delete Virtual Storage Arrays through the control plane's API;
simulate the scaling planner on an IOPS trace (offline).

Exit codes (``client.ExitCode``; docs/cli.md): 0 done; 1 failed (the API could not be reached or
failed, a followed workflow failed, not confirmed); 2 bad input (the command line, its file, or the
API's 400/422); 3 refused by the API (403, 409, 412, 429); 4 not found (404); 5 timed out.
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from . import __version__, copies, drills, render
from .backups import backup_app, restore
from .client import STACK_NAME, ApiClient, ApiError, CliError, ExitCode, Settings
from .output import Output, OutputOption, YesOption, confirm, emit

POLL_SECONDS = 2.0
"""How often --wait asks the API again (a GET: cheap, and API Gateway's default throttle is far)."""

app = typer.Typer(
    name="vsactl",
    help="Manage Virtual Storage Arrays through the VSA control plane's REST API (SigV4-signed requests).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion, --show-completion; and `vsactl completion SHELL`
)
out = Console(soft_wrap=False)
err = Console(stderr=True, soft_wrap=True)


app.add_typer(backup_app, name="backup")
app.command("restore")(restore)
backup_app.command("drill")(drills.start)
backup_app.command("drills")(drills.list_drills)
backup_app.command("drill-show")(drills.show)
backup_app.command("copies")(copies.list_copies)
backup_app.command("restore-copy")(copies.restore_copy)


def _print_version(value: bool) -> None:
    if value:
        print(f"vsactl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print vsactl's version and exit."
        ),
    ] = False,
    endpoint: Annotated[
        str | None,
        typer.Option(
            envvar="VSA_API_URL",
            help="The API's base URL (with its stage). Default: the stack's output ApiUrl (on the "
            "local cloud, AWS_ENDPOINT_URL at 127.0.0.1, the path-style URL of its ApiId).",
        ),
    ] = None,
    profile: Annotated[str | None, typer.Option(help="AWS profile, as for the AWS CLI.")] = None,
    region: Annotated[str | None, typer.Option(help="AWS region, as for the AWS CLI.")] = None,
    stack: Annotated[
        str, typer.Option(envvar="VSA_STACK_NAME", help="The control plane's CloudFormation stack.")
    ] = STACK_NAME,
) -> None:
    ctx.obj = Settings(endpoint=endpoint, profile=profile, region=region, stack=stack)


def _client(ctx: typer.Context) -> ApiClient:
    settings = ctx.obj if isinstance(ctx.obj, Settings) else Settings()
    return ApiClient(settings)


def _fail(e: CliError) -> typer.Exit:
    if isinstance(e, ApiError):
        first, _, rest = e.message.partition("\n")
        err.print(f"[bold red]error[/] (HTTP {e.status}): {first}", markup=True, highlight=False)
        if rest:
            err.print(rest, markup=False, highlight=False)
        if e.status == 403:
            err.print("hint: the API authorizes with AWS IAM: check the credentials, profile and region.")
        if e.attempts > 1:
            why = "its Idempotency-Key has it done once" if e.method == "POST" else "a read is safe to repeat"
            err.print(f"(asked {e.attempts} times: {why})")
        if e.status == 504 and e.method == "GET":
            err.print(
                "hint: API Gateway stopped waiting after 29 s each time; the API function's logs "
                "(CloudWatch Logs) name the slow AWS call."
            )
        elif e.status == 504 and e.method == "POST":
            err.print(
                "hint: API Gateway stopped waiting after 29 s each time; repeat the command with "
                f"--idempotency-key {e.key} to get the first request's answer rather than start another."
            )
        elif e.status == 504:
            err.print(
                "hint: API Gateway stopped waiting after 29 s; the request may have been done in part. "
                "`vsactl get` says 'Apply unfinished' when an apply stopped part way: apply the same "
                "spec again to finish it (an apply is idempotent)."
            )
    else:
        err.print("[bold red]error[/]: ", end="", markup=True)
        err.print(e.message, markup=False, highlight=False)
    return typer.Exit(e.exit_code)


def _read_source(source: str) -> tuple[str, str]:
    """The text of ``source`` (a path, or ``-`` for stdin) and the name errors give it."""
    if source == "-":
        return sys.stdin.read(), "<stdin>"
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8"), source
    except FileNotFoundError as e:
        raise CliError(f"{source}: no such file", ExitCode.BAD_INPUT) from e
    except IsADirectoryError as e:
        raise CliError(f"{source}: a directory, not a spec file", ExitCode.BAD_INPUT) from e
    except OSError as e:
        raise CliError(f"{source}: cannot read it: {e.strerror}", ExitCode.BAD_INPUT) from e
    except UnicodeDecodeError as e:
        raise CliError(f"{source}: not a text file (UTF-8): {e.reason}", ExitCode.BAD_INPUT) from e


def _parse_yaml(text: str, name: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        problem = " ".join(p for p in (e.context, e.problem) if p) or "invalid YAML"
        raise CliError(f"{where}: not valid YAML: {problem}", ExitCode.BAD_INPUT) from e
    except yaml.YAMLError as e:
        raise CliError(f"{name}: not valid YAML: {e}", ExitCode.BAD_INPUT) from e


def load_spec(source: str | Path) -> dict[str, Any]:
    """The array spec from a YAML (or JSON) file, or stdin for ``-``, with the file and line of
    any error. ``vsactl get ID -o yaml|json`` output is taken too: its ``spec`` is the spec (the
    live status beside it is read-only, as kubectl apply ignores an object's status)."""
    text, name = _read_source(str(source))
    spec = _parse_yaml(text, name)
    if isinstance(spec, dict) and isinstance(spec.get("spec"), dict) and "volumes" not in spec:
        spec = spec["spec"]
    if not isinstance(spec, dict):
        kind = "empty" if spec is None else f"a {type(spec).__name__}"
        raise CliError(f"{name}: expected the array spec (a mapping with arrayId, volumes…), got {kind}", 2)
    if not isinstance(spec.get("arrayId"), str) or not spec["arrayId"]:
        raise CliError(f"{name}: the spec has no arrayId: name the array with arrayId: <id>", 2)
    return spec


@app.command()
def apply(
    ctx: typer.Context,
    file: Annotated[
        str,
        typer.Option(
            "--filename",
            "-f",
            help="The array spec (YAML or JSON; - reads stdin). `vsactl get ID -o yaml` output is "
            "taken as is.",
        ),
    ],
    if_match: Annotated[
        int | None,
        typer.Option(
            "--if-match",
            "--version-check",
            help="Apply only if the array is still at this version (sent as If-Match).",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the data plane's convergence (ReconcileArray) to its end.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")] = 3600,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Show what the apply would change (AWS, the nodes); change nothing."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Remove volumes even though a host has one mounted (or cannot tell): the hosts' "
            "disconnect then fails every IO on that mount.",
        ),
    ] = False,
    delete_removed_volumes: Annotated[
        bool,
        typer.Option(
            "--delete-removed-volumes",
            help="Delete the volumes the array created that the spec no longer lists, once "
            "detached (default: kept). A volume it did not create is never deleted.",
        ),
    ] = False,
    yes: YesOption = False,
    output: OutputOption = Output.table,
) -> None:
    """Create or update the array declared in FILE and show the plan: one line per resource and
    action, the changed fields named (-o json: every value). --force and --delete-removed-volumes
    ask first (--yes does not)."""
    try:
        spec = load_spec(file)
        if (force or delete_removed_volumes) and not dry_run:
            what = " and ".join(
                w
                for w, on in (
                    ("force volumes off mounted hosts", force),
                    ("delete removed volumes", delete_removed_volumes),
                )
                if on
            )
            confirm(f"Apply {spec['arrayId']} and {what}?", yes, stdin_taken=file == "-")
        array_id = spec["arrayId"]
        headers = {"If-Match": str(if_match)} if if_match is not None else None
        query = {"dryRun": "true"} if dry_run else {}
        if force:
            query["force"] = "true"
        if delete_removed_volumes:
            query["deleteRemovedVolumes"] = "true"
        path = f"/arrays/{array_id}"
        answer = _client(ctx).request("PUT", path, body=spec, headers=headers, query=query or None) or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    changes = answer.get("changes") or []
    version = answer.get("version")
    lines = render.plan_lines(changes)
    # one line each, never wrapped (a plan is read and grepped line by line)
    if answer.get("dryRun"):
        at = f"version {version}" if version is not None else "not created yet"
        head = f"array {array_id} ({at}): dry run, nothing changed: {render.summary(changes)}"
    elif not lines:
        head = f"array {array_id} unchanged (version {version})"
    else:
        head = f"array {array_id} applied (version {version}): {render.summary(changes)}"
    forced = [f"! {line}" for line in answer.get("forced") or []]
    for line in [head, *lines, *forced, *render.reconcile_lines(answer.get("reconcile"))]:
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    if wait and answer.get("reconcile") and not answer.get("dryRun"):
        _follow_reconcile(ctx, array_id, timeout)


def _follow_reconcile(ctx: typer.Context, array_id: str, timeout: float) -> None:
    """Poll GET /arrays/{id} until the array's ReconcileArray run has ended, printing each new
    step; exit 1 if it failed (its error is printed)."""
    deadline, last = time.monotonic() + timeout, None
    while True:
        try:
            answer = _client(ctx).request("GET", f"/arrays/{array_id}") or {}
        except CliError as e:
            raise _fail(e) from e
        record = answer.get("reconcile") or {}
        shown = (record.get("state"), record.get("step"))
        if shown != last:
            err.print(f"{array_id}: {record.get('state')} ({record.get('step')})", highlight=False)
            last = shown
        if record.get("state") == "converged":
            return
        if record.get("state") in ("failed", "stopped"):  # stopped: the array is being deleted
            raise _fail(CliError(f"array {array_id} did not converge: {record.get('error')}"))
        if time.monotonic() > deadline:
            raise _fail(
                CliError(f"array {array_id} still converging after {timeout:.0f} s", ExitCode.TIMED_OUT)
            )
        time.sleep(POLL_SECONDS)


@app.command()
def get(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    output: OutputOption = Output.table,
) -> None:
    """Show an array: its spec, controllers, volumes, alarms, hosts and last scaling decisions."""
    try:
        answer = _client(ctx).request("GET", f"/arrays/{array_id}") or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    out.print(render.array_view(array_id, answer))


_SINCE = re.compile(r"(?P<count>\d+)(?P<unit>[mhd])")


def since_time(value: str, now: datetime | None = None) -> str:
    """``--since``: a time ago (``30m``, ``24h``, ``7d``) or an ISO 8601 time with its zone, as
    the ISO 8601 UTC time the API takes."""
    match = _SINCE.fullmatch(value.strip())
    if match:
        minutes = int(match["count"]) * {"m": 1, "h": 60, "d": 1440}[match["unit"]]
        at = (now or datetime.now(UTC)) - timedelta(minutes=minutes)
    else:
        try:
            at = datetime.fromisoformat(value.strip())
        except ValueError:
            at = datetime.min  # no zone: refused below
        if at.tzinfo is None:
            raise CliError(
                f"--since {value!r}: give a time ago (30m, 24h, 7d) or an ISO 8601 time with its zone "
                "(2025-01-31T08:00:00Z)",
                exit_code=2,
            )
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@app.command()
def events(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    since: Annotated[
        str | None,
        typer.Option(help="Only events since: a time ago (30m, 24h, 7d) or an ISO 8601 time with its zone."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many events, the newest.")] = 100,
    output: OutputOption = Output.table,
) -> None:
    """The array's timeline, oldest first, one line per event: scale decisions, controller
    bootstraps and drains (a lost controller too), data-plane reconciles, backups, deletion, and
    failures with their error and cause; each change a caller stored (apply, delete, rotate-keys,
    backup, restore, a deleted or pruned set) with who asked in the BY column."""
    try:
        query = {"limit": str(limit), **({"since": since_time(since)} if since else {})}
        answer = _client(ctx).request("GET", f"/arrays/{array_id}/events", query=query) or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    found = answer.get("events") or []
    if not found:
        out.print(f"array {array_id}: no events" + (f" since {since}" if since else ""), highlight=False)
    for line in render.event_lines(found):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    if answer.get("truncated"):
        err.print(f"only the newest {limit} events are shown: --limit or --since for more", highlight=False)
    for note in answer.get("incomplete") or []:
        err.print(f"note: {note}", markup=False, highlight=False)


@app.command(name="list")
def list_arrays(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """List the arrays."""
    try:
        answer = _client(ctx).request("GET", "/arrays") or {}
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    arrays = answer.get("arrays") or []
    if not arrays:
        out.print("no arrays (create one with: vsactl apply -f array.yaml)")
        return
    out.print(render.arrays_table(arrays))


@app.command(name="rotate-keys")
def rotate_keys(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the rotation (a ReconcileArray run) to its end.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")] = 3600,
    output: OutputOption = Output.table,
) -> None:
    """New DH-HMAC-CHAP keys for the array's controllers and hosts, without an IO stop: each
    controller gets them in turn, every host's path to it re-authenticates, then the next; the
    old keys are removed at the end. Asked again while one runs, the same rotation goes on."""
    try:
        answer = _client(ctx).request("POST", f"/arrays/{array_id}/rotate-keys") or {}
    except CliError as e:
        raise _fail(e) from e
    if not emit(out, answer, output):
        what = "started" if answer.get("rotation") == "started" else "under way, going on"
        out.print(f"array {array_id}: keys rotation {what}", highlight=False)
        for line in render.reconcile_lines(answer.get("reconcile")):
            out.print(line, highlight=False, markup=False, soft_wrap=True)
    if wait:
        _follow_reconcile(ctx, array_id, timeout)


@app.command()
def delete(
    ctx: typer.Context,
    array_id: Annotated[str, typer.Argument(metavar="ID", help="The array's id.")],
    delete_volumes: Annotated[
        bool, typer.Option("--delete-volumes", help="Also delete the volumes the array created.")
    ] = False,
    yes: YesOption = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until the array is gone (its DeleteArray workflow ended).")
    ] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")] = 1800,
    output: OutputOption = Output.table,
) -> None:
    """Delete an array (its controllers, alarms, schedule; its volumes with --delete-volumes).
    Asks first unless --yes."""
    what = "and the volumes it created" if delete_volumes else "(its volumes are kept)"
    try:
        confirm(f"Delete array {array_id} {what}?", yes)
        query = {"deleteVolumes": json.dumps(delete_volumes)}
        answer = _client(ctx).request("DELETE", f"/arrays/{array_id}", query=query) or {}
        if wait and "deleting" in answer:
            _follow_deletion(ctx, array_id, timeout)
    except CliError as e:
        raise _fail(e) from e
    if emit(out, answer, output):
        return
    if "deleting" in answer:  # 202: the DeleteArray workflow tears the array down
        kept = "deleting the volumes it created" if answer.get("deleteVolumes") else "keeping its volumes"
        array = answer["deleting"]
        if wait:
            out.print(f"array {array} deleted ({kept})", highlight=False)
            return
        out.print(f"array {array} is being deleted ({kept})", highlight=False)
        out.print(f"workflow {answer.get('executionArn', '?')}", highlight=False, soft_wrap=True)
        out.print(
            f"`vsactl get {array}` shows it until it is gone (or: vsactl delete --wait)", highlight=False
        )
        return
    out.print(f"array {answer.get('deleted', array_id)} deleted", highlight=False)
    if answer.get("changes"):
        out.print(render.changes_table(answer["changes"]))


def _follow_deletion(ctx: typer.Context, array_id: str, timeout: float) -> None:
    """Poll GET /arrays/{id} every 2 s until it answers 404 (gone); CliError if the deletion
    failed (its reason) or outlasts ``timeout``."""
    deadline = time.monotonic() + timeout
    client = _client(ctx)
    while True:
        try:
            answer = client.request("GET", f"/arrays/{array_id}") or {}
        except ApiError as e:
            if e.status == 404:
                return
            raise
        if answer.get("deleteFailure"):
            raise CliError(f"array {array_id} was not deleted: {answer['deleteFailure']}")
        if time.monotonic() > deadline:
            raise CliError(f"array {array_id} still being deleted after {timeout:.0f} s", ExitCode.TIMED_OUT)
        time.sleep(POLL_SECONDS)


class SimulationModel(StrEnum):
    """``vsactl simulate --model`` (``vsa_core.scaling.simulator.MODELS``)."""

    deployed = "deployed"
    alarms_rearmed = "alarms-rearmed"
    alarms = "alarms"
    every_minute = "every-minute"


@app.command()
def simulate(
    trace: Annotated[Path, typer.Option("--trace", help="IOPS per minute: CSV with the header minute,iops.")],
    spec_file: Annotated[
        Path | None,
        typer.Option(
            "--spec",
            help="The array spec (YAML) whose min/max controllers, per-controller IOPS, target and "
            "cooldowns to simulate. Default: min 2, max 16, 260,000 IOPS, 70%, cooldowns 60/180 s.",
        ),
    ] = None,
    boot_minutes: Annotated[
        int, typer.Option("--boot-minutes", min=0, help="Minutes from a scale-out to a serving controller.")
    ] = 5,
    drain_minutes: Annotated[
        int, typer.Option("--drain-minutes", min=0, help="Minutes a scaled-in controller drains (billed).")
    ] = 2,
    price_per_hour: Annotated[
        float, typer.Option("--price-per-hour", min=0.0, help="USD per controller-hour.")
    ] = 1.512,
    model: Annotated[
        SimulationModel,
        typer.Option(
            "--model",
            help="What to replay. deployed (the default): what the stack runs, the alarms re-armed after "
            "every run and the forecast floor from the trace's own history. For comparison: "
            "alarms-rearmed (no forecast floor), alarms (never re-armed), every-minute (ScaleArray "
            "every minute).",
        ),
    ] = SimulationModel.deployed,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a PNG of demand against serving capacity.")
    ] = None,
    output: OutputOption = Output.table,
) -> None:
    """Replay TRACE through the scaling planner, an oracle and static-for-peak; print the figures.

    Offline: nothing is sent to the API. The planner is the deployed one (vsa_core, installed
    with vsactl), replayed by default as the stack runs it (--model says which model ran).
    """
    from pydantic import ValidationError

    from vsa_core.arrays.spec import ArraySpec
    from vsa_core.scaling.simulator import MODELS, compare, default_spec, read_trace

    # the enum's values are MODELS' keys (a unit test checks)
    chosen = next(m for m in MODELS if m == model.value)

    try:
        try:
            text = trace.read_text(encoding="utf-8")
        except OSError as e:
            raise CliError(f"{trace}: cannot read it: {e.strerror}", exit_code=2) from e
        try:
            demand = read_trace(text)
        except ValueError as e:
            raise CliError(f"{trace}: {e}", exit_code=2) from e
        if spec_file is None:
            spec = default_spec()
        else:
            try:
                spec = ArraySpec.model_validate(load_spec(spec_file))
            except ValidationError as e:
                raise CliError(f"{spec_file}: not a valid array spec:\n{e}", exit_code=2) from e
    except CliError as e:
        raise _fail(e) from e
    comparison = compare(
        spec,
        demand,
        boot_minutes=boot_minutes,
        drain_minutes=drain_minutes,
        price_per_hour=price_per_hour,
        model=chosen,
    )
    oracle_hours = comparison.oracle.controller_hours
    figures = [
        {
            "policy": r.policy,
            "controller_hours": r.controller_hours,
            "ratio_to_oracle": r.controller_hours / oracle_hours if oracle_hours else 0.0,
            "under_provisioned_minutes": r.under_provisioned_minutes,
            "under_provisioned_share": r.under_provisioned_share,
            "average_utilisation": r.average_utilisation,
            "peak_controllers": r.peak_controllers,
            "scalings": r.scalings,
            "cost": r.cost,
        }
        for r in comparison.results
    ]
    title = (
        f"{trace.name}: {len(demand)} min, array {spec.array_id} ({spec.min_controllers}-"
        f"{spec.max_controllers} x {spec.per_controller_iops:,} IOPS at {spec.target_utilisation:.0%}), "
        f"boot {boot_minutes} min, drain {drain_minutes} min, model {chosen}"
    )
    if plot is not None:
        try:
            from .plot import write_plot

            write_plot(comparison, plot, title)
        except ModuleNotFoundError as e:  # matplotlib is an extra: pip install 'vsa-control-plane[plot]'
            raise _fail(
                CliError(f"--plot needs {e.name}: install vsactl with its plot extra ([plot])", 2)
            ) from e
    summary = {
        "trace": str(trace),
        "minutes": len(demand),
        "model": chosen,
        "modelDescription": MODELS[chosen].description,
        "results": figures,
    }
    if not emit(out, summary, output):
        wide = Console(soft_wrap=False, width=max(out.width, 110))  # nine columns of figures
        wide.print(render.simulation_table(title, figures))
        out.print(f"model {chosen}: {MODELS[chosen].description}", highlight=False)
    if plot is not None:
        err.print(f"plot written to {plot}", highlight=False)


@app.command()
def version(
    ctx: typer.Context,
    client_only: Annotated[
        bool, typer.Option("--client", help="Only vsactl's own version (asks nothing of AWS).")
    ] = False,
    output: OutputOption = Output.table,
) -> None:
    """vsactl's version and the deployed control plane's (its stack's output Version); they
    should match: a newer vsactl may send what an older stack refuses."""
    versions: dict[str, Any] = {"client": __version__}
    problem: CliError | None = None
    if not client_only:
        settings = ctx.obj if isinstance(ctx.obj, Settings) else Settings()
        try:
            versions["stack"] = settings.stack
            versions["server"] = (
                ApiClient(settings).stack_outputs().get("Version") or "unknown (no output Version)"
            )
        except CliError as e:
            problem = e
    if not emit(out, versions, output):
        out.print(f"vsactl: {versions['client']}", highlight=False)
        if "server" in versions:
            out.print(f"control plane ({versions['stack']}): {versions['server']}", highlight=False)
    if problem is not None:
        raise _fail(problem)


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


@app.command()
def completion(shell: Annotated[Shell, typer.Argument(help="bash, zsh, fish or powershell")]) -> None:
    """Print the shell completion script, as kubectl does: e.g. `source <(vsactl completion bash)`
    in ~/.bashrc, or `vsactl completion zsh > "${fpath[1]}/_vsactl"`."""
    # Typer's own script (what --show-completion prints, which needs the shell detected); the
    # function is internal to Typer, hence the pinned version in pyproject.toml.
    from typer._completion_shared import get_completion_script

    script = get_completion_script(prog_name="vsactl", complete_var="_VSACTL_COMPLETE", shell=shell.value)
    print(script)
