"""Systems Manager Run Command's limits on whom one command reaches. Pure.

SendCommand takes at most 50 instance ids per call (AWS Systems Manager API Reference,
SendCommand: InstanceIds "Array Members: Minimum number of 0 items. Maximum number of 50
items." and "You can specify a maximum of 50 IDs"). An array declares any number of hosts, so a
document meant for every host is sent once per batch of at most 50: the step that gathers the
hosts answers them already batched, and the workflows send one command per batch (a Map).
"""

from collections.abc import Sequence
from itertools import batched

SEND_COMMAND_MAX_INSTANCE_IDS = 50
"""SendCommand's InstanceIds holds at most 50 items (API reference, SendCommand)."""


def instance_batches(
    instance_ids: Sequence[str], size: int = SEND_COMMAND_MAX_INSTANCE_IDS
) -> tuple[tuple[str, ...], ...]:
    """``instance_ids`` in order, in consecutive batches of at most ``size`` (≤ 50): every id in
    exactly one batch, no batch empty (none at all for no ids)."""
    if not 1 <= size <= SEND_COMMAND_MAX_INSTANCE_IDS:
        raise ValueError(f"a batch holds 1 to {SEND_COMMAND_MAX_INSTANCE_IDS} instance ids, not {size}")
    return tuple(batched(instance_ids, size, strict=False))
