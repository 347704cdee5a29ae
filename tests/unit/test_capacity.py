"""Volume-aware capacity: each instance type's EBS IOPS (the table), the per-controller default
it gives the spec, and the rule that no controller is added that cannot add IOPS (the sum of
the volumes' provisioned IOPS caps what the array delivers)."""

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.specs import BASE
from vsa_core.arrays.aws_status import capacity_status
from vsa_core.arrays.capacity import (
    controllers_needed,
    deliverable_iops,
    owned_volume_iops,
    owner_controllers,
    volume_controllers,
)
from vsa_core.arrays.spec import ArraySpec
from vsa_core.instances import EBS_IOPS, default_controller_iops, ebs_iops
from vsa_core.scaling import simulator
from vsa_core.scaling.planner import PlanInput, plan


def spec(**overrides: Any) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            **BASE,
            "minControllers": 2,
            "maxControllers": 16,
            # the volumes' rule as round-robin has it (every controller serves every volume); the
            # owners' bound (the default, reservations) is shown by the tests that ask for it
            "fencing": "none",
        }
        | overrides
    )


def controllers(instance_type: str) -> dict[str, str]:
    return {"instanceType": instance_type, "imageId": "ami-0a1b2c3d4e5f60001"}


# --- the table ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "baseline", "maximum"),
    [
        # rows of AWS's "Amazon EBS-optimized instances" tables, as the module cites them
        ("r5b.24xlarge", 260_000, 260_000),
        ("r5b.metal", 260_000, 260_000),
        ("r5b.2xlarge", 21_667, 43_333),
        ("r5b.16xlarge", 173_333, 173_333),
        ("r6i.32xlarge", 160_000, 160_000),
        ("r6in.32xlarge", 350_000, 350_000),
        ("r6idn.4xlarge", 43_750, 87_500),
        ("m5.large", 3_600, 18_750),
        ("m6i.24xlarge", 120_000, 120_000),
        ("c6in.24xlarge", 262_500, 262_500),
        ("c6gn.16xlarge", 160_000, 160_000),
        ("i4i.32xlarge", 160_000, 160_000),
        ("i3en.3xlarge", 15_000, 20_000),
        ("x2idn.32xlarge", 260_000, 260_000),
        ("x2iedn.xlarge", 8_125, 65_000),
    ],
)
def test_the_table_gives_the_pages_baseline_and_maximum(instance_type: str, baseline: int, maximum: int):
    found = ebs_iops(instance_type)
    assert found is not None
    assert (found.baseline, found.maximum) == (baseline, maximum)
    # a controller serves for hours: its default is what it sustains
    assert default_controller_iops(instance_type) == baseline


@pytest.mark.parametrize("instance_type", ["r7i.48xlarge", "r5b.huge", "t3.micro", ""])
def test_a_type_the_table_does_not_list_has_no_default(instance_type: str):
    assert ebs_iops(instance_type) is None
    assert default_controller_iops(instance_type) is None


def test_every_row_sustains_at_most_its_maximum_and_the_largest_r5b_is_the_old_fixed_figure():
    assert all(0 < row.baseline <= row.maximum for row in EBS_IOPS.values())
    assert all(name.count(".") == 1 for name in EBS_IOPS)
    assert EBS_IOPS["r5b.24xlarge"].baseline == 260_000  # the figure docs/scaling.md's traces assume


# --- the spec's default ------------------------------------------------------------------------


def test_per_controller_iops_defaults_from_the_instance_type():
    assert spec(controllers=controllers("r6in.32xlarge")).per_controller_iops == 350_000
    assert spec(controllers=controllers("r5b.24xlarge")).per_controller_iops == 260_000


def test_an_explicit_per_controller_iops_is_kept():
    # an operator's figure wins over the table, and a stored spec (every field written) reads back as stored
    given = spec(controllers=controllers("r5b.2xlarge"), perControllerIops=260_000)
    assert given.per_controller_iops == 260_000
    stored = given.model_dump_json(by_alias=True)
    assert ArraySpec.model_validate_json(stored).per_controller_iops == 260_000


def test_an_unknown_instance_type_without_per_controller_iops_says_to_set_it():
    with pytest.raises(ValidationError) as raised:
        spec(controllers=controllers("r7i.48xlarge"))
    assert "set perControllerIops" in str(raised.value)
    assert "r7i.48xlarge" in str(raised.value)
    # with the figure given, the type is the operator's choice
    assert (
        spec(controllers=controllers("r7i.48xlarge"), perControllerIops=240_000).per_controller_iops
        == 240_000
    )


def test_a_launch_template_needs_per_controller_iops():
    template = {"launchTemplate": {"launchTemplateName": "mine"}}
    with pytest.raises(
        ValidationError, match=r"perControllerIops is required with controllers\.launchTemplate"
    ):
        spec(controllers=template)
    assert spec(controllers=template, perControllerIops=100_000).per_controller_iops == 100_000


# --- the capacity rule ---------------------------------------------------------------------------


def test_deliverable_iops_is_the_smaller_of_the_controllers_and_the_volumes():
    assert deliverable_iops(4, 260_000, 48_000) == 48_000
    assert deliverable_iops(1, 21_667, 48_000) == 21_667
    assert deliverable_iops(3, 21_667, None) == 65_001
    assert volume_controllers(48_000, 260_000, 0.7) == 1
    assert volume_controllers(48_000, 21_667, 0.7) == 4  # 48,000 / 15,166.9 = 3.2
    with pytest.raises(ValueError, match="more than 0"):
        volume_controllers(0, 260_000, 0.7)


def test_the_demo_array_never_scales_out_past_what_its_volumes_give():
    # Given the demo's array: 48,000 provisioned IOPS across its volumes, r5b.24xlarge controllers
    demo = spec(controllers=controllers("r5b.24xlarge"), minControllers=1, maxControllers=16)
    # When demand reaches the volumes' total (EBS delivers no more)
    decision = plan(PlanInput(demo, 48_000.0, 1, volume_iops=48_000))
    # Then no controller is added, and the decision says the volumes are the limit and what to raise
    assert (decision.action, decision.desired_controllers) == ("hold", 1)
    assert decision.volume_bound
    assert "volume-bound: the volumes provide 48,000 IOPS in total" in decision.reason
    assert "raise the volumes' provisioned IOPS" in decision.reason
    assert not decision.under_provisioned


def test_controllers_beyond_what_the_volumes_give_are_scaled_in():
    # Given 4 controllers of 260,000 IOPS on volumes of 48,000 IOPS in total (the demo)
    demo = spec(controllers=controllers("r5b.24xlarge"), minControllers=2, maxControllers=16)
    decision = plan(PlanInput(demo, 40_000.0, 4, volume_iops=48_000))
    # Then the planner removes one (one at a time, to minControllers)
    assert (decision.action, decision.desired_controllers) == ("scale-in", 3)
    assert "where 1 move the volumes' 48,000 IOPS" in decision.reason


def test_without_the_volumes_iops_the_rule_is_off():
    demo = spec(controllers=controllers("r5b.24xlarge"), minControllers=1)
    decision = plan(PlanInput(demo, 600_000.0, 1))
    assert (decision.desired_controllers, decision.volume_bound, decision.volume_controllers) == (
        4,
        False,
        None,
    )


SPECS = st.builds(
    lambda low, span, per, target: spec(
        minControllers=low,
        maxControllers=min(16, low + span),
        perControllerIops=per,
        targetUtilisation=target,
    ),
    st.integers(1, 16),
    st.integers(0, 15),
    st.integers(1_000, 400_000),
    st.sampled_from([0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
)


@settings(max_examples=400, deadline=None)
@given(
    array=SPECS,
    volume_iops=st.integers(100, 26 * 256_000),
    demand=st.floats(0, 8_000_000, allow_nan=False),
    recent=st.lists(st.floats(0, 8_000_000, allow_nan=False), max_size=15),
    current=st.integers(0, 16),
)
def test_the_planner_adds_no_controller_that_cannot_add_iops(array, volume_iops, demand, recent, current):
    decision = plan(
        PlanInput(array, demand, current, recent_demand=recent, volume_iops=volume_iops, sustained_minutes=5)
    )
    bound = max(
        array.min_controllers,
        min(
            array.max_controllers,
            math.ceil(volume_iops / (array.per_controller_iops * array.target_utilisation)),
        ),
    )
    # never more than the controllers that move the volumes' total at target (within [min, max]) ...
    if current <= bound:
        assert decision.desired_controllers <= bound
    # ... and never a controller added above it
    if decision.desired_controllers > current:
        assert decision.desired_controllers <= bound
    # never fewer than the current demand needs, while the volumes are not the limit
    needed = controllers_needed(demand, array.per_controller_iops, array.target_utilisation)
    if not decision.volume_bound and not decision.waiting:
        assert decision.desired_controllers >= max(array.min_controllers, min(needed, array.max_controllers))
    assert decision.volume_bound == (max([demand, decision.forecast_iops or 0.0]) >= volume_iops)


def test_the_simulator_counts_starved_minutes_with_the_same_capacity_rule():
    # Given a demand at the volumes' total, on an array whose controllers could serve far more
    array = spec(controllers=controllers("r5b.24xlarge"), minControllers=1, maxControllers=16)
    demand = [30_000.0] * 10 + [48_000.0] * 30 + [60_000.0] * 20
    result = simulator.simulate_planner(array, demand, volume_iops=48_000)
    # Then the planner never runs a controller the volumes cannot use, and the minutes above
    # what the volumes give are starved whatever the controllers (deliverable_iops)
    assert max(result.billed) == 1
    assert result.under_provisioned_minutes == 20
    oracle = simulator.simulate_oracle(array, demand, volume_iops=48_000)
    assert max(oracle.billed) == 1


def test_status_says_when_the_array_is_volume_bound():
    # Given the demo: 4 controllers of 260,000 IOPS on volumes of 48,000 IOPS in total
    array = spec(controllers=controllers("r5b.24xlarge"))
    volumes = [{"volumeId": "vol-0a1b2c3d4e5f60001", "iops": 48_000}]
    shown = capacity_status(array, 4, volumes)
    # Then status shows what it delivers and that the volumes are the limit, and what to raise
    assert (shown["volumeIops"], shown["deliverableIops"], shown["volumeControllers"]) == (48_000, 48_000, 1)
    assert shown["volumeBound"] is True
    assert "raise the volumes' provisioned IOPS" in shown["message"]
    # a volume that reports no IOPS leaves the total unknown, not partial
    unknown = capacity_status(array, 4, [{"volumeId": "vol-0a1b2c3d4e5f60001", "iops": None}])
    assert (unknown["volumeIops"], unknown["volumeBound"], unknown["deliverableIops"]) == (
        None,
        False,
        1_040_000,
    )


def test_with_one_owner_per_volume_each_volume_moves_at_most_its_owners_iops():
    # capacity: a volume served by one controller at a time gives at most that controller's IOPS
    assert owned_volume_iops([256_000, 20_000], 86_667) == 86_667 + 20_000
    assert owner_controllers(3) == 3
    assert owner_controllers(0) == 1


def test_with_one_owner_per_volume_the_planner_runs_no_controller_beyond_the_volume_count():
    # Given two volumes and demand that 5 controllers would serve at target
    fenced = spec(
        volumes=[{"volumeId": "vol-0a1b2c3d4e5f60001"}, {"volumeId": "vol-0a1b2c3d4e5f60002"}],
        fencing="reservations",
        minControllers=2,
        maxControllers=8,
    )
    shared = fenced.model_copy(update={"fencing": "none"})
    demand = 4.5 * fenced.per_controller_iops * fenced.target_utilisation
    # Then with one owner per volume it stops at two (more would stand by), and says why;
    # round-robin over every controller goes to five
    owned = plan(PlanInput(fenced, demand, 2))
    assert (owned.action, owned.desired_controllers) == ("hold", 2)
    assert "owner-bound" in owned.reason
    assert "spread the data over more volumes" in owned.reason
    assert plan(PlanInput(shared, demand, 2)).desired_controllers == 5
    # and the simulator stops there too
    replayed = simulator.simulate_planner(fenced, [demand] * 30)
    assert max(replayed.billed) == 2


def test_status_says_when_the_owners_are_the_limit():
    fenced = spec(
        volumes=[{"volumeId": "vol-0a1b2c3d4e5f60001"}],
        fencing="reservations",
        minControllers=2,
        maxControllers=4,
    )
    shown = capacity_status(fenced, 3, [{"volumeId": "vol-0a1b2c3d4e5f60001", "iops": 256_000}])
    per = fenced.per_controller_iops
    # one volume: one owner carries its IO, at most that controller's IOPS; the others stand by
    assert (shown["volumeIops"], shown["volumeControllers"]) == (min(256_000, per), 1)
    assert shown["deliverableIops"] == min(256_000, per)
    assert shown["volumeBound"] is True
    assert "owner-bound" in shown["message"]
