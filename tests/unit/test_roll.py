"""The rolling replacement's decisions (vsa_core.reconcile.roll), pure: each step from a
situation, and whole rolls simulated against a model of the group (launch → bootstrap →
serving; retire → drain → gone), any count, any bound, any order of who is outdated, checking
the invariants issue #17 asks (docs/arrays.md, *Rolling new launch settings*): the serving count
never drops below what it was (or, at io2's 16, below minControllers), at most one controller in
flight, at most 16 attachments, and the roll ends with every controller on the new settings at
the array's count."""

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT
from vsa_core.reconcile.roll import Group, LaunchSettings, Member, next_step, outdated

OLD = LaunchSettings("ami-0000000a", "r5b.xlarge")
NEW = LaunchSettings("ami-0000000b", "r5b.xlarge")


def _member(i: int, settings: LaunchSettings = OLD, state: str = "serving") -> Member:
    lifecycle = {"serving": "InService", "bootstrapping": "Pending:Wait", "draining": "Terminating:Wait"}[
        state
    ]
    return Member(
        instance_id=f"i-{i:017x}",
        lifecycle_state=lifecycle,
        image_id=str(settings.image_id),
        instance_type=str(settings.instance_type),
        slot=i,
        slot_state=state,
        launched_at=f"2026-11-25T00:{i:02d}:00+00:00",
    )


def test_nothing_outdated_is_done() -> None:
    step = next_step([_member(0, NEW), _member(1, NEW)], NEW, Group(2, 2, 2, 2))
    assert step.kind == "done"


def test_an_outdated_controller_is_replaced_by_one_more_first() -> None:
    step = next_step([_member(0), _member(1, NEW)], NEW, Group(2, 2, 2, 2))
    assert (step.kind, step.desired) == ("surge", 3)
    assert "ami-0000000a" in step.reason
    assert "ami-0000000b" in step.reason


def test_the_oldest_outdated_controller_retires_once_the_new_one_serves() -> None:
    members = [_member(3), _member(1), _member(2, NEW)]
    step = next_step(members, NEW, Group(2, 3, 3, 2))
    assert (step.kind, step.instance_id) == ("retire", members[1].instance_id)


def test_the_roll_waits_while_the_new_controller_boots() -> None:
    members = [_member(0), _member(1), _member(2, NEW, "bootstrapping")]
    step = next_step(members, NEW, Group(2, 3, 3, 2))
    assert step.kind == "wait"
    assert "bootstrapping" in step.reason


def test_an_instance_type_change_is_outdated_and_a_setting_the_template_omits_is_not() -> None:
    bigger = LaunchSettings("ami-0000000a", "r5b.2xlarge")
    assert outdated([_member(0)], bigger) == [_member(0)]
    assert outdated([_member(0)], LaunchSettings(None, None)) == []
    assert outdated([_member(0, state="draining")], bigger) == []


def test_at_the_multi_attach_limit_one_drains_first_if_min_controllers_allows() -> None:
    members = [_member(i) for i in range(MULTI_ATTACH_LIMIT)]
    step = next_step(members, NEW, Group(16, 16, 16, 15))
    assert (step.kind, step.instance_id) == ("retire", members[0].instance_id)


def test_at_the_multi_attach_limit_with_min_controllers_16_the_roll_is_refused_in_words() -> None:
    members = [_member(i) for i in range(MULTI_ATTACH_LIMIT)]
    step = next_step(members, NEW, Group(16, 16, 16, 16))
    assert step.kind == "blocked"
    assert "lower minControllers to 15" in step.reason


class _Model:
    """The group and the lifecycle hooks as the roll sees them: a surge launches a controller
    that bootstraps then serves; a retire drains then is gone (each one tick at a time)."""

    def __init__(self, count: int, stale: list[bool], max_size: int) -> None:
        self.members = [_member(i, OLD if stale[i] else NEW) for i in range(count)]
        self.desired = count
        self.max_size = max_size
        self.next_id = count
        self.attachments_peak = count

    def tick(self) -> None:
        """Every controller in flight moves one state on."""
        moved = []
        for m in self.members:
            if m.slot_state == "bootstrapping":
                moved.append(replace(m, lifecycle_state="InService", slot_state="serving"))
            elif m.slot_state == "draining":
                continue  # gone
            else:
                moved.append(m)
        self.members = moved

    def launch_to_desired(self) -> None:
        live = list(self.members)
        while len(live) < self.desired:
            m = _member(self.next_id, NEW, "bootstrapping")
            self.next_id += 1
            live.append(m)
        self.members = live
        self.attachments_peak = max(self.attachments_peak, len(self.members))


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, MULTI_ATTACH_LIMIT),
    data=st.data(),
)
def test_any_roll_keeps_the_serving_count_and_ends_on_the_new_settings(
    count: int, data: st.DataObject
) -> None:
    min_controllers = data.draw(st.integers(1, count))
    stale = data.draw(st.lists(st.booleans(), min_size=count, max_size=count))
    at_limit = count == MULTI_ATTACH_LIMIT
    if at_limit and min_controllers == count and any(stale):
        assume(False)  # refused in words: test_at_the_multi_attach_limit_with_min_controllers_16_…
    model = _Model(count, stale, max_size=data.draw(st.integers(count, MULTI_ATTACH_LIMIT)))
    floor = count - 1 if at_limit else count
    for _ in range(10 * MULTI_ATTACH_LIMIT):
        step = next_step(model.members, NEW, Group(count, model.desired, model.max_size, min_controllers))
        serving = sum(1 for m in model.members if m.serving)
        in_flight = sum(1 for m in model.members if m.in_flight)
        assert serving >= floor, (serving, step)
        assert serving >= min_controllers, (serving, step)
        assert in_flight <= 1, step
        assert model.attachments_peak <= MULTI_ATTACH_LIMIT
        if step.kind == "done":
            break
        assert step.kind != "blocked", step.reason
        if step.kind == "surge":
            assert step.desired is not None
            assert step.desired <= MULTI_ATTACH_LIMIT
            model.desired = step.desired
            model.max_size = max(model.max_size, step.desired)
            model.launch_to_desired()
        elif step.kind == "retire":
            model.members = [
                replace(m, lifecycle_state="Terminating:Wait", slot_state="draining")
                if m.instance_id == step.instance_id
                else m
                for m in model.members
            ]
            model.desired -= 1
        else:
            model.tick()
    else:
        pytest.fail("the roll did not end")
    assert model.desired == count
    assert all(m.image_id == NEW.image_id and m.serving for m in model.members)
    assert len(model.members) == count
