"""A new AMI for a running array's controllers, end to end on the local cloud (the real
template, the real Lambda code, the launch and terminate hooks' bootstrap and drain, the real
documents on the nodes' sandboxes): the apply starts ReconcileArray, whose roll phase replaces
every controller one at a time, the new one serving before the old one drains, while a sampler
watches every host's paths (``PathWatch``: none may leave ``live``, none may have fewer live
paths than the array's controllers)."""

import boto3

from tests.integration.arrays_world import create_array, get_array, group_of, node_root, settle, spec_for
from tests.integration.test_controller_lifecycle import PathWatch, check_serving
from tests.integration.test_reconcile_array import apply_and_follow
from vsa_core.nvme import subsystem_nqn

NEW_AMI = "ami-12c6146b"  # another of the local cloud's (moto's) registered images
CONTROLLERS = 2


def test_a_new_ami_replaces_every_controller_one_at_a_time_without_a_host_losing_a_path(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given a running array at its fixed size (2 of 2 controllers: the roll must raise the
    # group's maximum for its extra controller), 2 volumes and a host with 2 live paths to each
    array_id = arrays()
    scripted_alarms(array_id)  # no scaling under the test
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": world.volume()}, {"volumeId": world.volume()}],
        minControllers=CONTROLLERS,
        maxControllers=CONTROLLERS,
    )
    create_array(api, array_id, spec)
    settle(array_id, timeout=300)
    volumes = [v["volumeId"] for v in spec["volumes"]]
    array = {
        "arrayId": array_id,
        "volumes": volumes,
        "nqns": [subsystem_nqn(array_id, v) for v in volumes],
        "hosts": {h["instanceId"]: node_root(world.endpoint, h["instanceId"]) for h in spec["hosts"]},
    }
    before = check_serving(stack_outputs, world, array, CONTROLLERS)
    # When the spec names a new AMI, with the sampler watching
    rolled = {**spec, "controllers": {**spec["controllers"], "imageId": NEW_AMI}}
    with PathWatch(array["hosts"], array["nqns"]) as watch:
        _, seconds = apply_and_follow(api, stack_outputs, rolled)
    print(f"roll {CONTROLLERS} controllers onto a new AMI: {seconds:.1f} s")
    # Then every controller is a new one, on the new AMI, serving every volume to every host
    after = check_serving(stack_outputs, world, array, CONTROLLERS, packed=False)
    assert set(after).isdisjoint(before), (before, after)
    described = boto3.client("ec2").describe_instances(InstanceIds=after)["Reservations"]
    assert {i["ImageId"] for r in described for i in r["Instances"]} == {NEW_AMI}
    # and the group is back at the array's count and bounds
    group = group_of(array_id)
    assert group is not None
    assert (group["DesiredCapacity"], group["MaxSize"]) == (CONTROLLERS, CONTROLLERS)
    # and no host ever had fewer live paths than the array's controllers, none left live
    assert watch.samples > 5, watch.samples
    assert watch.not_live == set(), watch.not_live
    assert watch.fewest[0] >= CONTROLLERS, watch.fewest
    shown = get_array(api, array_id)["reconcile"]
    assert (shown["state"], shown["error"]) == ("converged", None), shown
    # And applying the same spec again replaces nothing (the roll finds none outdated)
    status, again = api.call("PUT", f"/arrays/{array_id}", rolled)
    assert status == 200, again
    settle(array_id)
    assert check_serving(stack_outputs, world, array, CONTROLLERS, packed=False) == after
