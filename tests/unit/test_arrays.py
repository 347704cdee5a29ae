"""ArrayService against moto: validate, apply (create, no-op, update), status, teardown.

moto gaps, worked around here and nowhere else:
- SSM ``DescribeInstanceInformation`` is not implemented by moto: the SSM client is a real client
  under botocore's Stubber, answering with the shape AWS documents.
- moto's lifecycle hooks drop ``NotificationMetadata`` (and store hard-coded role/target ARNs):
  ``conftest.hooks_keep_metadata`` records what PutLifecycleHook sent and puts it back into
  DescribeLifecycleHooks answers, as AWS does; without it every re-apply would see a change.
"""

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from tests.unit.conftest import ACCOUNT, REGION, an_image_id, hooks_keep_metadata
from vsa_core.arrays import plan
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import MAX_HOSTS, ArraySpec, Host, RegisteredArray
from vsa_core.errors import ConflictError, InvalidSpecError, VolumeCreationError

AZ = "us-east-1a"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/vsa-scheduler"
NODE_ROLE_PATH = "/vsa-node/"
HOST = "i-0a1b2c3d4e5f60001"


class World:
    """moto clients, a Stubber-driven SSM client and the service under test."""

    def __init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.autoscaling = boto3.client("autoscaling", region_name=REGION)
        hooks_keep_metadata(self.autoscaling)
        self.cloudwatch = boto3.client("cloudwatch", region_name=REGION)
        self.scheduler = boto3.client("scheduler", region_name=REGION)
        self.ssm = boto3.client("ssm", region_name=REGION)
        self.ssm_stub = Stubber(self.ssm)
        self.ssm_stub.activate()
        self.service = ArrayService(
            scheduler_role_arn=ROLE_ARN,
            ec2=self.ec2,
            autoscaling=self.autoscaling,
            cloudwatch=self.cloudwatch,
            scheduler=self.scheduler,
            ssm=self.ssm,
            node_role_path=NODE_ROLE_PATH,
            wait_delay_seconds=0,
            wait_max_attempts=3,
        )
        self.image_id = an_image_id(self.ec2)

    def apply(self, spec: ArraySpec, desired: int) -> list[plan.Change]:
        """What a PUT and its ReconcileArray run's first step do together: converge AWS on the
        spec (the API), then create the owned volumes not created yet (the workflow's
        ``create`` step, which also puts the alarms over every volume)."""
        changes = self.service.apply(spec, desired)
        self.service.create_volumes(spec, desired)
        return changes

    def volume(self, *, az: str = AZ, volume_type: str = "io2", multi_attach: bool = True) -> str:
        params: dict[str, Any] = {"AvailabilityZone": az, "Size": 100, "VolumeType": volume_type}
        if volume_type == "io2":
            params |= {"Iops": 1000, "MultiAttachEnabled": multi_attach}
        return str(self.ec2.create_volume(**params)["VolumeId"])

    def hosts_answer(self, *nodes: tuple[str, str]) -> None:
        self.ssm_stub.add_response(
            "describe_instance_information",
            {"InstanceInformationList": [{"InstanceId": i, "PingStatus": s} for i, s in nodes]},
        )

    def spec(self, volumes: list[dict[str, Any]], **overrides: Any) -> ArraySpec:
        document: dict[str, Any] = {
            "arrayId": "demo",
            "availabilityZone": AZ,
            "volumes": volumes,
            "controllers": {"instanceType": "r5b.2xlarge", "imageId": self.image_id},
            "perControllerIops": 260_000,
            "minControllers": 2,
            "maxControllers": 8,
            **overrides,
        }
        return ArraySpec.model_validate(document)

    def nothing_created(self) -> bool:
        return (
            not self.autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
            and not self.cloudwatch.describe_alarms()["MetricAlarms"]
            and not self.scheduler.list_schedules()["Schedules"]
            and not self.ec2.describe_launch_templates()["LaunchTemplates"]
        )


@pytest.fixture
def world(aws: None) -> Iterator[World]:
    w = World()
    yield w
    w.ssm_stub.assert_no_pending_responses()


# --- validate ------------------------------------------------------------------------------------


def test_validate_accepts_a_good_spec(world: World) -> None:
    # Given an io2 Multi-Attach volume in the array's AZ and a managed, online host
    spec = world.spec([{"volumeId": world.volume()}], hosts=[{"instanceId": HOST}])
    world.hosts_answer((HOST, "Online"))
    # When / Then
    world.service.validate(spec, None)


@pytest.mark.parametrize(
    ("volume_kwargs", "message"),
    [
        ({"az": "us-east-1b"}, "is in us-east-1b, the array is in us-east-1a: use a volume in us-east-1a"),
        ({"volume_type": "gp3"}, "is not io2 with Multi-Attach (it is gp3, Multi-Attach off)"),
        ({"multi_attach": False}, "is not io2 with Multi-Attach (it is io2, Multi-Attach off)"),
    ],
    ids=["other-az", "gp3", "io2-without-multi-attach"],
)
def test_validate_rejects_a_volume_unfit_for_the_array(
    world: World, volume_kwargs: dict[str, Any], message: str
) -> None:
    volume_id = world.volume(**volume_kwargs)
    spec = world.spec([{"volumeId": volume_id}])
    with pytest.raises(InvalidSpecError) as raised:
        world.service.validate(spec, None)
    assert f"volume {volume_id} {message}" in str(raised.value)
    assert world.nothing_created()


def test_validate_rejects_a_missing_volume(world: World) -> None:
    spec = world.spec([{"volumeId": "vol-0123456789abcdef0"}])
    with pytest.raises(InvalidSpecError, match="volume vol-0123456789abcdef0 does not exist"):
        world.service.validate(spec, None)


def test_validate_rejects_an_unknown_launch_template(world: World) -> None:
    spec = world.spec(
        [{"volumeId": world.volume()}],
        controllers={"launchTemplate": {"launchTemplateName": "no-such-template"}},
    )
    with pytest.raises(InvalidSpecError, match=r"controllers\.launchTemplate no-such-template"):
        world.service.validate(spec, None)
    assert world.nothing_created()


def test_validate_rejects_hosts_that_are_not_managed_or_online(world: World) -> None:
    other = "i-0a1b2c3d4e5f60002"
    spec = world.spec([{"volumeId": world.volume()}], hosts=[{"instanceId": HOST}, {"instanceId": other}])
    world.hosts_answer((other, "ConnectionLost"))
    with pytest.raises(InvalidSpecError) as raised:
        world.service.validate(spec, None)
    message = str(raised.value)
    assert "2 problem(s)" in message
    assert (
        f"host {HOST} is not an SSM managed node: install/start the SSM agent and give it an instance "
        "profile with AmazonSSMManagedInstanceCore" in message
    )
    assert f"host {other} is an SSM managed node but ConnectionLost" in message


def test_validate_collects_every_problem_in_one_message(world: World) -> None:
    spec = world.spec(
        [{"volumeId": world.volume(az="us-east-1b")}, {"volumeId": world.volume(volume_type="gp3")}],
        controllers={"instanceType": "r5b.2xlarge", "imageId": "ami-0123456789abcdef0"},
    )
    with pytest.raises(InvalidSpecError) as raised:
        world.service.validate(spec, None)
    message = str(raised.value)
    assert "3 problem(s)" in message
    assert "controllers.imageId ami-0123456789abcdef0 does not exist" in message


def test_validate_refuses_max_below_serving_controllers(world: World) -> None:
    # Given an applied array with 3 controllers in service
    spec = world.spec([{"volumeId": world.volume()}])
    world.apply(spec, 3)
    registered = RegisteredArray(spec=spec, desired_controllers=3, version=1)
    # When maxControllers drops to 2
    lowered = spec.model_copy(update={"max_controllers": 2})
    # Then 409, naming the serving controllers, and nothing changes
    with pytest.raises(ConflictError, match="maxControllers=2 is below the 3 serving controllers"):
        world.service.validate(lowered, registered)
    group = world.autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"][0]
    assert group["MaxSize"] == 8


def test_validate_refuses_to_turn_fencing_off_on_a_running_array_and_takes_it_on(world: World) -> None:
    volume = world.volume()
    spec = world.spec([{"volumeId": volume}], fencing="reservations")
    registered = RegisteredArray(spec=spec, desired_controllers=2, version=1)
    plain = world.spec([{"volumeId": volume}], fencing="none")
    with pytest.raises(ConflictError, match="fencing cannot go from reservations back to none"):
        world.service.validate(plain, registered)
    world.service.validate(spec, RegisteredArray(spec=plain, desired_controllers=2, version=1))


def test_validate_refuses_to_move_an_array_to_another_az(world: World) -> None:
    spec = world.spec([{"volumeId": world.volume()}])
    registered = RegisteredArray(spec=spec, desired_controllers=2, version=1)
    moved = world.spec([{"volumeId": world.volume(az="us-east-1b")}], availabilityZone="us-east-1b")
    with pytest.raises(ConflictError, match="availabilityZone cannot change from us-east-1a to us-east-1b"):
        world.service.validate(moved, registered)


# --- apply ---------------------------------------------------------------------------------------


def _full_spec(world: World) -> ArraySpec:
    return world.spec(
        [{"volumeId": world.volume()}, {"name": "data", "sizeGiB": 100, "iops": 3000}],
        backup={"schedule": "rate(1 day)", "retention": 3},
    )


def test_apply_creates_everything_the_spec_implies(world: World) -> None:
    spec = _full_spec(world)

    changes = world.apply(spec, 2)

    assert {c.action for c in changes} == {"create"}
    assert sorted(c.resource for c in changes) == [
        "alarm/vsa-demo-iops-high",
        "alarm/vsa-demo-iops-low",
        "group/vsa-demo-controllers",
        "launch-template/vsa-demo-controller",
        "lifecycle-hook/vsa-demo-bootstrap",
        "lifecycle-hook/vsa-demo-drain",
        "schedule/vsa-demo-backup",
        "secret/vsa/demo/keys",
        "volume/data",
    ]
    owned = world.ec2.describe_volumes(Filters=[{"Name": "tag:vsa:owned", "Values": ["true"]}])["Volumes"]
    assert len(owned) == 1
    assert owned[0]["VolumeType"] == "io2"
    assert owned[0]["MultiAttachEnabled"] is True
    assert {"Key": "Name", "Value": "vsa-demo-data"} in owned[0]["Tags"]
    group = world.autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"][0]
    assert (group["MinSize"], group["MaxSize"], group["DesiredCapacity"]) == (2, 8, 2)
    assert group["NewInstancesProtectedFromScaleIn"] is True
    assert group["LaunchTemplate"]["LaunchTemplateName"] == "vsa-demo-controller"
    hooks = world.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="vsa-demo-controllers")
    by_name = {h["LifecycleHookName"]: h for h in hooks["LifecycleHooks"]}
    assert by_name["vsa-demo-bootstrap"]["DefaultResult"] == "ABANDON"
    assert by_name["vsa-demo-drain"]["DefaultResult"] == "CONTINUE"
    assert by_name["vsa-demo-bootstrap"]["HeartbeatTimeout"] == 1200
    alarms = {a["AlarmName"]: a for a in world.cloudwatch.describe_alarms()["MetricAlarms"]}
    assert alarms["vsa-demo-iops-high"]["Threshold"] == 2 * 260_000 * 0.7
    assert len(alarms["vsa-demo-iops-high"]["Metrics"]) == 2 * 2 + 1
    schedule = world.scheduler.get_schedule(Name="vsa-demo-backup")
    assert schedule["ScheduleExpression"] == "rate(1 day)"
    assert schedule["Target"]["RoleArn"] == ROLE_ARN


def test_reapply_changes_nothing_and_creates_no_second_volume(world: World) -> None:
    spec = _full_spec(world)
    world.apply(spec, 2)

    changes = world.apply(spec, 2)

    assert [(c.resource, c.fields) for c in changes if c.action != "unchanged"] == []
    assert len(changes) == 8
    owned = world.ec2.describe_volumes(Filters=[{"Name": "tag:vsa:owned", "Values": ["true"]}])["Volumes"]
    assert len(owned) == 1


def test_an_update_changes_exactly_what_changed(world: World) -> None:
    # Given an applied array
    spec = _full_spec(world)
    world.apply(spec, 2)
    # When maxControllers goes 8 -> 10 and a volume is added
    new_volume = world.volume()
    updated = world.spec(
        [*[v.model_dump(by_alias=True) for v in spec.volumes], {"volumeId": new_volume}],
        maxControllers=10,
        backup={"schedule": "rate(1 day)", "retention": 3},
    )
    changes = {c.resource: c for c in world.apply(updated, 2) if c.action != "unchanged"}
    # Then the group's MaxSize and the alarms' metrics change, nothing else (the hooks' timeouts do
    # not depend on the array's size)
    assert set(changes) == {
        "group/vsa-demo-controllers",
        "alarm/vsa-demo-iops-high",
        "alarm/vsa-demo-iops-low",
    }
    assert changes["group/vsa-demo-controllers"].fields == (("MaxSize", 8, 10),)
    assert [f for f, _, _ in changes["alarm/vsa-demo-iops-high"].fields] == ["Metrics"]
    group = world.autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"][0]
    assert group["MaxSize"] == 10
    alarm = world.cloudwatch.describe_alarms(AlarmNames=["vsa-demo-iops-high"])["MetricAlarms"][0]
    assert new_volume in str(alarm["Metrics"])
    # And applying again is a no-op
    assert all(c.action == "unchanged" for c in world.apply(updated, 2))


def test_dropping_the_backup_policy_deletes_the_schedule(world: World) -> None:
    spec = _full_spec(world)
    world.apply(spec, 2)
    changes = world.apply(spec.model_copy(update={"backup": None}), 2)
    assert [c.resource for c in changes if c.action == "delete"] == ["schedule/vsa-demo-backup"]
    assert world.scheduler.list_schedules()["Schedules"] == []


def test_a_new_instance_type_makes_a_new_default_template_version(world: World) -> None:
    spec = _full_spec(world)
    world.apply(spec, 2)
    controllers = {"instanceType": "r5b.4xlarge", "imageId": world.image_id}
    changes = world.apply(world.spec(list(_dump(spec)), controllers=controllers, backup=_backup(spec)), 2)
    changed = [c for c in changes if c.action != "unchanged"]
    assert [(c.resource, c.fields) for c in changed] == [
        (
            "launch-template/vsa-demo-controller",
            (("LaunchTemplateData.InstanceType", "r5b.2xlarge", "r5b.4xlarge"),),
        )
    ]
    template = world.ec2.describe_launch_templates(LaunchTemplateNames=["vsa-demo-controller"])
    assert template["LaunchTemplates"][0]["DefaultVersionNumber"] == 2


def _dump(spec: ArraySpec) -> list[dict[str, Any]]:
    return [v.model_dump(by_alias=True) for v in spec.volumes]


def _backup(spec: ArraySpec) -> dict[str, Any] | None:
    return spec.backup.model_dump(by_alias=True) if spec.backup else None


# --- status, busy, teardown ------------------------------------------------------------------------


def test_status_reports_group_controllers_volumes_alarms_schedule_hosts(world: World) -> None:
    spec = _full_spec(world).model_copy(update={"hosts": ()})
    spec = ArraySpec.model_validate({**spec.model_dump(by_alias=True), "hosts": [{"instanceId": HOST}]})
    world.apply(spec, 2)
    world.hosts_answer((HOST, "Online"))

    status = world.service.status(spec)

    assert status["group"] == {"name": "vsa-demo-controllers", "desired": 2, "min": 2, "max": 8}
    assert len(status["controllers"]) == 2
    assert all(c["privateIp"] and c["protectedFromScaleIn"] for c in status["controllers"])
    assert sorted(v["owned"] for v in status["volumes"]) == [False, True]
    assert {a["name"] for a in status["alarms"]} == {"vsa-demo-iops-high", "vsa-demo-iops-low"}
    assert status["backupSchedule"] == {
        "name": "vsa-demo-backup",
        "expression": "rate(1 day)",
        "state": "ENABLED",
    }
    assert status["hosts"] == [{"instanceId": HOST, "mountpoints": [], "pingStatus": "Online"}]


def test_busy_reason_is_none_for_a_settled_array(world: World) -> None:
    spec = _full_spec(world)
    world.apply(spec, 2)
    assert world.service.busy_reason(spec) is None


def teardown(world: World, spec: Any, *, delete_volumes: bool) -> list[Any]:
    """The DeleteArray workflow's steps in order (moto deletes a group at once: no wait needed)."""
    return world.service.release(spec) + world.service.finish(spec, delete_volumes=delete_volumes)


def test_teardown_removes_what_apply_created_and_keeps_a_volume_it_does_not_own(world: World) -> None:
    spec = _full_spec(world)
    existing = spec.existing_volume_ids[0]
    world.apply(spec, 2)

    changes = teardown(world, spec, delete_volumes=True)

    assert {c.action for c in changes} == {"delete"}
    assert "volume/data" in {c.resource for c in changes}
    assert world.nothing_created()
    remaining = [v["VolumeId"] for v in world.ec2.describe_volumes()["Volumes"]]
    assert existing in remaining
    assert not world.ec2.describe_volumes(Filters=[{"Name": "tag:vsa:owned", "Values": ["true"]}])["Volumes"]


def test_teardown_keeps_owned_volumes_unless_asked(world: World) -> None:
    spec = _full_spec(world)
    world.apply(spec, 2)
    teardown(world, spec, delete_volumes=False)
    owned = world.ec2.describe_volumes(Filters=[{"Name": "tag:vsa:owned", "Values": ["true"]}])["Volumes"]
    assert len(owned) == 1


def test_teardown_never_deletes_a_launch_template_it_did_not_create(world: World) -> None:
    template_id = world.ec2.create_launch_template(
        LaunchTemplateName="vsa-demo-controller", LaunchTemplateData={"ImageId": world.image_id}
    )["LaunchTemplate"]["LaunchTemplateId"]
    spec = world.spec(
        [{"volumeId": world.volume()}], controllers={"launchTemplate": {"launchTemplateId": template_id}}
    )
    world.apply(spec, 2)
    teardown(world, spec, delete_volumes=True)
    assert world.ec2.describe_launch_templates()["LaunchTemplates"][0]["LaunchTemplateId"] == template_id


def test_validate_refuses_to_take_over_a_launch_template_of_the_same_name(world: World) -> None:
    world.ec2.create_launch_template(
        LaunchTemplateName="vsa-demo-controller", LaunchTemplateData={"ImageId": world.image_id}
    )
    spec = world.spec([{"volumeId": world.volume()}])
    with pytest.raises(
        InvalidSpecError, match="launch template vsa-demo-controller exists and was not created"
    ):
        world.service.validate(spec, None)


def test_apply_creates_no_volume_and_the_workflow_step_creates_each_once_without_waiting(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a spec with three volumes to create (the API answers within API Gateway's 29 s
    # integration timeout, https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html,
    # however many: ReconcileArray's first step creates them)
    spec = world.spec([{"name": f"data{i}", "sizeGiB": 100, "iops": 3000} for i in range(3)])
    created: list[dict[str, Any]] = []
    create = world.ec2.create_volume

    def recording_create(**params: Any) -> Any:
        created.append(params)
        return create(**params)

    def no_waiting(name: str) -> Any:
        raise AssertionError(f"waited on {name} in a Lambda: the workflow's Wait states wait")

    monkeypatch.setattr(world.ec2, "create_volume", recording_create)
    monkeypatch.setattr(world.ec2, "get_waiter", no_waiting)
    # When the API applies it: nothing is created, each volume is planned as a create
    changes = world.service.apply(spec, 2)
    assert created == []
    assert [c.action for c in changes if c.resource.startswith("volume/")] == ["create"] * 3
    assert world.service.missing_volumes(spec) == ["data0", "data1", "data2"]
    # When the workflow's create step runs: each volume was created once, tagged as owned, with
    # a client token of its own (EC2 idempotency:
    # https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html), and nothing waited
    done = world.service.create_volumes(spec, 2)
    assert [c.split(" ")[0] for c in done["created"]] == ["data0", "data1", "data2"]
    tokens = [p["ClientToken"] for p in created]
    assert len(tokens) == len(set(tokens)) == 3
    assert all(len(t) <= 64 and t.isascii() for t in tokens)
    assert all({"Key": "vsa:owned", "Value": "true"} in p["TagSpecifications"][0]["Tags"] for p in created)
    # and the alarms now watch every volume
    alarm = world.cloudwatch.describe_alarms(AlarmNames=["vsa-demo-iops-high"])["MetricAlarms"][0]
    watched = {
        d["Value"]
        for m in alarm["Metrics"]
        if "MetricStat" in m
        for d in m["MetricStat"]["Metric"]["Dimensions"]
    }
    assert len(watched) == 3
    # And a retried step creates nothing more, and asks with the same tokens had it to create
    again = world.service.create_volumes(spec, 2)
    assert (len(created), again["created"], len(again["existing"])) == (3, [], 3)
    assert tokens == [plan.owned_volume_token(spec, v) for v in spec.new_volumes]
    assert world.service.missing_volumes(spec) == []
    # And another deployment's array of the same id asks with tokens of its own (a token is the
    # account's: a shared one would answer its create with this deployment's volume)
    monkeypatch.setenv("VSA_DEPLOYMENT_NAME", "stage")
    assert not set(tokens) & {plan.owned_volume_token(spec, v) for v in spec.new_volumes}
    # and finds none of this deployment's volumes as its own
    assert world.service.missing_volumes(spec) == ["data0", "data1", "data2"]


def test_a_volume_ebs_refuses_fails_the_step_saying_what_was_created_and_what_remains(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = world.spec([{"name": f"data{i}", "sizeGiB": 100, "iops": 3000} for i in range(3)])
    create = world.ec2.create_volume

    def refusing(**params: Any) -> Any:
        if "vsa-demo-data1" in str(params["TagSpecifications"]):
            raise ClientError(
                {"Error": {"Code": "VolumeLimitExceeded", "Message": "io2 storage limit"}}, "CreateVolume"
            )
        return create(**params)

    monkeypatch.setattr(world.ec2, "create_volume", refusing)
    world.service.apply(spec, 2)
    with pytest.raises(VolumeCreationError) as refused:
        world.service.create_volumes(spec, 2)
    message = str(refused.value)
    assert "created data0 (vol-" in message
    assert "data2 (vol-" in message
    assert "not created: data1 (VolumeLimitExceeded: io2 storage limit)" in message
    assert "apply it again to create the rest" in message
    assert world.service.missing_volumes(spec) == ["data1"]


# --- everything launching a controller needs, checked before anything is stored (issue #20) ------


def _network(world: World) -> dict[str, str]:
    """A VPC's subnet in the array's AZ, a host in it with its own security group, and a
    controllers' group."""
    vpc = world.ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = world.ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.4.0/22", AvailabilityZone=AZ)["Subnet"][
        "SubnetId"
    ]
    hosts_group = world.ec2.create_security_group(GroupName="hosts", Description="hosts", VpcId=vpc)[
        "GroupId"
    ]
    controllers = world.ec2.create_security_group(GroupName="ctl", Description="ctl", VpcId=vpc)["GroupId"]
    host = world.ec2.run_instances(
        ImageId=world.image_id, MinCount=1, MaxCount=1, SubnetId=subnet, SecurityGroupIds=[hosts_group]
    )["Instances"][0]
    return {
        "vpc": vpc,
        "subnet": subnet,
        "hosts_group": hosts_group,
        "controllers": controllers,
        "host": host["InstanceId"],
        "address": host["PrivateIpAddress"],
    }


def _open_4420(world: World, group: str, **source: Any) -> None:
    world.ec2.authorize_security_group_ingress(
        GroupId=group, IpPermissions=[{"IpProtocol": "tcp", "FromPort": 4420, "ToPort": 4420, **source}]
    )


def _with_network(world: World, net: dict[str, str], **controllers: Any) -> ArraySpec:
    return world.spec(
        [{"volumeId": world.volume()}],
        controllers={
            "instanceType": "r5b.2xlarge",
            "imageId": world.image_id,
            "subnetId": net["subnet"],
            "securityGroupIds": [net["controllers"]],
            **controllers,
        },
        hosts=[{"instanceId": net["host"]}],
    )


@pytest.mark.parametrize(
    ("source", "stranger"),
    [
        ({"IpRanges": [{"CidrIp": "0.0.0.0/0"}]}, "0.0.0.0/0"),
        ({"IpRanges": [{"CidrIp": "10.9.0.0/16"}]}, "10.9.0.0/16"),
        ({"Ipv6Ranges": [{"CidrIpv6": "::/0"}]}, "::/0"),
    ],
)
def test_port_4420_open_beyond_the_hosts_is_refused_naming_the_group_and_source(
    world: World, source: dict[str, Any], stranger: str
) -> None:
    net = _network(world)
    _open_4420(world, net["controllers"], UserIdGroupPairs=[{"GroupId": net["hosts_group"]}])
    _open_4420(world, net["controllers"], **source)
    world.hosts_answer((net["host"], "Online"))
    with pytest.raises(InvalidSpecError) as refused:
        world.service.validate(_with_network(world, net), None)
    message = str(refused.value)
    assert f"{net['controllers']} opens port 4420 (NVMe/TCP) to {stranger}" in message
    assert "only to the hosts' security groups" in message
    assert world.nothing_created()


def test_every_protocol_from_another_group_counts_as_port_4420_open(world: World) -> None:
    net = _network(world)
    other = world.ec2.create_security_group(GroupName="o", Description="o", VpcId=net["vpc"])["GroupId"]
    _open_4420(world, net["controllers"], UserIdGroupPairs=[{"GroupId": net["hosts_group"]}])
    world.ec2.authorize_security_group_ingress(
        GroupId=net["controllers"],
        IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": other}]}],
    )
    world.hosts_answer((net["host"], "Online"))
    with pytest.raises(InvalidSpecError, match=f"to security group {other}, which is not a host"):
        world.service.validate(_with_network(world, net), None)


@pytest.mark.parametrize("by", ["group", "address"])
def test_port_4420_open_to_the_hosts_only_is_accepted(world: World, by: str) -> None:
    net = _network(world)
    if by == "group":
        _open_4420(world, net["controllers"], UserIdGroupPairs=[{"GroupId": net["hosts_group"]}])
    else:
        _open_4420(world, net["controllers"], IpRanges=[{"CidrIp": f"{net['address']}/32"}])
    # other ports may be open to anyone: only NVMe/TCP is the array's
    world.ec2.authorize_security_group_ingress(
        GroupId=net["controllers"],
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
        ],
    )
    world.hosts_answer((net["host"], "Online"))
    world.service.validate(_with_network(world, net), None)


def test_a_host_no_security_group_admits_is_refused(world: World) -> None:
    net = _network(world)
    world.hosts_answer((net["host"], "Online"))
    with pytest.raises(InvalidSpecError, match=f"host {net['host']} cannot reach port 4420"):
        world.service.validate(_with_network(world, net), None)


def test_unknown_security_groups_instance_type_and_profile_are_all_reported_at_once(world: World) -> None:
    net = _network(world)
    elsewhere = world.ec2.create_security_group(GroupName="x", Description="x")["GroupId"]  # default VPC
    spec = _with_network(world, net, instanceType="r5b.nonsense", instanceProfile="no-such-profile")
    spec = spec.model_copy(
        update={
            "controllers": spec.controllers.model_copy(
                update={"security_group_ids": ("sg-0123456789abcdef0", elsewhere)}
            ),
            "hosts": (),
        }
    )
    with pytest.raises(InvalidSpecError) as refused:
        world.service.validate(spec, None)
    message = str(refused.value)
    assert "securityGroupIds sg-0123456789abcdef0 does not exist" in message
    assert f"securityGroupIds {elsewhere} is in vpc-" in message
    assert f"subnetId in {net['vpc']}" in message
    assert "instanceType r5b.nonsense is not offered in us-east-1a" in message
    assert "instanceProfile no-such-profile does not exist" in message
    assert world.nothing_created()


def _profile(name: str, role_path: str | None) -> str:
    """An instance profile (with a role under ``role_path``, or none); answers its name."""
    iam = boto3.client("iam", region_name=REGION)
    iam.create_instance_profile(InstanceProfileName=name)
    if role_path is not None:
        iam.create_role(RoleName=f"{name}-role", Path=role_path, AssumeRolePolicyDocument="{}")
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=f"{name}-role")
    return name


def test_an_instance_profile_whose_role_is_under_the_node_role_path_is_accepted(world: World) -> None:
    spec = world.spec(
        [{"volumeId": world.volume()}],
        controllers={
            "instanceType": "r5b.2xlarge",
            "imageId": world.image_id,
            "instanceProfile": _profile("vsa-controller", NODE_ROLE_PATH),
        },
    )
    world.service.validate(spec, None)


@pytest.mark.parametrize(
    ("role_path", "says"),
    [
        ("/", f"carries role arn:aws:iam::{ACCOUNT}:role/admin-role, outside the node roles"),
        ("/vsa-node-lookalike/", "outside the node roles this deployment may pass (path /vsa-node/"),
        (None, "holds no role: add a role created under /vsa-node/"),
    ],
)
def test_an_instance_profile_the_operator_did_not_name_for_nodes_is_refused_before_anything_is_made(
    world: World, role_path: str | None, says: str
) -> None:
    # Given an instance profile whose role is outside the stack's NodeRolePath (an
    # administrator's, at the root path), or one with no role at all
    spec = world.spec(
        [{"volumeId": world.volume()}],
        controllers={
            "instanceType": "r5b.2xlarge",
            "imageId": world.image_id,
            "instanceProfile": _profile("admin", role_path),
        },
    )
    # When the spec is validated, Then it is refused naming the profile and what is allowed
    with pytest.raises(InvalidSpecError, match=r"controllers\.instanceProfile admin") as refused:
        world.service.validate(spec, None)
    assert says in str(refused.value)
    assert world.nothing_created()


def test_an_operators_launch_template_whose_profile_role_is_not_a_node_role_is_refused(world: World) -> None:
    # Given the operator's launch template that launches under an administrator's profile (by ARN)
    _profile("admin", "/")
    template_id = world.ec2.create_launch_template(
        LaunchTemplateName="ops-controllers",
        LaunchTemplateData={
            "ImageId": world.image_id,
            "InstanceType": "r5b.2xlarge",
            "IamInstanceProfile": {"Arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/admin"},
        },
    )["LaunchTemplate"]["LaunchTemplateId"]
    spec = world.spec(
        [{"volumeId": world.volume()}], controllers={"launchTemplate": {"launchTemplateId": template_id}}
    )
    # When it is validated, Then it is refused naming the template, its profile and the role
    with pytest.raises(InvalidSpecError) as refused:
        world.service.validate(spec, None)
    message = str(refused.value)
    assert f"controllers.launchTemplate {template_id}'s instance profile admin carries role" in message
    assert f"arn:aws:iam::{ACCOUNT}:role/admin-role" in message
    # And one whose profile's role is under the node role path is accepted
    _profile("nodes", NODE_ROLE_PATH)
    world.ec2.create_launch_template_version(
        LaunchTemplateId=template_id,
        SourceVersion="1",
        LaunchTemplateData={"IamInstanceProfile": {"Name": "nodes"}},
    )
    world.ec2.modify_launch_template(LaunchTemplateId=template_id, DefaultVersion="2")
    world.service.validate(spec, None)


def _refuse_over_200_filter_values(params: dict[str, Any], model: Any, **_: Any) -> None:
    """EC2's rule, which moto does not keep: more than 200 filter values in one call is refused
    with FilterLimitExceeded ("The maximum number of filter values specified on a single call
    is 200", EC2's error as AWS answers it)."""
    values = sum(len(f.get("Values", [])) for f in params.get("Filters", []))
    if values > 200:
        raise ClientError(
            {
                "Error": {
                    "Code": "FilterLimitExceeded",
                    "Message": "The maximum number of filter values specified on a single call is 200",
                }
            },
            model.name,
        )


def test_a_spec_with_the_most_hosts_is_validated_within_aws_request_limits(world: World) -> None:
    # Given 256 hosts (the spec's most) in the array's VPC, each a managed node, online, and
    # port 4420 open to their security group only; EC2 keeping its 200-filter-values rule
    net = _network(world)
    hosts = [net["host"]] + [
        i["InstanceId"]
        for i in world.ec2.run_instances(
            ImageId=world.image_id,
            MinCount=MAX_HOSTS - 1,
            MaxCount=MAX_HOSTS - 1,
            SubnetId=net["subnet"],
            SecurityGroupIds=[net["hosts_group"]],
        )["Instances"]
    ]
    _open_4420(world, net["controllers"], UserIdGroupPairs=[{"GroupId": net["hosts_group"]}])
    world.ec2.meta.events.register("before-parameter-build.ec2.*", _refuse_over_200_filter_values)
    # SSM's DescribeInstanceInformation takes at most 100 filter values (its API reference, and
    # botocore's model: InstanceInformationStringFilter Values max 100): one call per hundred
    shape = world.ssm.meta.service_model.shape_for("InstanceInformationStringFilter")
    assert shape.members["Values"].metadata["max"] == 100
    for start in range(0, MAX_HOSTS, 100):
        batch = hosts[start : start + 100]
        world.ssm_stub.add_response(
            "describe_instance_information",
            {"InstanceInformationList": [{"InstanceId": i, "PingStatus": "Online"} for i in batch]},
            {"Filters": [{"Key": "InstanceIds", "Values": batch}]},
        )
    spec = _with_network(world, net).model_copy(
        update={"hosts": tuple(Host(instance_id=i) for i in hosts), "authentication": "none"}
    )
    # When the spec is validated, Then it is accepted: every host found managed, online and
    # reaching port 4420, in calls AWS accepts
    world.service.validate(spec, None)
    # And with DH-HMAC-CHAP, the same hosts are refused, saying why: their keys would not fit in
    # one secret during a rotation (Secrets Manager's 65,536 bytes)
    for start in range(0, MAX_HOSTS, 100):
        batch = hosts[start : start + 100]
        world.ssm_stub.add_response(
            "describe_instance_information",
            {"InstanceInformationList": [{"InstanceId": i, "PingStatus": "Online"} for i in batch]},
        )
    with pytest.raises(InvalidSpecError) as refused:
        world.service.validate(spec.model_copy(update={"authentication": "dh-hmac-chap"}), None)
    assert "1 problem(s)" in str(refused.value)
    assert f"the array's keys for {MAX_HOSTS} hosts take" in str(refused.value)
    assert "over Secrets Manager's 65,536-byte secret: declare at most about" in str(refused.value)
