"""DrainController's first step: for a leaving controller (lifecycle hook or instance lost),
its array and slot, the array's hosts in batches, and whether it is the last serving one."""

from typing import Any

from vsa_core.controllers import slots
from vsa_core.controllers.aws_context import ControllerContext
from vsa_core.controllers.steps import (
    Locate,
)
from vsa_core.errors import ArrayNotFoundError
from vsa_core.naming import slot_key


def locate(ctx: ControllerContext, request: Locate) -> dict[str, Any]:
    found = ctx.registry.find_slot(request.instance_id)
    if found is None:
        return {"found": False, "instanceId": request.instance_id}
    array_id, slot, item = found
    try:
        array = ctx.registry.get(array_id)
    except ArrayNotFoundError:
        return {"found": False, "instanceId": request.instance_id}
    ids = ctx.arrays.volume_ids(array.spec)
    last = slots.last_serving(ctx.registry.slots(array_id), request.instance_id)
    deleting = array.deleting is not None
    return {
        "found": True,
        "arrayId": array_id,
        "instanceId": request.instance_id,
        "slot": slot,
        "slotKey": slot_key(slot),
        "address": item.get("address", ""),
        "state": item.get("state", ""),
        **slots.paths(array.spec, ids).as_dict(),
        "lastServing": last,
        "deleting": deleting,
        # the last serving controller's paths are only taken away when the array goes
        "allowLastPath": "true" if deleting else "false",
        # with fencing its volumes are handed over before any host lets go of its paths (not
        # when the array goes: nothing takes them then)
        "fencing": "none" if deleting else array.spec.fencing,
    }
