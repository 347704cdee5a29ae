"""The longest time between two lifecycle heartbeats, on every path through the controller workflows.

A lifecycle hook keeps an instance in ``Pending:Wait`` / ``Terminating:Wait`` until the action is
completed or its ``HeartbeatTimeout`` passes without a ``RecordLifecycleActionHeartbeat``; then
Auto Scaling applies the hook's default result (BootstrapController's hook: ABANDON, a controller
that was still bootstrapping is terminated; DrainController's: CONTINUE, the controller terminates
while hosts may still hold paths to it). AWS: "If you need more time, you can restart the timeout
period by recording a heartbeat" (Auto Scaling User Guide, "Amazon EC2 Auto Scaling lifecycle
hooks", and PutLifecycleHook: HeartbeatTimeout 30..7200 s; the global timeout is the smaller of
100 x HeartbeatTimeout and 48 hours).

This test walks the rendered ASL that is deployed (the template's DefinitionSubstitutions, the
deploy parameters at the values that make waits longest) as an abstract machine: it follows every
path from the hook's start (the workflow's start) and from each heartbeat, adds up the worst-case
time of every state (Wait seconds; a Task's attempts at its TimeoutSeconds plus its Retry backoffs),
and fails when the time between two heartbeats (or from the start to the first one, or from the
last one to the action's completion) can exceed the hook's HeartbeatTimeout as the core computes it
for that array. Loop bounds are read from the ASL, never written here:
- counters kept in workflow variables (``Assign``, ``States.MathAdd``, on any state or Catch) or
  by Pass states, and tested by Choice rules;
- an SSM command's status loop: a command cannot be Pending/InProgress past its SendCommand
  TimeoutSeconds (delivery) plus its document's execution timeout (``timeoutSeconds`` of the
  document's steps, in template.yaml);
- wall-clock values a Lambda step reports (WALL_CLOCK below: the value and the state it counts from).

Values live where the ASL puts them: the state data (``$.a.b``) or a variable (``$name.b``), written
by a ResultPath, a Pass state's Parameters or an ``Assign`` (whose ``$`` is the state's input for a
Pass, Wait or Choice, and an unknown result for a Task, a Map or a Catch).

A Map state (a host fan-out in batches of at most 50, SendCommand's limit) is walked as its
iterations one after another, any number of them: after each iteration the walk goes on both to
the Map's next state and into another iteration, and a Map's Catch is taken after any iteration.
Iterations that run side by side (MaxConcurrency) only add heartbeats, so this bounds them too;
the number of items (hosts / 50) is unbounded, so every iteration must record a heartbeat itself.

Assumptions (the only figures this file holds):
- a Task with no TimeoutSeconds is an aws-sdk/optimized request-response call; Step Functions
  would wait for it up to 99,999,999 s by the ASL spec, but such a call is one HTTPS request:
  we bound each attempt at SDK_ATTEMPT_SECONDS;
- backoffs are counted without jitter (FULL jitter only shortens them);
- a heartbeat or a completion that fails past its retries ends the window: the action has ended;
- the time before the workflow starts (EventBridge delivery, the starter Lambda) is not counted.
"""

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_statemachine_definitions import PLACEHOLDER, load_template
from tests.specs import BASE
from vsa_core.arrays.plan import bootstrap_heartbeat_seconds, drain_heartbeat_seconds
from vsa_core.arrays.spec import ArraySpec

ROOT = Path(__file__).resolve().parents[2]

SDK_ATTEMPT_SECONDS = 60
"""Per attempt of a Task without TimeoutSeconds (botocore's default read timeout is 60 s)."""

DEFAULT_DOCUMENT_TIMEOUT = 3600
"""aws:runShellScript's timeoutSeconds when a document step gives none (SSM documents reference)."""

WALL_CLOCK = {"$connect.waitedSeconds": "ConnectPaths"}
"""Values a Lambda step reports as wall-clock seconds since a state ran: task_controller's
``commands`` step reports ``waitedSeconds`` since the connect step sent its commands."""

GLOBAL_TIMEOUT_CAP = 48 * 3600
"""No lifecycle action outlives 48 hours (its global timeout): a longer gap is an unbounded loop."""

HEARTBEAT = ":recordLifecycleActionHeartbeat"
COMPLETE = ":completeLifecycleAction"
SEND = ":ssm:sendCommand"
LIST = ":ssm:listCommands"
RUNNING = ("Pending", "InProgress", "Cancelling")
TERMINAL = ("Success", "Failed", "TimedOut", "Cancelled")


# --- rendering ------------------------------------------------------------------------------


def _longest_parameter(parameter: dict[str, Any]) -> str:
    """The deploy parameter's value that makes waits longest: its largest allowed number."""
    pattern = re.compile(parameter["AllowedPattern"])
    allowed = [n for n in range(100_000) if pattern.fullmatch(str(n))]
    return str(max(allowed)) if allowed else str(parameter["Default"])


def _document_seconds(resource: dict[str, Any]) -> int:
    steps = resource["Properties"]["Content"]["mainSteps"]
    return sum(int(step.get("inputs", {}).get("timeoutSeconds", DEFAULT_DOCUMENT_TIMEOUT)) for step in steps)


@dataclass(frozen=True)
class Workflow:
    name: str
    states: dict[str, Any]
    start: str
    document_seconds: dict[str, int]  # rendered DocumentName -> its execution timeout


def render(state_machine: str) -> Workflow:
    template = load_template()
    props = template["Resources"][state_machine]["Properties"]
    values: dict[str, str] = {}
    documents: dict[str, int] = {}
    for key, value in props["DefinitionSubstitutions"].items():
        ref = value.get("Ref") if isinstance(value, dict) else None
        if ref in template.get("Parameters", {}) and "AllowedPattern" in template["Parameters"][ref]:
            values[key] = _longest_parameter(template["Parameters"][ref])
        elif ref in template["Resources"] and template["Resources"][ref]["Type"] == "AWS::SSM::Document":
            values[key] = f"document-{ref}"
            documents[values[key]] = _document_seconds(template["Resources"][ref])
        else:
            values[key] = f"resolved-{key}"
    text = PLACEHOLDER.sub(lambda m: values[m.group(1)], (ROOT / props["DefinitionUri"]).read_text())
    definition = json.loads(text)
    return Workflow(state_machine, flatten(definition["States"]), definition["StartAt"], documents)


def flatten(states: dict[str, Any]) -> dict[str, Any]:
    """Every state by name, those inside Map iterations too (names are unique in a workflow)."""
    found: dict[str, Any] = {}
    for name, state in states.items():
        found[name] = state
        if state.get("Type") == "Map":
            inner = flatten(state.get("ItemProcessor", state.get("Iterator", {}))["States"])
            assert not set(inner) & set(found), f"state names used twice: {set(inner) & set(found)}"
            found.update(inner)
        assert state.get("Type") != "Parallel", "Parallel states are not modelled here"
    return found


def _processor(state: dict[str, Any]) -> dict[str, Any]:
    processor: dict[str, Any] = state.get("ItemProcessor", state.get("Iterator", {}))
    return processor


def _selector(state: dict[str, Any]) -> dict[str, Any]:
    selector: dict[str, Any] = state.get("ItemSelector", state.get("Parameters", {}))
    return selector


# --- worst-case durations ------------------------------------------------------------------


def task_seconds(state: dict[str, Any]) -> int:
    """The last attempt runs to its timeout; each retried attempt before it either ran to its
    timeout too (when a retrier matches the error the timeout raises) or was the service's error
    answer (throttling, a 5xx, Lambda.ServiceException: counted at its backoff only); every
    backoff at its ceiling."""
    timeout = state.get("TimeoutSeconds")
    attempt = int(timeout if timeout is not None else SDK_ATTEMPT_SECONDS)
    total = float(attempt)
    for retrier in state.get("Retry", []):
        interval = retrier.get("IntervalSeconds", 1)
        rate = retrier.get("BackoffRate", 2.0)
        ceiling = retrier.get("MaxDelaySeconds", math.inf)
        tries = retrier.get("MaxAttempts", 3)
        times_out = timeout is not None and {"States.Timeout", "States.ALL"} & set(retrier["ErrorEquals"])
        total += sum(min(interval * rate**k, ceiling) for k in range(tries))
        total += tries * attempt if times_out else 0
    return math.ceil(total)


# --- the abstract machine --------------------------------------------------------------------

UNKNOWN = object()


@dataclass(frozen=True)
class Sent:
    """An SSM command's status: running only until its lifetime has passed."""

    at: int
    lifetime: int


@dataclass(frozen=True)
class Since:
    """A Lambda-reported wall-clock value: seconds since ``at``."""

    at: int


@dataclass
class Walk:
    """A path's position: the state, the time since the hook started and since its last heartbeat,
    the values the ASL makes known, the states taken since the last heartbeat, and the Maps it is
    inside (each with the values known outside it, for when the iteration ends)."""

    state: str
    now: int
    beat: int
    env: dict[str, Any]
    trail: tuple[str, ...] = field(default=())
    frames: tuple[tuple[str, dict[str, Any]], ...] = field(default=())


END = "(end)"
"""Where a state with ``End`` leads: the workflow's end, or its iteration's inside a Map."""


def _get(env: dict[str, Any], path: str) -> Any:
    return env.get(path, UNKNOWN)


def _forget(env: dict[str, Any], path: str) -> None:
    for key in [k for k in env if k == path or k.startswith(path + ".") or k.startswith(path + "[")]:
        del env[key]


PATH = r"\$[.\w]+"
"""A reference: ``$.a.b`` (the state data) or ``$name.b`` (a variable)."""


def _ref(path: str, env: dict[str, Any], data: bool) -> Any:
    """A path's known value; the state data's only when ``$`` is known (``data``)."""
    return UNKNOWN if path.startswith("$.") and not data else _get(env, path)


def _value(expr: Any, env: dict[str, Any], data: bool = True) -> Any:
    """A Parameters or Assign value: literals, a copied path, States.MathAdd of a known number,
    StringToJson of a literal."""
    if not isinstance(expr, str):
        return expr
    if re.fullmatch(PATH, expr):
        return _ref(expr, env, data)
    add = re.fullmatch(rf"States\.MathAdd\(({PATH}),\s*(-?\d+)\)", expr)
    if add:
        base = _ref(add.group(1), env, data)
        return UNKNOWN if base is UNKNOWN else base + int(add.group(2))
    to_json = re.fullmatch(r"States\.StringToJson\('([^']*)'\)", expr)
    if to_json:
        return json.loads(to_json.group(1))
    return UNKNOWN


def _assign(env: dict[str, Any], result_path: str | None, parameters: Any) -> dict[str, Any]:
    """The env after a Pass state writes ``parameters`` at ``result_path``."""
    new = dict(env)
    target = result_path if result_path is not None else "$"
    if target == "$":
        new = {k: v for k, v in new.items() if not k.startswith("$.")}
    else:
        _forget(new, target)

    def put(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key.endswith(".$"):
                    result = _value(value, env)
                    if result is not UNKNOWN:
                        new[f"{prefix}.{key[:-2]}"] = result
                else:
                    put(f"{prefix}.{key}", value)
        elif isinstance(node, (int, float, str, bool)):
            new[prefix] = node

    put(target, parameters)
    return new


def _put_variables(
    env: dict[str, Any], assign: dict[str, Any] | None, before: dict[str, Any], data: bool
) -> None:
    """``env`` after an ``Assign``: every value is computed from the variables as they were before
    the state (``before``), and from the state data when its ``$`` is the state's input (``data``)."""
    for key, value in (assign or {}).items():
        name = "$" + key.removesuffix(".$")
        _forget(env, name)
        _put(env, name, key.endswith(".$"), value, before, data)


def _put(
    env: dict[str, Any], path: str, expression: bool, node: Any, before: dict[str, Any], data: bool
) -> None:
    if expression:
        known = _value(node, before, data)
        if known is not UNKNOWN:
            env[path] = known
    elif isinstance(node, dict):
        for key, value in node.items():
            _put(env, f"{path}.{key.removesuffix('.$')}", key.endswith(".$"), value, before, data)
    elif isinstance(node, (int, float, str, bool)):
        env[path] = node


def _truth(rule: dict[str, Any], env: dict[str, Any], now: int) -> set[bool]:
    """The values a Choice rule can take (both when the ASL does not know)."""
    if "And" in rule:
        parts = [_truth(r, env, now) for r in rule["And"]]
        return {all(c) for c in _product(parts)}
    if "Or" in rule:
        parts = [_truth(r, env, now) for r in rule["Or"]]
        return {any(c) for c in _product(parts)}
    if "Not" in rule:
        return {not v for v in _truth(rule["Not"], env, now)}
    value = _get(env, rule["Variable"])
    if isinstance(value, Sent):
        running = now - value.at < value.lifetime
        statuses = RUNNING + TERMINAL if running else TERMINAL
        if "StringEquals" in rule:
            return {s == rule["StringEquals"] for s in statuses}
        return {True, False}
    if isinstance(value, Since):
        value = now - value.at
    if value is UNKNOWN:
        return {True, False}
    for op, compare in (
        ("NumericLessThan", lambda a, b: a < b),
        ("NumericLessThanEquals", lambda a, b: a <= b),
        ("NumericGreaterThan", lambda a, b: a > b),
        ("NumericGreaterThanEquals", lambda a, b: a >= b),
        ("NumericEquals", lambda a, b: a == b),
        ("BooleanEquals", lambda a, b: a == b),
        ("StringEquals", lambda a, b: a == b),
    ):
        if op in rule:
            return {compare(value, rule[op])}
        if op + "Path" in rule:
            other = _get(env, rule[op + "Path"])
            return {True, False} if other is UNKNOWN else {compare(value, other)}
    return {True, False}


def _product(parts: list[set[bool]]) -> list[tuple[bool, ...]]:
    combos: list[tuple[bool, ...]] = [()]
    for part in parts:
        combos = [(*c, v) for c in combos for v in part]
    return combos


def _reads(rule: dict[str, Any]) -> set[str]:
    found = set()
    for key, value in rule.items():
        if key in ("And", "Or"):
            found |= set().union(*(_reads(r) for r in value))
        elif key == "Not":
            found |= _reads(value)
        elif key == "Variable" or (key.endswith("Path") and isinstance(value, str)):
            found.add(value)
    return found


def _sources(expr: Any) -> set[str]:
    return set(re.findall(r"(?<!\$)\$[.\w][\w.\-@]*", expr)) if isinstance(expr, str) else set()


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith((root + ".", root + "[", root + "@"))


def _successors(state: dict[str, Any]) -> list[str]:
    return [n for n, _ in _transitions(state)]


def _transitions(state: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """(next state, the Assign taken on the way) of every way out of a state."""
    found: list[tuple[str, dict[str, Any] | None]] = []
    if "Next" in state:
        found.append((state["Next"], state.get("Assign")))
    if "Default" in state:
        found.append((state["Default"], state.get("Assign")))
    if state.get("Type") == "Map":
        found.append((_processor(state)["StartAt"], None))
    found += [(r["Next"], r.get("Assign")) for r in state.get("Choices", [])]
    found += [(c["Next"], c.get("Assign")) for c in state.get("Catch", [])]
    return found


def _through(after: set[str], assign: dict[str, Any] | None) -> set[str]:
    """What must be known before an ``Assign`` for ``after`` to be known after it."""
    kept, uses = set(after), set()
    for key, value in (assign or {}).items():
        name = "$" + key.removesuffix(".$")
        hit = {v for v in after if _under(v, name)}
        kept -= hit
        if hit:
            uses |= set().union(set(), *(_sources(v) for _, v in _flatten("", {key: value})))
    return kept | uses


def live_values(states: dict[str, Any]) -> dict[str, set[str]]:
    """Per state, the known values a later Choice (or a Pass or Assign feeding one) can still read:
    a path's position is the same whatever dead counters it carries, which keeps the walk small."""
    live: dict[str, set[str]] = {name: set() for name in states}
    changed = True
    while changed:
        changed = False
        for name, state in states.items():
            kind = state.get("Type")
            # a Pass or Wait assigns from its input on its one way out: handled with its ResultPath below
            assigns_here = kind in ("Pass", "Wait")
            out: set[str] = set().union(
                set(),
                *(
                    live.get(n, set()) if assigns_here else _through(live.get(n, set()), assign)
                    for n, assign in _transitions(state)
                ),
            )
            if kind == "Choice":
                new = out | set().union(*(_reads(r) for r in state["Choices"]))
            elif kind in ("Pass", "Wait"):
                target = state.get("ResultPath", "$") if kind == "Pass" else None
                if target == "$":
                    written = {v for v in out if v.startswith("$.")}
                else:
                    written = {v for v in out if target is not None and _under(v, target)}
                uses: set[str] = set()
                for key, value in _flatten(target or "$", state.get("Parameters", {})):
                    if key in out:
                        uses |= _sources(value)
                new = _through(out - written, state.get("Assign")) | uses
            elif kind == "Map":
                new = out | set().union(set(), *(_sources(v) for _, v in _flatten("$", _selector(state))))
            else:
                new = set(out)
                if kind == "Task":
                    command = state.get("Parameters", {}).get("CommandId.$")
                    if isinstance(command, str):
                        new.add(command + "@sent")
                    for variable, origin in WALL_CLOCK.items():
                        if any(_under(variable, w) for w in _written(state)):
                            new.add(f"@since.{origin}")
            if new != live[name]:
                live[name], changed = new, True
    return live


def _written(state: dict[str, Any]) -> list[str]:
    """Where a Task's whole result lands: its ResultPath, and the variables assigned ``$``."""
    found = [] if state.get("ResultPath", "$") is None else [state.get("ResultPath", "$")]
    found += ["$" + k.removesuffix(".$") for k, v in (state.get("Assign") or {}).items() if v == "$"]
    return found


def _locations(state: dict[str, Any], selected: str) -> list[str]:
    """Where a Task puts the field ``selected`` of its result (e.g. ``$.Command.CommandId``): a
    ResultSelector entry at its ResultPath, or a variable (or a variable's field) of its Assign."""
    found = []
    result_path = state.get("ResultPath", "$")
    for key, value in state.get("ResultSelector", {}).items():
        if value == selected and result_path is not None:
            found.append(f"{result_path}.{key.removesuffix('.$')}")
    found += [path for path, value in _flatten("", state.get("Assign") or {}) if value == selected]
    return [path if path.startswith("$") else "$" + path.lstrip(".") for path in found]


def _flatten(prefix: str, node: Any) -> list[tuple[str, Any]]:
    if not isinstance(node, dict):
        return [(prefix, node)]
    found: list[tuple[str, Any]] = []
    for key, value in node.items():
        found += _flatten(f"{prefix}.{key[:-2] if key.endswith('.$') else key}", value)
    return found


def collapse(trail: tuple[str, ...]) -> str:
    """A path with its loops written once: ``(Wait -> Poll) x90``."""
    out: list[str] = []
    i = 0
    while i < len(trail):
        for width in range(1, 9):
            chunk = trail[i : i + width]
            times = 1
            while tuple(trail[i + times * width : i + (times + 1) * width]) == chunk:
                times += 1
            if times > 1:
                out.append(f"({' -> '.join(chunk)}) x{times}")
                i += times * width
                break
        else:
            out.append(trail[i])
            i += 1
    return " -> ".join(out)


@dataclass(frozen=True)
class Gap:
    seconds: int
    trail: tuple[str, ...]


def longest_gap(workflow: Workflow, event: dict[str, Any]) -> Gap:
    """The longest time between two heartbeats (or the start, or the action's completion) on any
    path; paths where the ASL's own counters or SSM command lifetimes end a loop are cut there."""
    states = workflow.states
    live = live_values(states)
    worst = Gap(0, ())
    best: dict[tuple[Any, ...], int] = {}
    todo = [Walk(workflow.start, 0, 0, {"$.detail-type": event["detail-type"]}, (workflow.start,))]
    while todo:
        walk = todo.pop()
        gap = walk.now - walk.beat
        if gap > worst.seconds:
            worst = Gap(gap, walk.trail)
        if gap > GLOBAL_TIMEOUT_CAP:
            break  # a loop the ASL does not bound: past any hook's global timeout
        alive = {k: v for k, v in walk.env.items() if k in live.get(walk.state, ())}
        known = tuple(sorted((k, repr(v)) for k, v in alive.items() if not isinstance(v, Sent | Since)))
        timers = tuple(sorted((k, v.at - walk.now) for k, v in alive.items() if isinstance(v, Sent | Since)))
        frames = tuple(
            (name, _fingerprint({k: v for k, v in outer.items() if k in live.get(name, ())}, walk.now))
            for name, outer in walk.frames
        )
        key = (walk.state, known, timers, frames)
        if best.get(key, -1) >= gap:
            continue
        best[key] = gap
        state = states.get(walk.state, {})  # "(action completed)", "(action ended)": the window has ended
        todo.extend(_steps(workflow, walk, state))
    return worst


def _fingerprint(env: dict[str, Any], now: int) -> tuple[Any, ...]:
    return tuple(
        sorted((k, repr(v.at - now) if isinstance(v, Sent | Since) else repr(v)) for k, v in env.items())
    )


def _next(
    walk: Walk,
    name: str,
    now: int,
    env: dict[str, Any],
    *,
    beat: bool = False,
    frames: tuple[tuple[str, dict[str, Any]], ...] | None = None,
) -> Walk:
    trail = (name,) if beat else (*walk.trail, name)
    return Walk(name, now, now if beat else walk.beat, env, trail, walk.frames if frames is None else frames)


def _iteration(walk: Walk, map_name: str, state: dict[str, Any], outer: dict[str, Any]) -> Walk:
    """Into an iteration of the Map ``map_name``: its input is the ItemSelector over ``outer``."""
    env = _assign(outer, "$", _selector(state))
    return _next(walk, _processor(state)["StartAt"], walk.now, env, frames=(*walk.frames, (map_name, outer)))


def _out_of_map(
    walk: Walk, map_name: str, state: dict[str, Any], outer: dict[str, Any], *, failed: bool
) -> list[Walk]:
    """After an iteration: the Map's next state (its results at ResultPath), another iteration, or
    (any iteration having failed) the Map's catchers."""
    rest = walk.frames[:-1]
    steps = []
    if not failed:
        env = dict(outer)
        if state.get("ResultPath", "$") is not None:
            _forget(env, state.get("ResultPath", "$"))
        _put_variables(env, state.get("Assign"), outer, data=False)
        steps.append(_next(walk, state.get("Next", END), walk.now, env, frames=rest))
        steps.append(_iteration(_next(walk, map_name, walk.now, outer, frames=rest), map_name, state, outer))
    steps += [_next(walk, n, walk.now, env, frames=rest) for n, env in _caught(state, outer)]
    return steps


def _caught(state: dict[str, Any], before: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(catcher's next state, the values known there) of every Catch of a state."""
    found = []
    for catch in state.get("Catch", []):
        caught = dict(before)
        if catch.get("ResultPath", "$") is not None:
            _forget(caught, catch.get("ResultPath", "$"))
        _put_variables(caught, catch.get("Assign"), before, data=False)
        found.append((catch["Next"], caught))
    return found


def _steps(workflow: Workflow, walk: Walk, state: dict[str, Any]) -> list[Walk]:
    kind = state.get("Type")
    if walk.state == END or kind in ("Succeed", "Fail"):
        if not walk.frames:
            return []  # the workflow has ended
        map_name, outer = walk.frames[-1]
        return _out_of_map(walk, map_name, workflow.states[map_name], outer, failed=kind == "Fail")
    if kind is None:
        return []  # "(action completed)", "(action ended)": the window has ended
    if state.get("OutputPath", "$") != "$" and not state.get("End"):
        raise AssertionError(f"{workflow.name}.{walk.state}: an OutputPath is not modelled here")
    if kind == "Map":
        caught = [_next(walk, n, walk.now, env) for n, env in _caught(state, walk.env)]  # e.g. no list
        return [_iteration(walk, walk.state, state, walk.env), *caught]
    if kind == "Pass":
        result = state.get("Parameters", state.get("Result"))
        env = _assign(walk.env, state.get("ResultPath", "$"), result)
        _put_variables(env, state.get("Assign"), walk.env, data=result is None)
        return [_next(walk, state.get("Next", END), walk.now, env)]
    if kind == "Wait":
        env = dict(walk.env)
        _put_variables(env, state.get("Assign"), walk.env, data=True)
        return [_next(walk, state.get("Next", END), walk.now + int(state["Seconds"]), env)]
    if kind == "Choice":
        taken: list[Walk] = []
        for rule in state["Choices"]:
            values = _truth(rule, walk.env, walk.now)
            if True in values:
                env = dict(walk.env)
                _put_variables(env, rule.get("Assign"), walk.env, data=True)
                taken.append(_next(walk, rule["Next"], walk.now, env))
            if False not in values:
                return taken
        env = dict(walk.env)
        _put_variables(env, state.get("Assign"), walk.env, data=True)
        return [*taken, _next(walk, state["Default"], walk.now, env)]
    if kind == "Task":
        end = walk.now + task_seconds(state)
        resource = state["Resource"]
        env = dict(walk.env)
        result_path = state.get("ResultPath", "$")
        if result_path is not None:
            _forget(env, result_path)
        _put_variables(env, state.get("Assign"), walk.env, data=False)
        if resource.endswith(SEND):
            lifetime = int(state["Parameters"].get("TimeoutSeconds", 3600))
            lifetime += workflow.document_seconds[state["Parameters"]["DocumentName"]]
            for location in _locations(state, "$.Command.CommandId"):
                env[f"{location}@sent"] = Sent(end, lifetime)
        if resource.endswith(LIST):
            command = state["Parameters"]["CommandId.$"]
            sent = walk.env.get(f"{command}@sent")
            if sent is not None:
                for location in _locations(state, "$.Commands[0].Status"):
                    env[location] = sent
                env[f"{command}@sent"] = sent
        for variable, origin in WALL_CLOCK.items():
            started = walk.env.get(f"@since.{origin}")
            if started is not None and any(_under(variable, w) for w in _written(state)):
                env[variable] = started
        if walk.state in WALL_CLOCK.values():
            env[f"@since.{walk.state}"] = Since(end)
        steps: list[Walk] = []
        if resource.endswith(COMPLETE):
            steps.append(_next(walk, "(action completed)", end, env))  # the window ends here
        elif resource.endswith(HEARTBEAT):
            steps.append(_next(walk, state.get("Next", END), end, env, beat=True))
        else:
            steps.append(_next(walk, state.get("Next", END), end, env))
        if resource.endswith((HEARTBEAT, COMPLETE)) and state.get("Catch"):
            # a heartbeat or completion that fails past its retries: AWS answers ValidationError
            # ("No active Lifecycle Action found") once the action has ended; nothing is left
            # to keep alive
            steps.append(_next(walk, "(action ended)", end, env))
            return steps
        failed = dict(walk.env)  # the attempt's result is unknown: nothing assigned from it
        if result_path is not None:
            _forget(failed, result_path)
        steps += [_next(walk, n, end, caught) for n, caught in _caught(state, failed)]
        return steps
    raise AssertionError(f"{workflow.name}.{walk.state}: {kind} states are not modelled here")


# --- the checks ------------------------------------------------------------------------------


def _spec(volumes: int, hosts: int) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            **BASE,
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "minControllers": 1,
            "maxControllers": 2,
            "volumes": [{"volumeId": f"vol-0a1b2c3d4e5f6{n:04d}"} for n in range(1, volumes + 1)],
            "hosts": [{"instanceId": f"i-0a1b2c3d4e5f6{n:04d}"} for n in range(1, hosts + 1)],
        }
    )


def _event(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "events" / "autoscaling" / name).read_text())


SMALLEST = _spec(volumes=1, hosts=0)
"""The smallest array: the shortest hook timeout the core computes (the gaps do not grow with it)."""

CASES = [
    ("BootstrapControllerStateMachine", "launch_lifecycle_action.json", bootstrap_heartbeat_seconds),
    ("DrainControllerStateMachine", "terminate_lifecycle_action.json", drain_heartbeat_seconds),
]


@pytest.mark.parametrize(("state_machine", "event", "timeout"), CASES, ids=[c[0] for c in CASES])
def test_heartbeats_keep_the_lifecycle_action_alive(state_machine: str, event: str, timeout: Any) -> None:
    # Given the deployed workflow and the hook timeout the core gives the smallest array
    workflow = render(state_machine)
    heartbeat_timeout = timeout(SMALLEST)
    # When the longest time between two heartbeats on any path is computed
    gap = longest_gap(workflow, _event(event))
    # Then the hook never times out while the workflow is still working
    assert gap.seconds <= heartbeat_timeout, (
        f"{state_machine}: up to {gap.seconds} s without a lifecycle heartbeat, the hook's HeartbeatTimeout "
        f"is {heartbeat_timeout} s; path: {collapse(gap.trail)}"
    )


_COUNTED_IN_THE_STATE_DATA: dict[str, Any] = {
    "Init": {"Type": "Pass", "Parameters": {"n": 0}, "ResultPath": "$.polls", "Next": "Beat"},
    "Done?": {
        "Type": "Choice",
        "Choices": [{"Variable": "$.polls.n", "NumericGreaterThanEquals": 100, "Next": "End"}],
        "Default": "Wait",
    },
    "Wait": {"Type": "Wait", "Seconds": 10, "Next": "Count"},
    "Count": {
        "Type": "Pass",
        "Parameters": {"n.$": "States.MathAdd($.polls.n, 1)"},
        "ResultPath": "$.polls",
        "Next": "Done?",
    },
}
_COUNTED_IN_A_VARIABLE: dict[str, Any] = {
    "Init": {"Type": "Pass", "Assign": {"polls": 0}, "Next": "Beat"},
    "Done?": {
        "Type": "Choice",
        "Choices": [{"Variable": "$polls", "NumericGreaterThanEquals": 100, "Next": "End"}],
        "Default": "Wait",
    },
    "Wait": {
        "Type": "Wait",
        "Seconds": 10,
        "Assign": {"polls.$": "States.MathAdd($polls, 1)"},
        "Next": "Done?",
    },
}


@pytest.mark.parametrize(
    "loop", [_COUNTED_IN_THE_STATE_DATA, _COUNTED_IN_A_VARIABLE], ids=["state-data", "variable"]
)
def test_a_wait_loop_without_heartbeat_is_caught(loop: dict[str, Any]) -> None:
    # Given a workflow that polls 100 times, 10 s apart, with no heartbeat in the loop: its count
    # in the state data (a Pass adds to it), or in a variable (assigned by the Wait)
    states = {
        **loop,
        "Beat": {"Type": "Task", "Resource": f"arn{HEARTBEAT}", "ResultPath": None, "Next": "Done?"},
        "End": {"Type": "Succeed"},
    }
    workflow = Workflow("toy", states, "Init", {})
    # When its longest gap is computed / Then it is the loop's bound times its wait, from the heartbeat
    gap = longest_gap(workflow, {"detail-type": "test"})
    assert gap.seconds == 1000
    assert gap.trail[0] == "Done?"


_FOLLOWED_IN_RESULT_PATHS: dict[str, Any] = {
    "Send": {
        "Type": "Task",
        "Resource": f"arn:aws:states:::aws-sdk{SEND}",
        "Parameters": {"DocumentName": "doc", "TimeoutSeconds": 100},
        "ResultSelector": {"commandId.$": "$.Command.CommandId"},
        "ResultPath": "$.cmd",
        "TimeoutSeconds": 1,
        "Next": "Wait",
    },
    "Poll": {
        "Type": "Task",
        "Resource": f"arn:aws:states:::aws-sdk{LIST}",
        "Parameters": {"CommandId.$": "$.cmd.commandId"},
        "ResultSelector": {"status.$": "$.Commands[0].Status"},
        "ResultPath": "$.cmd.poll",
        "TimeoutSeconds": 1,
        "Next": "Done?",
    },
    "Done?": {
        "Type": "Choice",
        "Choices": [{"Variable": "$.cmd.poll.status", "StringEquals": "InProgress", "Next": "Wait"}],
        "Default": "End",
    },
}
_FOLLOWED_IN_VARIABLES: dict[str, Any] = {
    "Send": {
        "Type": "Task",
        "Resource": f"arn:aws:states:::aws-sdk{SEND}",
        "Parameters": {"DocumentName": "doc", "TimeoutSeconds": 100},
        "ResultPath": None,
        "Assign": {"commandId.$": "$.Command.CommandId"},
        "TimeoutSeconds": 1,
        "Next": "Wait",
    },
    "Poll": {
        "Type": "Task",
        "Resource": f"arn:aws:states:::aws-sdk{LIST}",
        "Parameters": {"CommandId.$": "$commandId"},
        "ResultPath": None,
        "Assign": {"command": {"status.$": "$.Commands[0].Status"}},
        "TimeoutSeconds": 1,
        "Next": "Done?",
    },
    "Done?": {
        "Type": "Choice",
        "Choices": [{"Variable": "$command.status", "StringEquals": "InProgress", "Next": "Wait"}],
        "Default": "End",
    },
}


@pytest.mark.parametrize(
    "loop", [_FOLLOWED_IN_RESULT_PATHS, _FOLLOWED_IN_VARIABLES], ids=["result-paths", "variables"]
)
def test_a_command_status_loop_is_bounded_by_the_commands_lifetime(loop: dict[str, Any]) -> None:
    # Given a SendCommand (delivery 100 s, a 50 s document) polled every 10 s until it finishes, its
    # id and status kept in the state data (ResultPath) or in variables (Assign)
    states = {
        **loop,
        "Wait": {"Type": "Wait", "Seconds": 10, "Next": "Poll"},
        "End": {"Type": "Succeed"},
    }
    workflow = Workflow("toy", states, "Send", {"doc": 50})
    # When its longest gap is computed / Then the loop ends once the command's 150 s have passed
    gap = longest_gap(workflow, {"detail-type": "test"})
    assert 150 < gap.seconds <= 1 + 150 + 11


def _toy_map(iteration: dict[str, Any], start: str) -> Workflow:
    return Workflow(
        "toy",
        {
            "Batches": {
                "Type": "Map",
                "ItemsPath": "$.batches",
                "ItemSelector": {"hosts.$": "$$.Map.Item.Value"},
                "ItemProcessor": {"StartAt": start, "States": iteration},
                "ResultPath": None,
                "Next": "Done",
            },
            "Done": {"Type": "Task", "Resource": f"arn{COMPLETE}", "TimeoutSeconds": 1, "End": True},
            **iteration,
        },
        "Batches",
        {},
    )


def test_a_map_whose_iterations_record_no_heartbeat_is_unbounded() -> None:
    # Given a Map whose every iteration takes 100 s and records no heartbeat (any number of batches)
    workflow = _toy_map({"Send": {"Type": "Wait", "Seconds": 100, "End": True}}, "Send")
    # When its longest gap is computed / Then it grows with the batches, past any hook's timeout
    assert longest_gap(workflow, {"detail-type": "test"}).seconds > GLOBAL_TIMEOUT_CAP


def test_a_map_whose_iterations_each_record_a_heartbeat_is_bounded() -> None:
    # Given the same Map with a heartbeat as each iteration starts
    iteration = {
        "Beat": {"Type": "Task", "Resource": f"arn{HEARTBEAT}", "TimeoutSeconds": 1, "Next": "Send"},
        "Send": {"Type": "Wait", "Seconds": 100, "End": True},
    }
    # When its longest gap is computed / Then it is one iteration and what follows it (the next
    # iteration's heartbeat, or the completion), however many batches there are
    gap = longest_gap(_toy_map(iteration, "Beat"), {"detail-type": "test"})
    assert gap.seconds == 101
    assert gap.trail[:2] == ("Send", "(end)")
