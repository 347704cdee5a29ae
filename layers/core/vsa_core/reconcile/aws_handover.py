"""DrainController's handover of a leaving controller's volumes, on AWS (``fencing:
reservations``; ``vsa_core.controllers.ownership`` decides, this module sends and records).

``handover`` computes the owners without the leaving slot and sends configure-target to the
wave's controllers: for a planned drain the leaving controller is a live giver (wave 1 with the
survivors that take nothing, wave 2 the takers); for a lost one (``fence``) every survivor runs
in one wave and each taker first preempts and aborts the lost controller's reservation key,
read from its last configure-target report. ``poll`` follows the commands; once a wave is done
it answers ``again`` for the takers' wave, or records the new owners after the last.
"""

import dataclasses
from datetime import UTC, datetime
from typing import Any

from vsa_core.controllers import aws_commands, aws_ownership, ownership
from vsa_core.errors import FencingError
from vsa_core.reconcile import plan
from vsa_core.reconcile.aws_context import ReconcileContext, observe
from vsa_core.reconcile.steps import HandOver, HandOverPoll

TIMEOUT_SECONDS = plan.COMMAND_TIMEOUT_SECONDS["export"]


def handover(ctx: ReconcileContext, request: HandOver) -> dict[str, Any]:
    observed, _ = observe(ctx, request.array_id)
    nothing = {"pending": False, "owners": None}
    if observed.spec.fencing != plan.RESERVATIONS:
        return {**nothing, "reason": "the array has no fencing: every controller serves every volume"}
    array = ctx.registry.get(request.array_id)
    survivors = tuple(c for c in observed.controllers if c.slot != request.slot)
    if not survivors or not observed.volume_ids:
        return {**nothing, "reason": "no other serving controller to take its volumes"}
    leaving = plan.Controller(request.instance_id, request.address, request.slot)
    lost_keys: dict[int, str] = {}
    runners = (*survivors, leaving)
    if request.fence:
        key = aws_ownership.reservation_key(
            ctx.ssm, request.instance_id, request.documents.configure_target, request.array_id
        )
        if key is None:
            raise FencingError(
                f"{request.instance_id} (slot {request.slot}) has no configure-target report naming its "
                "reservation key: its volumes cannot move to another controller before it is fenced"
            )
        lost_keys, runners = {request.slot: key}, survivors
    after = ownership.owners(observed.volume_ids, {c.slot for c in survivors}, array.owners)
    before = {v: s for v, s in array.owners.items() if v in after}
    order = ownership.handover(before, after, {c.slot for c in runners}, lost_keys)
    runs = order.first if request.wave == 1 else order.then
    if lost_keys:
        # every survivor fences, not only the takers the recorded owners name: owners given at a
        # bootstrap are not recorded until ReconcileArray's first handover, and a preempt of a
        # key already gone changes nothing
        runs = tuple(ownership.Run(r.slot, tuple(lost_keys.values())) for r in runs)
    wave = plan.OwnershipWave(after, request.wave, runs, request.wave == 2 or not order.then, True)
    aws_ownership.begin(ctx.dynamodb, ctx.table, request.array_id, wave.as_dict())
    names = request.documents
    documents = plan.Documents(names.configure_target, names.connect_path, names.disconnect_path)
    node = plan.NodePaths(**request.node.model_dump())
    seen = dataclasses.replace(observed, controllers=runners)
    invocations = [i.as_dict() for i in plan.commands("export", seen, documents, node, wave)]
    if not invocations:
        return {**nothing, "reason": "no controller in this wave"}
    sent = aws_commands.send(ctx.ssm, invocations, TIMEOUT_SECONDS)
    return {
        "pending": True,
        "document": names.configure_target,
        "since": sent["since"],
        "commands": sent["commands"],
        "timeoutSeconds": TIMEOUT_SECONDS,
        "owners": {**wave.as_dict(), "last": wave.last},
        "survivors": {str(c.slot): c.instance_id for c in survivors},
        "fenced": sorted(lost_keys.values()),
    }


def poll(ctx: ReconcileContext, request: HandOverPoll) -> dict[str, Any]:
    started = request.started
    wanted = set(plan.invocation_pairs(started["commands"]))
    since = datetime.fromisoformat(started["since"])
    states = aws_commands.invocation_states(ctx.ssm, started["document"], since, wanted)
    timed_out = not states["done"] and states["waitedSeconds"] >= int(started["timeoutSeconds"])
    answer = {**states, "again": False, "timedOut": timed_out}
    if not states["done"]:
        return answer
    moving = dict(started["owners"])
    if not moving["last"]:
        return {**answer, "done": False, "again": True, "wave": 2}
    under_way = {"after": {str(v): int(s) for v, s in dict(moving["after"]).items()}, "wave": moving["wave"]}
    survivors = {int(s): str(i) for s, i in dict(started["survivors"]).items()}
    recorded = aws_ownership.commit(ctx.dynamodb, ctx.table, request.array_id, under_way, survivors)
    return {**answer, "recorded": recorded, "at": datetime.now(UTC).isoformat(timespec="seconds")}
