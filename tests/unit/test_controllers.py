"""Controller slots, device names, paths (vsa_core.controllers.slots, pure), the lifecycle trigger
(on_controller_event: one workflow per event, idempotent names, botocore Stubber for Step
Functions) and the workflow steps (task_controller, moto)."""

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from on_controller_event import handler as trigger
from tests.specs import CONTROLLERS
from tests.unit.conftest import REGION, an_image_id, load_event
from vsa_core import nvme
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ArraySpec
from vsa_core.controllers import slots
from vsa_core.controllers.aws_steps import Steps
from vsa_core.controllers.steps import Attach, Attachment, Commands, Connect, Detach, Locate, Node, Prepare
from vsa_core.errors import ConflictError, ControllerGoneError, InvalidEventError
from vsa_core.naming import slot_key, slot_of_key

# --- pure ------------------------------------------------------------------------------------------


@given(
    leased=st.dictionaries(
        st.integers(0, 15), st.sampled_from([f"i-{n:017x}" for n in range(20)]), max_size=15
    )
)
def test_a_new_controller_gets_the_lowest_free_slot_and_a_retry_keeps_its_own(leased: dict[int, str]) -> None:
    me = "i-00000000000000fff"
    slot = slots.choose_slot(leased, me)
    assert slot not in leased
    assert all(s in leased for s in range(slot))
    assert slots.choose_slot({**leased, slot: me}, me) == slot


def test_sixteen_leased_slots_refuse_a_seventeenth_controller() -> None:
    full = {s: f"i-{s:017x}" for s in range(16)}
    with pytest.raises(ConflictError, match="at most 16 controllers"):
        slots.choose_slot(full, "i-00000000000000fff")


def test_slot_keys_round_trip_and_refuse_out_of_range() -> None:
    assert [slot_of_key(slot_key(s)) for s in range(16)] == list(range(16))
    assert slot_key(3) == "SLOT#03"
    with pytest.raises(ValueError, match=r"outside 0\.\.15"):
        slot_key(16)


def test_device_names_skip_what_the_instance_uses_and_never_repeat() -> None:
    volumes = [f"vol-{i:017x}" for i in range(30)]
    devices = slots.devices_for(volumes, ["/dev/xvda", "/dev/sdf"])
    assert len(set(devices.values())) == 30
    assert "/dev/sdf" not in devices.values()
    with pytest.raises(ConflictError, match="free device names"):
        slots.devices_for([f"vol-{i:017x}" for i in range(100)], [])


def spec(**overrides: Any) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "volumes": [{"volumeId": "vol-0a1b2c3d4e5f60001"}],
            "controllers": CONTROLLERS,
            "minControllers": 2,
            "maxControllers": 8,
            "hosts": [
                {"instanceId": "i-0a1b2c3d4e5f60101"},
                {"instanceId": "i-0a1b2c3d4e5f60102", "hostNqn": "nqn.2014-08.org.nvmexpress:uuid:host-b"},
            ],
            **overrides,
        }
    )


def test_paths_give_each_host_its_own_nqn_and_the_controllers_the_allowed_list() -> None:
    p = slots.paths(spec(), ("vol-a1", "vol-b2"))
    assert p.volumes == "vol-a1,vol-b2"
    derived = nvme.host_nqn(spec().hosts[0])
    assert [t for t in p.host_targets] == [
        ("i-0a1b2c3d4e5f60101", derived),
        ("i-0a1b2c3d4e5f60102", "nqn.2014-08.org.nvmexpress:uuid:host-b"),
    ]
    assert p.host_nqns == f"{derived},nqn.2014-08.org.nvmexpress:uuid:host-b"
    assert (
        p.allow_any_host,
        slots.paths(spec(allowAnyHost=True, authentication="none"), ()).allow_any_host,
    ) == (
        "false",
        "true",
    )


def test_paths_give_the_hosts_in_batches_sendcommand_accepts() -> None:
    # Given an array with 120 hosts (the spec bounds nothing; SendCommand takes 50 instance ids)
    hosts = [{"instanceId": f"i-0a1b2c3d4e5f6{n:04d}"} for n in range(120)]
    p = slots.paths(spec(hosts=hosts), ("vol-a1",))
    # Then a document for every host goes out as three commands, every host in exactly one
    assert [len(b) for b in p.host_batches] == [50, 50, 20]
    assert [i for b in p.host_batches for i in b] == list(p.hosts)
    assert p.as_dict()["hostBatches"] == [list(b) for b in p.host_batches]
    assert slots.paths(spec(hosts=[]), ()).as_dict()["hostBatches"] == []


def test_the_last_serving_controller_is_the_only_one_serving() -> None:
    leased = {
        0: {"instanceId": "i-a", "state": "serving"},
        1: {"instanceId": "i-b", "state": "bootstrapping"},
    }
    assert slots.last_serving(leased, "i-a")
    assert not slots.last_serving({**leased, 2: {"instanceId": "i-c", "state": "serving"}}, "i-a")


def test_scale_in_takes_the_serving_controller_in_the_highest_slot() -> None:
    leased = {
        0: {"instanceId": "i-c", "state": "serving"},
        3: {"instanceId": "i-a", "state": "serving"},
        5: {"instanceId": "i-b", "state": "draining"},
        6: {"instanceId": "i-e", "state": "bootstrapping"},
    }
    # i-b drains already and i-e is not serving: the highest serving slot is i-a's
    assert slots.leaver(leased, ["i-c", "i-a", "i-b", "i-e"]) == "i-a"
    # a controller in service without a serving slot goes only after the slotted ones
    assert slots.leaver(leased, ["i-c", "i-z"]) == "i-c"
    assert slots.leaver({}, ["i-1", "i-9", "i-5"]) == "i-9"
    assert slots.leaver(leased, []) is None


def test_a_scale_in_of_several_takes_them_in_the_order_one_at_a_time_would() -> None:
    leased = {
        0: {"instanceId": "i-c", "state": "serving"},
        3: {"instanceId": "i-a", "state": "serving"},
        5: {"instanceId": "i-b", "state": "draining"},
        6: {"instanceId": "i-e", "state": "bootstrapping"},
    }
    in_service = ["i-c", "i-a", "i-b", "i-e", "i-z"]
    chosen = slots.leavers(leased, in_service, 3)
    # each is the one leaver() picks once the ones before it are gone
    left = list(in_service)
    for one in chosen:
        assert one == slots.leaver(leased, left)
        left.remove(one)
    assert chosen[0] == "i-a"
    assert len(set(chosen)) == 3
    # never more than are in service, never one twice
    assert sorted(slots.leavers(leased, ["i-c", "i-a"], 5)) == ["i-a", "i-c"]
    assert slots.leavers(leased, in_service, 0) == []


# --- the trigger ------------------------------------------------------------------------------------


@pytest.fixture
def sfn(function_env: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(
        "VSA_BOOTSTRAP_STATE_MACHINE_ARN", "arn:aws:states:us-east-1:123456789012:stateMachine:B"
    )
    monkeypatch.setenv("VSA_DRAIN_STATE_MACHINE_ARN", "arn:aws:states:us-east-1:123456789012:stateMachine:D")
    return boto3.client("stepfunctions", region_name=REGION)


@pytest.mark.parametrize(
    ("sample", "machine", "prefix"),
    [
        ("autoscaling/launch_lifecycle_action.json", "B", "bootstrap-"),
        ("autoscaling/terminate_lifecycle_action.json", "D", "drain-"),
    ],
)
def test_a_lifecycle_action_starts_its_workflow_once(
    sfn: Any, registry_table: str, sample: str, machine: str, prefix: str
) -> None:
    event = trigger.ControllerEvent.model_validate(load_event(sample))
    register(registry_table, event.detail["AutoScalingGroupName"])
    workflow, name = trigger.execution(event)
    assert name.startswith(prefix + event.detail["EC2InstanceId"])
    assert trigger.execution(event) == (workflow, name)  # the same event, the same name
    arn = f"arn:aws:states:us-east-1:123456789012:stateMachine:{machine}"
    with Stubber(sfn) as stub:
        stub.add_response(
            "start_execution",
            {"executionArn": f"{arn}:{name}", "startDate": "2026-11-22T10:00:00Z"},
            {"stateMachineArn": arn, "name": name, "input": "{}"},
        )
        stub.add_client_error("start_execution", "ExecutionAlreadyExists", "exists")
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        assert trigger.start(event, "{}", sfn, dynamodb, trigger.settings())["started"] is True
        assert trigger.start(event, "{}", sfn, dynamodb, trigger.settings()) == {
            "started": False,
            "execution": name,
            "reason": "duplicate event",
        }


def register(table: str, group: str) -> None:
    """The spec item of the array whose controller group is ``group`` (as an apply stores it)."""
    array_id = group.removeprefix("vsa-").removesuffix("-controllers")
    boto3.client("dynamodb", region_name=REGION).put_item(
        TableName=table, Item={"pk": {"S": f"ARRAY#{array_id}"}, "sk": {"S": "SPEC"}}
    )


@pytest.mark.parametrize(
    "sample", ["autoscaling/launch_lifecycle_action.json", "autoscaling/terminate_lifecycle_action.json"]
)
def test_a_lifecycle_action_of_another_deployments_array_starts_nothing(
    sfn: Any, registry_table: str, sample: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a lifecycle action of a group this deployment's registry does not hold (the rule
    # matches every vsa-*-controllers group of the account: a second stack's arrays), and one of
    # a group that is no controller group at all
    event = trigger.ControllerEvent.model_validate(load_event(sample))
    foreign = trigger.ControllerEvent.model_validate(
        {**event.model_dump(by_alias=True), "detail": {**event.detail, "AutoScalingGroupName": "web-servers"}}
    )
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    with Stubber(sfn) as stub:
        # When each arrives, Then no workflow starts (the Stubber has no answer) and a log says why
        for each in (event, foreign):
            answer = trigger.start(each, "{}", sfn, dynamodb, trigger.settings())
            assert answer["started"] is False
            assert answer["reason"] == "not an array of this deployment"
        stub.assert_no_pending_responses()
    assert "not an array of this deployment: no workflow started" in caplog.text


def test_a_lost_instance_starts_a_drain_named_by_its_state() -> None:
    event = trigger.ControllerEvent.model_validate(load_event("ec2/instance_state_change.json"))
    assert trigger.execution(event) == ("drain", "lost-i-0a1b2c3d4e5f60003-terminated")


def lease(table: str, array_id: str, slot: int, instance_id: str, state: str = "serving") -> None:
    """A slot item as BootstrapController's LeaseSlot / MarkServing leave it."""
    boto3.client("dynamodb", region_name=REGION).put_item(
        TableName=table,
        Item={
            "pk": {"S": f"ARRAY#{array_id}"},
            "sk": {"S": slot_key(slot)},
            "instanceId": {"S": instance_id},
            "state": {"S": state},
            "address": {"S": f"10.0.0.{slot + 10}"},
        },
    )


def test_a_lost_controller_starts_its_drain_and_any_other_instance_nothing(
    sfn: Any, registry_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a controller of array demo in slot 0, and the sample state change re-aimed at it
    lease(registry_table, "demo", 0, "i-0a1b2c3d4e5f60003")
    event = trigger.ControllerEvent.model_validate(load_event("ec2/instance_state_change.json"))
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:D"
    name = "lost-i-0a1b2c3d4e5f60003-terminated"
    with Stubber(sfn) as stub:
        stub.add_response(
            "start_execution",
            {"executionArn": f"{arn}:{name}", "startDate": "2026-11-22T10:00:00Z"},
            {"stateMachineArn": arn, "name": name, "input": "{}"},
        )
        # When EC2 announces it terminated / Then its drain starts
        assert trigger.start(event, "{}", sfn, dynamodb, trigger.settings())["started"] is True
        # When another instance of the region (a host, anything) terminates
        other = trigger.ControllerEvent.model_validate(
            {
                **event.model_dump(by_alias=True),
                "detail": {"instance-id": "i-0ffffffffffffffff", "state": "terminated"},
            }
        )
        # Then nothing starts (the Stubber has no second answer) and a log line says why
        assert trigger.start(other, "{}", sfn, dynamodb, trigger.settings()) == {
            "started": False,
            "execution": "lost-i-0ffffffffffffffff-terminated",
            "reason": "not a controller",
        }
        stub.assert_no_pending_responses()
    assert "not a controller: no workflow started" in caplog.text


def test_an_event_of_another_kind_is_refused_by_name() -> None:
    event = trigger.ControllerEvent.model_validate(
        {
            **load_event("ec2/instance_state_change.json"),
            "detail-type": "EC2 Spot Instance Interruption Warning",
        }
    )
    with pytest.raises(InvalidEventError, match="not a controller event"):
        trigger.execution(event)


# --- the steps (moto) ---------------------------------------------------------------------------------


@pytest.fixture
def steps(registry_table: str) -> tuple[Steps, ArrayRegistry, Any]:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    registry = ArrayRegistry(registry_table, dynamodb)
    ec2 = boto3.client("ec2", region_name=REGION)
    service = ArrayService(scheduler_role_arn="arn:aws:iam::123456789012:role/s", ec2=ec2)
    return Steps(registry, service, ec2, boto3.client("ssm", region_name=REGION)), registry, ec2


def stubbed_ssm(steps: tuple[Steps, ArrayRegistry, Any]) -> tuple[Steps, Any]:
    """The steps with an SSM client of their own, for a Stubber (moto lacks the SSM calls)."""
    _, registry, ec2 = steps
    ssm = boto3.client("ssm", region_name=REGION)
    return Steps(registry, ArrayService(scheduler_role_arn="arn:aws:iam::1:role/s", ec2=ec2), ec2, ssm), ssm


def test_the_node_step_tells_an_unregistered_node_from_a_gone_instance(
    steps: tuple[Steps, ArrayRegistry, Any],
) -> None:
    # moto has no DescribeInstanceInformation: SSM answers through a Stubber, EC2 is moto's
    (runner, ssm), ec2 = stubbed_ssm(steps), steps[2]
    image = an_image_id(ec2)
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    asked = {"Filters": [{"Key": "InstanceIds", "Values": [instance]}]}
    with Stubber(ssm) as stub:
        stub.add_response("describe_instance_information", {"InstanceInformationList": []}, asked)
        stub.add_response(
            "describe_instance_information",
            {"InstanceInformationList": [{"InstanceId": instance, "PingStatus": "ConnectionLost"}]},
            asked,
        )
        # a running instance whose agent has not registered yet: wait for it
        assert runner.node(Node(step="node", instanceId=instance)) == {
            "online": False,
            "pingStatus": "NotRegistered",
            "instanceState": "running",
            "gone": False,
        }
        # terminated (its lifecycle action timed out, say): stop waiting
        ec2.terminate_instances(InstanceIds=[instance])
        answer = runner.node(Node(step="node", instanceId=instance))
        stub.assert_no_pending_responses()
    assert answer == {
        "online": False,
        "pingStatus": "ConnectionLost",
        "instanceState": "terminated",
        "gone": True,
    }


def test_prepare_attach_and_detach_a_controller(steps: tuple[Steps, ArrayRegistry, Any]) -> None:
    runner, registry, ec2 = steps
    volumes = [
        ec2.create_volume(
            AvailabilityZone="us-east-1a", Size=10, VolumeType="io2", Iops=1000, MultiAttachEnabled=True
        )["VolumeId"]
        for _ in range(2)
    ]
    registry.create(spec(volumes=[{"volumeId": v} for v in volumes]))
    image = an_image_id(ec2)
    instance = ec2.run_instances(
        ImageId=image, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"}
    )["Instances"][0]["InstanceId"]
    prepared = runner.prepare(Prepare(step="prepare", arrayId="demo", instanceId=instance))
    assert (prepared["slot"], prepared["slotKey"]) == (0, "SLOT#00")
    assert [a["VolumeId"] for a in prepared["attach"]] == volumes
    assert prepared["address"].count(".") == 3
    # the first volume attached by the attach step; the second was still creating then (the API
    # answers PUT without waiting for new volumes) and is available now: the attachment poll
    # starts its attachment itself
    first = prepared["attach"][0]
    ec2.attach_volume(VolumeId=first["VolumeId"], InstanceId=instance, Device=first["Device"])
    assert (
        runner.attachment(Attachment(step="attachment", arrayId="demo", instanceId=instance))["attached"]
        is True
    )
    devices = {
        a["Device"]
        for v in ec2.describe_volumes(VolumeIds=volumes)["Volumes"]
        for a in v["Attachments"]
        if a["InstanceId"] == instance
    }
    assert len(devices) == 2  # each on a device of its own
    # a retried prepare attaches nothing more
    assert runner.prepare(Prepare(step="prepare", arrayId="demo", instanceId=instance))["attach"] == []
    assert sorted(
        runner.detach(Detach(step="detach", arrayId="demo", instanceId=instance))["detached"]
    ) == sorted(volumes)


def test_locate_finds_a_controllers_slot_and_guards_the_last_serving_one(
    steps: tuple[Steps, ArrayRegistry, Any], registry_table: str
) -> None:
    runner, registry, _ = steps
    registry.create(spec())
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    for slot, instance, state in (
        (0, "i-0000000000000000a", "serving"),
        (1, "i-0000000000000000b", "bootstrapping"),
    ):
        dynamodb.put_item(
            TableName=registry_table,
            Item={
                "pk": {"S": "ARRAY#demo"},
                "sk": {"S": slot_key(slot)},
                "instanceId": {"S": instance},
                "state": {"S": state},
                "address": {"S": f"10.0.0.{slot + 10}"},
            },
        )
    found = runner.locate(Locate(step="locate", instanceId="i-0000000000000000a"))
    assert (found["found"], found["arrayId"], found["slot"], found["address"]) == (
        True,
        "demo",
        0,
        "10.0.0.10",
    )
    assert (found["lastServing"], found["allowLastPath"]) == (True, "false")
    # the hosts disconnect-path goes to, in batches SendCommand accepts
    assert found["hostBatches"] == [["i-0a1b2c3d4e5f60101", "i-0a1b2c3d4e5f60102"]]
    assert runner.locate(Locate(step="locate", instanceId="i-0000000000000000c")) == {
        "found": False,
        "instanceId": "i-0000000000000000c",
    }


def test_attach_starts_every_attachment_in_one_step_and_a_retry_skips_what_it_started(
    steps: tuple[Steps, ArrayRegistry, Any],
) -> None:
    runner, _, ec2 = steps
    volumes = [
        ec2.create_volume(
            AvailabilityZone="us-east-1a", Size=10, VolumeType="io2", Iops=1000, MultiAttachEnabled=True
        )["VolumeId"]
        for _ in range(3)
    ]
    image = an_image_id(ec2)
    instance = ec2.run_instances(
        ImageId=image, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"}
    )["Instances"][0]["InstanceId"]
    wanted = [{"VolumeId": v, "Device": f"/dev/sd{'fgh'[i]}"} for i, v in enumerate(volumes)]
    # a step that failed after the first AttachVolume is retried: the first is skipped
    ec2.attach_volume(VolumeId=volumes[0], InstanceId=instance, Device="/dev/sdf")
    answer = runner.attach(Attach(step="attach", instanceId=instance, volumes=wanted))
    assert answer == {"requested": volumes[1:], "already": volumes[:1], "creating": []}
    attached = {
        v["VolumeId"]: a["Device"]
        for v in ec2.describe_volumes(VolumeIds=volumes)["Volumes"]
        for a in v["Attachments"]
        if a["InstanceId"] == instance
    }
    assert attached == {v: w["Device"] for v, w in zip(volumes, wanted, strict=True)}
    assert runner.attach(Attach(step="attach", instanceId=instance, volumes=wanted)) == {
        "requested": [],
        "already": sorted(volumes),
        "creating": [],
    }


def test_attach_leaves_a_volume_that_is_still_creating_to_the_attachment_polls(
    steps: tuple[Steps, ArrayRegistry, Any],
) -> None:
    # Given one volume available and one still creating (CreateVolume answered moments ago;
    # AttachVolume refuses a creating volume with IncorrectState)
    runner, _, ec2 = steps
    ready = "vol-0000000000000000a"
    new = "vol-0000000000000000b"
    instance = "i-0000000000000000c"
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_volumes",
            {
                "Volumes": [
                    {"VolumeId": ready, "State": "available", "Attachments": []},
                    {"VolumeId": new, "State": "creating", "Attachments": []},
                ]
            },
            {"VolumeIds": [ready, new]},
        )
        stub.add_response(
            "attach_volume",
            {"VolumeId": ready, "InstanceId": instance, "Device": "/dev/sdf", "State": "attaching"},
            {"VolumeId": ready, "InstanceId": instance, "Device": "/dev/sdf"},
        )
        wanted = [{"VolumeId": ready, "Device": "/dev/sdf"}, {"VolumeId": new, "Device": "/dev/sdg"}]
        # When the attach step runs
        answer = runner.attach(Attach(step="attach", instanceId=instance, volumes=wanted))
        stub.assert_no_pending_responses()
    # Then only the available one is attached, the creating one reported (no AttachVolume for it)
    assert answer == {"requested": [ready], "already": [], "creating": [new]}


@pytest.mark.parametrize(
    ("state", "gone"), [("shutting-down", True), ("terminated", True), ("running", False)]
)
def test_an_attach_refused_because_the_controller_is_gone_names_it_gone(
    steps: tuple[Steps, ArrayRegistry, Any], state: str, gone: bool
) -> None:
    # Given AttachVolume refused with IncorrectState (as EC2 and the local cloud answer an
    # instance that is not running: its lifecycle action timed out while the workflow worked)
    runner, _, ec2 = steps
    volume, instance = "vol-0000000000000000a", "i-0000000000000000c"
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_volumes",
            {"Volumes": [{"VolumeId": volume, "State": "available", "Attachments": []}]},
            {"VolumeIds": [volume]},
        )
        stub.add_client_error("attach_volume", "IncorrectState", f"Instance '{instance}' is not 'running'.")
        stub.add_response(
            "describe_instances",
            {
                "Reservations": [
                    {"Instances": [{"InstanceId": instance, "State": {"Code": 32, "Name": state}}]}
                ]
            },
            {"InstanceIds": [instance]},
        )
        request = Attach(
            step="attach", instanceId=instance, volumes=[{"VolumeId": volume, "Device": "/dev/sdf"}]
        )
        # Then a controller no longer running is named gone (the workflow undoes at once, saying
        # why); a running one's refusal (the volume's state) is EC2's error as it came
        expected = ControllerGoneError if gone else ClientError
        with pytest.raises(expected, match=f"controller {instance} is {state}" if gone else "IncorrectState"):
            runner.attach(request)
        stub.assert_no_pending_responses()


def test_attach_refuses_a_device_name_that_is_not_one() -> None:
    with pytest.raises(ValueError, match="Device"):
        Attach.model_validate(
            {
                "step": "attach",
                "instanceId": "i-0123456789abcdef0",
                "volumes": [{"VolumeId": "vol-0123456789abcdef0", "Device": "sdf; rm"}],
            }
        )


def test_connect_sends_the_document_to_each_host_with_its_own_nqn(
    steps: tuple[Steps, ArrayRegistry, Any],
) -> None:
    # the shared parameters plus the host's own HostNqn, one SendCommand per host (Stubber: the
    # request's exact shape; moto has no ListCommandInvocations for the step that follows)
    runner, ssm = stubbed_ssm(steps)
    shared = {"ArrayId": ["demo"], "Address": ["10.0.1.9"], "Volumes": ["vol-0123456789abcdef0"]}
    request = Connect.model_validate(
        {
            "step": "connect",
            "instanceId": "i-0000000000000c001",
            "document": "vsa-connect-path",
            "comment": "vsa demo connect-path to 10.0.1.9",
            "timeoutSeconds": 300,
            "parameters": shared,
            "hosts": [{"instanceId": "i-0000000000000a001", "hostNqn": "nqn.2014-08.org.nvmexpress:uuid:a"}],
        }
    )
    with Stubber(ssm) as stub:
        stub.add_response(
            "send_command",
            {"Command": {"CommandId": "11111111-0000-4000-8000-000000000001"}},
            {
                "DocumentName": "vsa-connect-path",
                "InstanceIds": ["i-0000000000000a001"],
                "Comment": "vsa demo connect-path to 10.0.1.9",
                "TimeoutSeconds": 300,
                "Parameters": {
                    **shared,
                    "HostNqn": ["nqn.2014-08.org.nvmexpress:uuid:a"],
                    "KeysSecretId": ["none"],
                },
            },
        )
        sent_after = datetime.now(UTC)
        answer = runner.connect(request)
        stub.assert_no_pending_responses()
    assert answer["document"] == "vsa-connect-path"
    assert answer["commands"] == [
        {"instanceId": "i-0000000000000a001", "commandId": "11111111-0000-4000-8000-000000000001"}
    ]
    # the poll looks back from before the send (SSM's clock may run behind the Lambda's)
    assert datetime.fromisoformat(answer["since"]) < sent_after
    with pytest.raises(ValueError, match="hosts"):
        Connect.model_validate({**request.model_dump(by_alias=True), "hosts": []})


def _invocation(command: str, instance: str, status: str, output: str = "") -> dict[str, Any]:
    plugin = {"Name": "connect", "Status": status, "Output": output}
    return {"CommandId": command, "InstanceId": instance, "Status": status, "CommandPlugins": [plugin]}


def test_commands_reports_every_hosts_invocation_from_one_call(
    steps: tuple[Steps, ArrayRegistry, Any],
) -> None:
    runner, ssm = stubbed_ssm(steps)
    hosts = [f"i-0000000000000a00{n}" for n in range(3)]
    ids = {h: f"00000000-0000-4000-8000-{h[-12:]}" for h in hosts}
    request = Commands.model_validate(
        {
            "step": "commands",
            "instanceId": "i-0000000000000c001",
            "document": "vsa-connect-path",
            "since": "2026-11-22T12:55:00+00:00",
            "commands": [{"instanceId": h, "commandId": ids[h]} for h in hosts],
        }
    )
    asked = {
        "Details": True,
        "Filters": [
            {"key": "DocumentName", "value": "vsa-connect-path"},
            {"key": "InvokedAfter", "value": "2026-11-22T12:55:00Z"},
        ],
    }
    other = _invocation("99999999-0000-4000-8000-000000000000", hosts[0], "Failed", "another array's")
    with Stubber(ssm) as stub:
        # round 1: one succeeded, one still running, one not listed yet (just sent); another
        # command of the same document in the window is none of ours
        stub.add_response(
            "list_command_invocations",
            {
                "CommandInvocations": [
                    other,
                    _invocation(ids[hosts[0]], hosts[0], "Success"),
                    _invocation(ids[hosts[1]], hosts[1], "InProgress"),
                ]
            },
            asked,
        )
        round_one = runner.commands(request)
        # round 2 (two pages): one failed, saying why in the tail of its output
        stub.add_response(
            "list_command_invocations",
            {
                "CommandInvocations": [
                    _invocation(
                        ids[hosts[1]], hosts[1], "Failed", "connecting\nno live path to 10.0.1.9 on vol-1"
                    ),
                ],
                "NextToken": "more",
            },
            asked,
        )
        stub.add_response(
            "list_command_invocations",
            {
                "CommandInvocations": [
                    _invocation(ids[hosts[0]], hosts[0], "Success"),
                    _invocation(ids[hosts[2]], hosts[2], "InProgress"),
                ]
            },
            {**asked, "NextToken": "more"},
        )
        round_two = runner.commands(request)
        # round 3: every one succeeded
        stub.add_response(
            "list_command_invocations",
            {"CommandInvocations": [_invocation(ids[h], h, "Success") for h in hosts]},
            asked,
        )
        round_three = runner.commands(request)
        stub.assert_no_pending_responses()
    assert {k: v for k, v in round_one.items() if k != "waitedSeconds"} == {
        "done": False,
        "failed": [],
        "running": hosts[1:],
        "succeeded": 1,
    }
    assert round_two["done"] is False
    assert round_two["running"] == hosts[2:]
    (failed,) = round_two["failed"]
    assert (failed["instanceId"], failed["status"]) == (hosts[1], "Failed")
    assert failed["error"].endswith("no live path to 10.0.1.9 on vol-1")
    assert {k: v for k, v in round_three.items() if k != "waitedSeconds"} == {
        "done": True,
        "failed": [],
        "running": [],
        "succeeded": 3,
    }
    # how long since the commands were sent (less the look-back margin), for the workflow's bound
    assert round_three["waitedSeconds"] > 0
