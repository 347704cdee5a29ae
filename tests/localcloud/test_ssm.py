"""SSM Run Command on local managed nodes, pinned to AWS's documented semantics.

Stock LocalStack (moto) answers SendCommand with Success at once without running anything,
accepts unknown documents and instances, sends an InstanceIds command to every instance of the
region, and has no ListCommandInvocations, CancelCommand or DescribeInstanceInformation: every
test here fails there.
"""

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.localcloud.conftest import assert_matches_sample

Node = tuple[str, Path]
TERMINAL = ("Success", "Failed", "TimedOut", "Cancelled")


@pytest.fixture
def ssm(aws: Callable[[str], Any]) -> Any:
    return aws("ssm")


@pytest.fixture
def make_node(
    aws: Callable[[str], Any], control: Callable[..., dict[str, Any]]
) -> Iterator[Callable[..., Node]]:
    """``make_node(managed=True)``: a running EC2 instance, registered as a managed node
    (its id and sandbox directory); terminated and deregistered afterwards."""
    ec2 = aws("ec2")
    made: list[str] = []

    def make(managed: bool = True) -> Node:
        instance = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0]
        made.append(instance["InstanceId"])
        if not managed:
            return instance["InstanceId"], Path()
        reply = control("ssm", "register_node", InstanceId=instance["InstanceId"])
        return instance["InstanceId"], Path(reply["Root"])

    yield make
    for instance_id in made:
        control("ssm", "deregister_node", InstanceId=instance_id)
    if made:
        ec2.terminate_instances(InstanceIds=made)


def until(fetch: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 15) -> Any:
    """Poll ``fetch`` until ``done`` holds (a local stand-in for the command_executed waiter,
    whose 5 s minimum delay would slow the suite)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not done within {timeout} s: {value}")
        time.sleep(0.2)


def finished(ssm: Any, command_id: str, instance_id: str, timeout: float = 15) -> dict[str, Any]:
    return until(
        lambda: ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id),
        lambda i: i["Status"] in TERMINAL,
        timeout,
    )


def run(ssm: Any, instance_ids: list[str], *commands: str, **extra: Any) -> str:
    parameters = {"commands": list(commands), **extra.pop("Parameters", {})}
    reply = ssm.send_command(
        DocumentName="AWS-RunShellScript", InstanceIds=instance_ids, Parameters=parameters, **extra
    )
    return str(reply["Command"]["CommandId"])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def error_code(info: pytest.ExceptionInfo[ClientError]) -> str:
    return str(info.value.response["Error"]["Code"])


def test_document_runs_in_the_node_sandbox_and_reports_its_output(ssm: Any, make_node) -> None:
    # Given a managed node
    instance_id, root = make_node()
    # When AWS-RunShellScript writes a file and prints its environment
    reply = ssm.send_command(
        DocumentName="AWS-RunShellScript",
        InstanceIds=[instance_id],
        Parameters={
            "commands": ["echo written > out.txt", "pwd", 'echo "$VSA_NODE_ROOT $AWS_SSM_INSTANCE_ID"']
        },
    )
    command = reply["Command"]
    # Then SendCommand answers Pending (nothing has run yet), and the script really runs
    assert command["Status"] == "Pending"
    assert command["InstanceIds"] == [instance_id]
    invocation = finished(ssm, command["CommandId"], instance_id)
    assert invocation["Status"] == "Success"
    assert invocation["ResponseCode"] == 0
    assert invocation["PluginName"] == "aws:runShellScript"
    assert invocation["StandardOutputContent"] == f"{root}\n{root} {instance_id}\n"
    assert (root / "out.txt").read_text() == "written\n"
    listed = ssm.list_commands(CommandId=command["CommandId"])["Commands"][0]
    assert (listed["Status"], listed["TargetCount"], listed["CompletedCount"], listed["ErrorCount"]) == (
        "Success",
        1,
        1,
        0,
    )


def test_failing_script_is_failed_with_its_exit_code_and_stderr(ssm: Any, make_node) -> None:
    instance_id, _ = make_node()
    command_id = run(ssm, [instance_id], "echo before", "echo broken >&2", "exit 3", "echo never")
    invocation = finished(ssm, command_id, instance_id)
    assert (invocation["Status"], invocation["ResponseCode"]) == ("Failed", 3)
    assert invocation["StandardOutputContent"] == "before\n"
    assert invocation["StandardErrorContent"] == "broken\n"
    listed = ssm.list_commands(CommandId=command_id)["Commands"][0]
    assert (listed["Status"], listed["ErrorCount"]) == ("Failed", 1)


def test_output_is_truncated_at_24000_and_8000_characters(ssm: Any, make_node) -> None:
    instance_id, _ = make_node()
    command_id = run(
        ssm, [instance_id], "head -c 30000 /dev/zero | tr '\\0' o", "head -c 9000 /dev/zero | tr '\\0' e >&2"
    )
    invocation = finished(ssm, command_id, instance_id)
    assert invocation["StandardOutputContent"] == "o" * 24000
    assert invocation["StandardErrorContent"] == "e" * 8000


def test_execution_timeout_ends_timed_out_and_kills_the_script(ssm: Any, make_node) -> None:
    instance_id, root = make_node()
    command_id = run(ssm, [instance_id], "echo $$ > pid", "sleep 60", Parameters={"executionTimeout": ["1"]})
    invocation = finished(ssm, command_id, instance_id)
    assert (invocation["Status"], invocation["StatusDetails"]) == ("TimedOut", "Execution Timed Out")
    assert invocation["ResponseCode"] == 137  # the Linux agent's code for a command it stopped
    assert not alive(int((root / "pid").read_text()))
    assert ssm.list_commands(CommandId=command_id)["Commands"][0]["Status"] == "TimedOut"


def test_cancel_command_kills_the_process_group(ssm: Any, make_node) -> None:
    # Given a script that started a background child and waits for it
    instance_id, root = make_node()
    command_id = run(ssm, [instance_id], "echo $$ > pid", "sleep 60 & echo $! > child", "wait")
    until(lambda: (root / "child").exists() and (root / "child").read_text().strip(), bool)
    pids = [int((root / name).read_text()) for name in ("pid", "child")]
    assert all(alive(pid) for pid in pids)
    # When the command is cancelled
    ssm.cancel_command(CommandId=command_id)
    # Then the invocation and the command end Cancelled and both processes are gone
    invocation = finished(ssm, command_id, instance_id)
    assert invocation["Status"] == "Cancelled"
    assert until(
        lambda: ssm.list_commands(CommandId=command_id)["Commands"][0]["Status"], lambda s: s == "Cancelled"
    )
    assert until(lambda: [alive(pid) for pid in pids], lambda states: not any(states), timeout=5)


def test_unknown_unmanaged_or_terminated_instances_are_invalid_instance_id(
    aws: Callable[[str], Any], ssm: Any, make_node
) -> None:
    unmanaged, _ = make_node(managed=False)
    terminated, _ = make_node()
    aws("ec2").terminate_instances(InstanceIds=[terminated])
    for instance_id in ("i-0123456789abcdef0", unmanaged, terminated):
        with pytest.raises(ClientError) as error:
            run(ssm, [instance_id], "true")
        assert error_code(error) == "InvalidInstanceId"


def test_unknown_document_is_invalid_document(ssm: Any, make_node) -> None:
    instance_id, _ = make_node()
    with pytest.raises(ClientError) as error:
        ssm.send_command(DocumentName=f"nope-{uuid.uuid4().hex[:6]}", InstanceIds=[instance_id])
    assert error_code(error) == "InvalidDocument"


@pytest.fixture
def document(ssm: Any) -> Iterator[str]:
    """A schemaVersion 2.2 Command document: three steps, the second failing with exit 4."""
    name = f"vsa-test-{uuid.uuid4().hex[:8]}"
    content = {
        "schemaVersion": "2.2",
        "description": "three steps",
        "parameters": {
            "Greeting": {"type": "String", "default": "hello"},
            "Target": {"type": "String", "allowedPattern": "^[a-z]+$"},
        },
        "mainSteps": [
            {
                "action": "aws:runShellScript",
                "name": "greet",
                "inputs": {"runCommand": ["echo {{ Greeting }} {{Target}} > greeting", "cat greeting"]},
            },
            {
                "action": "aws:runShellScript",
                "name": "fail",
                "inputs": {"runCommand": ["echo no >&2", "exit 4"]},
            },
            {"action": "aws:runShellScript", "name": "never", "inputs": {"runCommand": ["touch never"]}},
        ],
    }
    ssm.create_document(Name=name, Content=json.dumps(content), DocumentType="Command", DocumentFormat="JSON")
    yield name
    ssm.delete_document(Name=name)


def test_bad_parameters_are_invalid_parameters(ssm: Any, make_node, document: str) -> None:
    instance_id, _ = make_node()
    bad = [
        ("AWS-RunShellScript", {"commands": ["true"], "undeclared": ["x"]}),  # not in the document
        ("AWS-RunShellScript", {"workingDirectory": ["/"]}),  # commands is required
        (document, {}),  # Target has no default
        (document, {"Target": ["NOT LOWER"]}),  # breaks allowedPattern
    ]
    for name, parameters in bad:
        with pytest.raises(ClientError) as error:
            ssm.send_command(DocumentName=name, InstanceIds=[instance_id], Parameters=parameters)
        assert error_code(error) == "InvalidParameters", (name, parameters)


def test_multi_step_document_stops_at_the_failing_step_with_details_per_plugin(
    ssm: Any, make_node, document: str
) -> None:
    instance_id, root = make_node()
    reply = ssm.send_command(
        DocumentName=document, InstanceIds=[instance_id], Parameters={"Target": ["world"]}
    )
    command_id = reply["Command"]["CommandId"]
    invocation = finished(ssm, command_id, instance_id)
    assert (invocation["Status"], invocation["ResponseCode"]) == ("Failed", 4)
    greet = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id, PluginName="greet")
    assert (greet["Status"], greet["StandardOutputContent"]) == ("Success", "hello world\n")
    listed = ssm.list_command_invocations(CommandId=command_id, Details=True)["CommandInvocations"]
    assert [i["InstanceId"] for i in listed] == [instance_id]
    plugins = {p["Name"]: p for p in listed[0]["CommandPlugins"]}
    assert list(plugins) == ["greet", "fail", "never"]
    assert (plugins["greet"]["Status"], plugins["greet"]["Output"]) == ("Success", "hello world\n")
    assert (plugins["fail"]["Status"], plugins["fail"]["ResponseCode"]) == ("Failed", 4)
    assert "no" in plugins["fail"]["Output"]
    assert plugins["never"]["StatusDetails"] == "Skipped"
    assert not (root / "never").exists()
    assert "CommandPlugins" not in ssm.list_command_invocations(CommandId=command_id)["CommandInvocations"][0]


def test_only_the_targeted_nodes_receive_the_command(ssm: Any, make_node) -> None:
    # Given three managed nodes
    (first, first_root), (second, second_root), (_third, third_root) = make_node(), make_node(), make_node()
    # When a command names the first by InstanceIds and another the second by Targets
    by_ids = run(ssm, [first], "touch got-it")
    by_targets = ssm.send_command(
        DocumentName="AWS-RunShellScript",
        Targets=[{"Key": "InstanceIds", "Values": [second]}],
        Parameters={"commands": ["touch got-it"]},
    )["Command"]["CommandId"]
    finished(ssm, by_ids, first)
    finished(ssm, by_targets, second)
    # Then each command has exactly one invocation and only its node ran it
    assert [
        i["InstanceId"] for i in ssm.list_command_invocations(CommandId=by_ids)["CommandInvocations"]
    ] == [first]
    listed = ssm.list_command_invocations(CommandId=by_targets)["CommandInvocations"]
    assert [i["InstanceId"] for i in listed] == [second]
    assert (first_root / "got-it").exists()
    assert (second_root / "got-it").exists()
    assert not (third_root / "got-it").exists()
    assert ssm.list_commands(CommandId=by_targets)["Commands"][0]["TargetCount"] == 1


def test_invocations_filter_by_document_and_invoked_after(ssm: Any, make_node) -> None:
    # Given a command sent before a moment and one sent after it
    node_id, _ = make_node()
    before = run(ssm, [node_id], "true")
    finished(ssm, before, node_id)
    moment = datetime.now(UTC)
    time.sleep(0.01)
    after = run(ssm, [node_id], "true")
    finished(ssm, after, node_id)
    # When the invocations are listed by document and InvokedAfter (AWS's timestamp format)
    listed = ssm.list_command_invocations(
        Filters=[
            {"key": "DocumentName", "value": "AWS-RunShellScript"},
            {"key": "InvokedAfter", "value": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        ]
    )["CommandInvocations"]
    # Then only the later command's invocation is there, and InvokedBefore is the converse
    assert [i["CommandId"] for i in listed] == [after]
    earlier = ssm.list_command_invocations(
        Filters=[{"key": "InvokedBefore", "value": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}]
    )["CommandInvocations"]
    assert before in {i["CommandId"] for i in earlier}
    assert after not in {i["CommandId"] for i in earlier}
    with pytest.raises(ClientError, match="InvalidFilterValue"):
        ssm.list_command_invocations(Filters=[{"key": "InvokedAfter", "value": "yesterday"}])


def test_describe_instance_information_lists_managed_nodes_with_filters(
    aws: Callable[[str], Any], ssm: Any, make_node, control: Callable[..., dict[str, Any]]
) -> None:
    (online, _), (offline, _) = make_node(), make_node()
    unmanaged, _ = make_node(managed=False)
    control("ssm", "set_ping", InstanceId=offline, PingStatus="ConnectionLost")
    both = ssm.describe_instance_information(
        Filters=[{"Key": "InstanceIds", "Values": [online, offline, unmanaged]}]
    )
    info = {i["InstanceId"]: i for i in both["InstanceInformationList"]}
    assert set(info) == {online, offline}
    assert info[online]["PingStatus"] == "Online"
    assert info[offline]["PingStatus"] == "ConnectionLost"
    assert info[online]["PlatformType"] == "Linux"
    assert info[online]["ResourceType"] == "EC2Instance"
    assert info[online]["IPAddress"]
    assert info[online]["ComputerName"]
    assert info[online]["AgentVersion"]
    lost = ssm.describe_instance_information(
        InstanceInformationFilterList=[{"key": "PingStatus", "valueSet": ["ConnectionLost"]}]
    )["InstanceInformationList"]
    assert offline in [i["InstanceId"] for i in lost]
    assert online not in [i["InstanceId"] for i in lost]
    # a stopped instance's agent is not connected; a terminated one is no longer listed
    aws("ec2").stop_instances(InstanceIds=[online])
    stopped = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": [online]}])
    assert [i["PingStatus"] for i in stopped["InstanceInformationList"]] == ["ConnectionLost"]
    aws("ec2").terminate_instances(InstanceIds=[online])
    gone = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": [online]}])
    assert gone["InstanceInformationList"] == []
    with pytest.raises(ClientError) as error:
        ssm.describe_instance_information(Filters=[{"Key": "Nope", "Values": ["x"]}])
    assert error_code(error) == "InvalidFilterKey"


def test_offline_nodes_get_the_command_when_back_online_else_delivery_times_out(
    ssm: Any, make_node, control: Callable[..., dict[str, Any]]
) -> None:
    # Given two nodes that lost their connection
    (returns, returns_root), (stays_away, away_root) = make_node(), make_node()
    for instance_id in (returns, stays_away):
        control("ssm", "set_ping", InstanceId=instance_id, PingStatus="ConnectionLost")
    # When a command is sent with the shortest delivery timeout AWS accepts (30 s)
    command_id = run(
        ssm, [returns, stays_away], "touch ran", TimeoutSeconds=30, Parameters={"executionTimeout": ["1"]}
    )
    time.sleep(1)
    # Then it waits Pending; the node that comes back online receives and runs it
    assert ssm.get_command_invocation(CommandId=command_id, InstanceId=returns)["Status"] == "Pending"
    control("ssm", "set_ping", InstanceId=returns, PingStatus="Online")
    assert finished(ssm, command_id, returns)["Status"] == "Success"
    assert (returns_root / "ran").exists()
    # and the other ends Delivery Timed Out once the command expires (30 s + 1 s execution timeout)
    away = finished(ssm, command_id, stays_away, timeout=40)
    assert (away["Status"], away["StatusDetails"]) == ("TimedOut", "Delivery Timed Out")
    assert not (away_root / "ran").exists()
    listed = ssm.list_commands(CommandId=command_id)["Commands"][0]
    assert (listed["Status"], listed["StatusDetails"]) == ("TimedOut", "Delivery Timed Out")
    assert (listed["CompletedCount"], listed["DeliveryTimedOutCount"], listed["ErrorCount"]) == (2, 1, 0)


def test_pending_invocation_of_a_deregistered_node_is_undeliverable(
    ssm: Any, make_node, control: Callable[..., dict[str, Any]]
) -> None:
    instance_id, _ = make_node()
    control("ssm", "set_ping", InstanceId=instance_id, PingStatus="ConnectionLost")
    command_id = run(ssm, [instance_id], "true")
    control("ssm", "deregister_node", InstanceId=instance_id)
    invocation = finished(ssm, command_id, instance_id)
    assert (invocation["Status"], invocation["StatusDetails"]) == ("Failed", "Undeliverable")


def test_unknown_invocation_is_invocation_does_not_exist(ssm: Any, make_node) -> None:
    instance_id, _ = make_node()
    command_id = run(ssm, [instance_id], "true")
    for command, instance in ((str(uuid.uuid4()), instance_id), (command_id, "i-0123456789abcdef0")):
        with pytest.raises(ClientError) as error:
            ssm.get_command_invocation(CommandId=command, InstanceId=instance)
        assert error_code(error) == "InvocationDoesNotExist"


def test_status_change_events_have_the_aws_shapes(ssm: Any, make_node, event_capture) -> None:
    # Given a rule capturing SSM events
    capture = event_capture({"source": ["aws.ssm"]})
    instance_id, _ = make_node()
    # When a command runs to success
    command_id = run(ssm, [instance_id], "true")
    finished(ssm, command_id, instance_id)
    # Then EventBridge delivers invocation and command status changes in AWS's shapes
    arn = f"arn:aws:ec2:us-east-1:000000000000:instance/{instance_id}"
    mine = lambda e: e["detail"]["command-id"] == command_id  # noqa: E731

    def statuses(detail_type: str, count: int) -> list[dict[str, Any]]:
        return capture.wait_for(lambda e: mine(e) and e["detail-type"] == detail_type, count=count)

    invocation_events = statuses("EC2 Command Invocation Status-change Notification", 2)
    command_events = statuses("EC2 Command Status-change Notification", 2)
    # (EventBridge → SQS does not keep order: compare the statuses, then take the Success ones)
    assert sorted(e["detail"]["status"] for e in invocation_events) == ["InProgress", "Success"]
    assert sorted(e["detail"]["status"] for e in command_events) == ["InProgress", "Success"]
    invocation = next(e for e in invocation_events if e["detail"]["status"] == "Success")
    command = next(e for e in command_events if e["detail"]["status"] == "Success")
    assert_matches_sample(invocation, "ssm/command_invocation_status_change.json")
    parameters = frozenset({"commands", "arrayId"})  # the documents' own parameters differ
    assert_matches_sample(command, "ssm/command_status_change.json", optional=parameters)
    for event in (invocation, command):
        assert event["source"] == "aws.ssm"
        assert event["resources"] == [arn]
        assert (event["account"], event["region"]) == ("000000000000", "us-east-1")
    assert set(invocation["detail"]) == {
        "command-id",
        "document-name",
        "instance-id",
        "requested-date-time",
        "status",
    }
    assert invocation["detail"]["instance-id"] == instance_id
    assert invocation["detail"]["document-name"] == "AWS-RunShellScript"
    assert set(command["detail"]) == {
        "command-id",
        "document-name",
        "expire-after",
        "parameters",
        "requested-date-time",
        "status",
    }
    assert command["detail"]["parameters"] == {"commands": ["true"]}
    assert command["detail"]["requested-date-time"].endswith("Z")
