"""Run Command's instance-id limit (vsa_core.controllers.batches, pure): every host fan-out is sent in
batches SendCommand accepts.

AWS Systems Manager API Reference, SendCommand
(https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html):
InstanceIds "Array Members: Minimum number of 0 items. Maximum number of 50 items."
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vsa_core.controllers.batches import SEND_COMMAND_MAX_INSTANCE_IDS, instance_batches

IDS = st.lists(st.integers(0, 10**6), unique=True, max_size=400).map(lambda ns: [f"i-{n:017x}" for n in ns])


def test_the_limit_is_the_api_references() -> None:
    assert SEND_COMMAND_MAX_INSTANCE_IDS == 50


@given(ids=IDS, size=st.integers(1, 50))
def test_batches_hold_every_id_once_in_order_and_at_most_the_limit(ids: list[str], size: int) -> None:
    # Given any number of hosts / When they are batched
    batches = instance_batches(ids, size)
    # Then the batches, joined, are the hosts in order; none is empty or over the size
    assert [i for batch in batches for i in batch] == ids
    assert all(1 <= len(batch) <= size for batch in batches)
    # and only the last batch is short: as few SendCommand calls as the limit allows
    assert len(batches) == -(-len(ids) // size)


def test_120_hosts_are_three_commands_of_50_50_and_20() -> None:
    ids = [f"i-{n:017x}" for n in range(120)]
    assert [len(b) for b in instance_batches(ids)] == [50, 50, 20]
    assert instance_batches([]) == ()


@pytest.mark.parametrize("size", [0, 51])
def test_a_batch_size_sendcommand_refuses_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="1 to 50 instance ids"):
        instance_batches(["i-00000000000000001"], size)
