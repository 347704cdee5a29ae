"""Volume ownership and fenced handover (vsa_core.controllers.ownership): the split is even,
moves only what it must, and a handover never lets two controllers serve a volume nor a lost
one keep writing.

The model check at the end replays the configure-target runs a handover orders, one at a time,
against each controller's view (which group each volume's namespace is in, which group its port
serves) and asserts the invariant after every single run: no volume is optimized on two live
controllers, and a taker serves a lost owner's volume only after that owner's key is fenced.
"""

from collections import Counter

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vsa_core.arrays.aws_registry import array_key
from vsa_core.controllers import aws_ownership
from vsa_core.controllers.ownership import Handover, handover, moves, owners, owners_parameter
from vsa_core.errors import FencingError

VOLUMES = [f"vol-{i:017x}" for i in range(1, 41)]

volume_lists = st.lists(st.sampled_from(VOLUMES), min_size=0, max_size=40, unique=True)
slot_sets = st.sets(st.integers(0, 15), min_size=1, max_size=16)


@given(volume_lists, slot_sets)
def test_every_volume_has_one_serving_owner_and_the_split_is_even(volumes, slots):
    owned = owners(volumes, slots)
    assert list(owned) == volumes
    assert set(owned.values()) <= slots
    load = Counter(owned.values())
    counts = [load.get(s, 0) for s in slots]
    assert max(counts) - min(counts) <= 1


@given(volume_lists, slot_sets)
def test_the_same_inputs_give_the_same_owners_and_a_second_pass_moves_nothing(volumes, slots):
    first = owners(volumes, slots)
    assert owners(list(volumes), set(slots)) == first
    assert owners(volumes, slots, first) == first


@settings(max_examples=300)
@given(volume_lists, st.sets(st.integers(0, 15), min_size=2, max_size=16), st.data())
def test_a_lost_controller_moves_its_volumes_and_at_most_one_more_per_survivor(volumes, slots, data):
    before = owners(volumes, slots)
    lost = data.draw(st.sampled_from(sorted(slots)))
    after = owners(volumes, slots - {lost}, before)
    moved = moves(before, after)
    orphans = [v for v, s in before.items() if s == lost]
    assert {m.volume_id for m in moved} >= set(orphans)
    # an even split may need a survivor's extra volume to move too, never more than one each
    assert len(moved) <= len(orphans) + len(slots) - 1
    assert all(m.giver == lost for m in moved if m.volume_id in orphans)


@settings(max_examples=300)
@given(volume_lists, st.sets(st.integers(0, 15), min_size=1, max_size=15), st.data())
def test_a_new_controller_takes_only_its_share_and_each_volume_moves_to_it(volumes, slots, data):
    before = owners(volumes, slots)
    new = data.draw(st.sampled_from(sorted(set(range(16)) - slots)))
    after = owners(volumes, slots | {new}, before)
    moved = moves(before, after)
    assert all(m.taker == new for m in moved)
    assert len(moved) == Counter(after.values()).get(new, 0)
    assert len(moved) <= -(-len(volumes) // (len(slots) + 1))


def test_no_serving_controller_is_an_error_that_says_so_and_no_volume_needs_none():
    with pytest.raises(FencingError, match="no serving controller"):
        owners(VOLUMES[:2], set())
    assert owners([], set()) == {}


def test_the_owners_parameter_follows_the_volumes_order():
    owned = {"vol-b": 3, "vol-a": 0}
    assert owners_parameter(["vol-a", "vol-b"], owned) == "0,3"
    with pytest.raises(FencingError, match="no owner for vol-c"):
        owners_parameter(["vol-a", "vol-c"], owned)


# --- handover: the order of the configure-target runs --------------------------------------
def test_a_failover_is_one_wave_and_every_taker_fences_the_lost_key_first():
    before = {"v1": 0, "v2": 1, "v3": 2, "v4": 0}
    after = owners(list(before), {1, 2}, before)
    plan = handover(before, after, serving={1, 2}, lost_keys={0: "0xabc"})
    assert plan.then == ()
    assert {r.slot for r in plan.first} == {1, 2}
    takers = {m.taker for m in moves(before, after)}
    assert all(r.fence_keys == ("0xabc",) for r in plan.first if r.slot in takers)
    assert all(r.fence_keys == () for r in plan.first if r.slot not in takers)


def test_a_rebalance_releases_on_the_givers_before_the_takers_serve_and_fences_no_one():
    before = owners(VOLUMES[:6], {0, 1})
    after = owners(VOLUMES[:6], {0, 1, 2}, before)
    plan = handover(before, after, serving={0, 1, 2}, lost_keys={})
    assert [r.slot for r in plan.then] == [2]
    assert {r.slot for r in plan.first} == {0, 1}
    assert all(r.fence_keys == () for r in plan.first + plan.then)


def test_a_lost_owner_with_no_known_key_stops_the_handover_naming_it():
    before = {"v1": 0, "v2": 1}
    with pytest.raises(FencingError, match=r"slot\(s\) 0 own volumes.*no known reservation key"):
        handover(before, {"v1": 1, "v2": 1}, serving={1}, lost_keys={})


def test_a_swap_is_refused_it_would_serve_a_volume_twice_within_a_wave():
    with pytest.raises(FencingError, match="give and take"):
        handover({"v1": 0, "v2": 1}, {"v1": 1, "v2": 0}, serving={0, 1}, lost_keys={})


def _replay(
    before: dict[str, int], after: dict[str, int], plan: Handover, live: set[int], lost: dict[int, str]
) -> None:
    """Apply the plan's runs one by one (each run: that controller's namespaces move to the new
    owners' groups, after fencing its FenceKeys); after each, no volume may be optimized on two
    live controllers, nor on a taker while its lost owner is still registered."""
    view = {slot: dict(before) for slot in live | set(lost)}
    registered = set(lost.values())
    key_of = {key: slot for slot, key in lost.items()}

    def check() -> None:
        for volume in after:
            serving = [s for s in live if view[s][volume] == s]
            assert len(serving) <= 1, (volume, serving, view)
            lost_owner = before.get(volume)
            if serving and lost_owner in lost and lost_owner != serving[0]:
                assert lost[lost_owner] not in registered, (volume, "served before its owner was fenced")

    check()
    for wave in (plan.first, plan.then):
        for run in wave:
            for key in run.fence_keys:
                registered.discard(key)
                assert key in key_of
            view[run.slot] = dict(after)
            check()
    assert all(view[s] == after for s in live)


@settings(max_examples=400)
@given(volume_lists, st.sets(st.integers(0, 15), min_size=2, max_size=16), st.data())
def test_no_scaling_nor_failover_serves_a_volume_twice_or_before_the_fence(volumes, slots, data):
    before = owners(volumes, slots)
    kinds = ["lost", "drained"] + (["added"] if len(slots) < 16 else [])
    kind = data.draw(st.sampled_from(kinds))
    if kind == "added":
        new = data.draw(st.sampled_from(sorted(set(range(16)) - slots)))
        after = owners(volumes, slots | {new}, before)
        _replay(before, after, handover(before, after, slots | {new}, {}), slots | {new}, {})
        return
    gone = data.draw(st.sampled_from(sorted(slots)))
    after = owners(volumes, slots - {gone}, before)
    if kind == "drained":  # a planned drain: the drained controller still runs, as a giver
        _replay(before, after, handover(before, after, slots, {}), slots, {})
        return
    lost = {gone: f"0x{gone + 1:x}"}
    _replay(before, after, handover(before, after, slots - {gone}, lost), slots - {gone}, lost)


# --- the registry's record of the owners (moto DynamoDB) -----------------------------------
def test_a_handover_is_recorded_only_while_it_is_still_the_one_begun(registry_table: str) -> None:
    dynamodb = boto3.client("dynamodb")
    dynamodb.put_item(TableName=registry_table, Item={**array_key("demo"), "version": {"N": "1"}})
    mine = {"after": {"vol-a": 0, "vol-b": 1}, "wave": 1}
    # Given a drain began its handover, and another (a second drain) began one since
    aws_ownership.begin(dynamodb, registry_table, "demo", mine)
    theirs = {"after": {"vol-a": 0, "vol-b": 0}, "wave": 1}
    aws_ownership.begin(dynamodb, registry_table, "demo", theirs)
    # When the first one's runs are done, it does not overwrite what the second one is doing
    assert not aws_ownership.commit(dynamodb, registry_table, "demo", mine, {0: "i-1", 1: "i-2"})
    item = dynamodb.get_item(TableName=registry_table, Key=array_key("demo"))["Item"]
    assert "owners" not in item
    # and the second records its owners and ends the handover
    assert aws_ownership.commit(dynamodb, registry_table, "demo", theirs, {0: "i-1"})
    item = dynamodb.get_item(TableName=registry_table, Key=array_key("demo"))["Item"]
    assert item["owners"]["S"] == '{"vol-a": 0, "vol-b": 0}'
    assert "ownersHandover" not in item
    assert aws_ownership.stored_instances(dynamodb, registry_table, "demo") == {0: "i-1"}
