"""EventBridge PutEvents refused where AWS refuses it (vsa_localcloud/events_policy.py).

Written from AWS's documentation:
- Policy evaluation logic: an explicit Deny in a resource-based policy refuses the request,
  whatever identity policies allow and whoever asks (the account root too):
  https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html
- Event bus resource-based policies (Principal "*", conditions on aws:PrincipalArn):
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-bus-perms.html
- The refusal's message: "... is not authorized to perform: <action> on resource: <arn> with an
  explicit deny in a resource-based policy":
  https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_access-denied.html
- An entry whose source is reserved for AWS services fails on its own with
  NotAuthorizedForSourceException (PutEventsResultEntry):
  https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsResultEntry.html
- AWS::Events::EventBusPolicy puts a statement on a bus's policy (PutPermission):
  https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-events-eventbuspolicy.html
- AWS::Events::EventBus's Policy property, updatable with no interruption:
  https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-events-eventbus.html
Each test but the two guards (a bus without policy, a service's own event) fails on stock
LocalStack, which evaluates no bus policy and accepts any source.
"""

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.localcloud.conftest import EventCapture

ACCOUNT = "000000000000"  # the local cloud's default account
ROOT = f"arn:aws:iam::{ACCOUNT}:root"
SOURCE = "vsa.control-plane"
PUT_ANY_EVENT = {"Effect": "Allow", "Action": "events:PutEvents", "Resource": "*"}


def only_role_puts(bus_arn: str, role_arn: str) -> dict[str, Any]:
    """The product's bus policy: every principal but the deployment's scheduler role is denied."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "OnlyTheDeploymentPutsEvents",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "events:PutEvents",
                "Resource": bus_arn,
                "Condition": {"ArnNotEquals": {"aws:PrincipalArn": [role_arn]}},
            }
        ],
    }


def entry(bus: str, marker: str, source: str = SOURCE) -> dict[str, Any]:
    return {
        "Source": source,
        "DetailType": "Backup Requested",
        "Detail": json.dumps({"marker": marker}),
        "EventBusName": bus,
    }


class Bus:
    """A custom event bus whose rule (every event of ``SOURCE``) delivers to an SQS queue."""

    def __init__(self, aws: Callable[[str], Any]) -> None:
        self._events, self._sqs = aws("events"), aws("sqs")
        self.name = f"evpol-{uuid.uuid4().hex[:8]}"
        self.arn = self._events.create_event_bus(Name=self.name)["EventBusArn"]
        self.queue_url = self._sqs.create_queue(QueueName=self.name)["QueueUrl"]
        queue_arn = self._sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
        self._events.put_rule(
            Name=self.name, EventBusName=self.name, EventPattern=json.dumps({"source": [SOURCE]})
        )
        self._events.put_targets(
            Rule=self.name,
            EventBusName=self.name,
            Targets=[{"Id": "q", "Arn": queue_arn["Attributes"]["QueueArn"]}],
        )

    def markers_received(self, want: set[str], timeout: float = 20) -> set[str]:
        """The markers of the events delivered until ``want`` are all in, or ``timeout`` passes
        (then a further 2 s, so an event that should not come has had its chance)."""
        got: set[str] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not want <= got:
            reply = self._sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
            )
            got |= {json.loads(m["Body"])["detail"]["marker"] for m in reply.get("Messages", [])}
        for _ in range(2):
            reply = self._sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
            )
            got |= {json.loads(m["Body"])["detail"]["marker"] for m in reply.get("Messages", [])}
        return got

    def close(self) -> None:
        self._events.remove_targets(Rule=self.name, EventBusName=self.name, Ids=["q"])
        self._events.delete_rule(Name=self.name, EventBusName=self.name)
        self._events.delete_event_bus(Name=self.name)
        self._sqs.delete_queue(QueueUrl=self.queue_url)


@pytest.fixture
def bus(aws: Callable[[str], Any]) -> Iterator[Bus]:
    made = Bus(aws)
    yield made
    made.close()


@pytest.fixture
def role_events(aws: Callable[[str], Any], endpoint: str) -> Iterator[Callable[[], tuple[str, Any]]]:
    """``role_events()``: a new role allowed events:PutEvents on every bus, assumed from the
    test's keys (the local cloud checks no trust policy); its ARN and an EventBridge client
    signed with its session. Roles are removed after."""
    iam, made = aws("iam"), []

    def make() -> tuple[str, Any]:
        name = f"evpol-{uuid.uuid4().hex[:8]}"
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "scheduler.amazonaws.com"},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        document = {"Version": "2012-10-17", "Statement": [PUT_ANY_EVENT]}
        iam.put_role_policy(RoleName=name, PolicyName="put", PolicyDocument=json.dumps(document))
        made.append(name)
        creds = aws("sts").assume_role(RoleArn=arn, RoleSessionName="evpol")["Credentials"]
        client = boto3.client(
            "events",
            region_name="us-east-1",
            endpoint_url=endpoint,
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
        )
        return str(arn), client

    yield make
    for name in made:
        iam.delete_role_policy(RoleName=name, PolicyName="put")
        iam.delete_role(RoleName=name)


def refusal(client: Any, entries: list[dict[str, Any]]) -> str:
    """The AccessDeniedException message PutEvents answers; fails when the call is accepted."""
    with pytest.raises(ClientError) as refused:
        client.put_events(Entries=entries)
    error = refused.value.response["Error"]
    assert error["Code"] == "AccessDeniedException", error
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return str(error["Message"])


def test_a_bus_policy_deny_refuses_the_root_and_other_roles_and_admits_the_named_role(
    aws: Callable[[str], Any],
    bus: Bus,
    role_events: Callable[[], tuple[str, Any]],
    control: Callable[..., dict[str, Any]],
) -> None:
    # Given a bus whose policy denies PutEvents to every principal but the scheduler role, and
    # two roles whose identity policies allow PutEvents on every bus
    scheduler_arn, scheduler = role_events()
    other_arn, other = role_events()
    aws("events").put_permission(
        EventBusName=bus.name, Policy=json.dumps(only_role_puts(bus.arn, scheduler_arn))
    )

    # When the account's root keys put an event on it, Then the call is refused by the policy
    message = refusal(aws("events"), [entry(bus.name, "root")])
    assert message == (
        f"User: {ROOT} is not authorized to perform: events:PutEvents on resource: {bus.arn} "
        "with an explicit deny in a resource-based policy"
    )
    # And so is a role the policy does not name (its session is the "User"), by bus ARN too
    message = refusal(other, [entry(bus.arn, "other role")])
    assert message.startswith(f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{other_arn.split('/')[-1]}/evpol ")
    assert message.endswith("with an explicit deny in a resource-based policy")

    # When the scheduler role puts the event, Then it is accepted and reaches the rule's target
    accepted = scheduler.put_events(Entries=[entry(bus.name, "scheduler")])
    assert accepted["FailedEntryCount"] == 0, accepted
    assert bus.markers_received({"scheduler"}) == {"scheduler"}

    # And the refusals are listed with IAM's decisions, decided by the bus's statement
    denied = control("iam", "decisions", denied_only=True)["decisions"]
    mine = [d for d in denied if d["resources"] == [bus.arn]]
    assert {d["role"] for d in mine} == {ROOT, other_arn}
    assert all("OnlyTheDeploymentPutsEvents" in d["decided_by"] for d in mine)


def test_one_denied_bus_refuses_the_whole_call(
    aws: Callable[[str], Any], bus: Bus, role_events: Callable[[], tuple[str, Any]]
) -> None:
    # Given a bus that denies everyone but a role the test does not act as
    scheduler_arn, _ = role_events()
    aws("events").put_permission(
        EventBusName=bus.name, Policy=json.dumps(only_role_puts(bus.arn, scheduler_arn))
    )
    capture = EventCapture(aws, {"source": [SOURCE], "detail": {"marker": ["default bus"]}})
    try:
        # When one call puts an entry on the default bus and one on the denied bus
        refusal(aws("events"), [entry("default", "default bus"), entry(bus.name, "root")])
        # Then neither is delivered: the call was refused before any entry was processed
        assert capture.settle(seconds=3) == []
    finally:
        capture.close()


def test_a_bus_without_a_policy_accepts_every_principal(
    aws: Callable[[str], Any], bus: Bus, role_events: Callable[[], tuple[str, Any]]
) -> None:
    # Given a bus with no resource-based policy and a role allowed PutEvents
    _, role = role_events()
    # When the root and the role put events on it, Then both are accepted and delivered
    for client, marker in ((aws("events"), "root"), (role, "role")):
        answer = client.put_events(Entries=[entry(bus.name, marker)])
        assert answer["FailedEntryCount"] == 0, answer
    assert bus.markers_received({"root", "role"}) == {"root", "role"}


def test_an_aws_source_is_refused_entry_by_entry_and_never_delivered(
    aws: Callable[[str], Any],
    role_events: Callable[[], tuple[str, Any]],
    event_capture: Callable[[dict[str, Any]], EventCapture],
) -> None:
    # Given a rule on the default bus for Auto Scaling's lifecycle actions and the product's events
    marker = uuid.uuid4().hex
    capture = event_capture({"source": ["aws.autoscaling", SOURCE], "detail": {"marker": [marker]}})
    _, role = role_events()
    forged = {
        **entry("default", marker, source="aws.autoscaling"),
        "DetailType": "EC2 Instance-launch Lifecycle Action",
    }
    # When the root keys and a role put a forged aws.autoscaling event next to one of their own
    for client in (aws("events"), role):
        answer = client.put_events(Entries=[forged, entry("default", marker)])
        # Then the forged entry fails on its own and the other is accepted
        assert answer["FailedEntryCount"] == 1, answer
        assert answer["Entries"][0] == {
            "ErrorCode": "NotAuthorizedForSourceException",
            "ErrorMessage": "Not authorized for the source.",
        }
        assert "EventId" in answer["Entries"][1]
    # And only the product's own events reach the rule's target
    assert sorted(e["source"] for e in capture.settle(seconds=3)) == [SOURCE, SOURCE]


def test_a_service_s_own_events_still_arrive(
    control: Callable[..., dict[str, Any]], event_capture: Callable[[dict[str, Any]], EventCapture]
) -> None:
    # Given a rule for Auto Scaling's lifecycle actions
    marker = uuid.uuid4().hex
    capture = event_capture({"source": ["aws.autoscaling"], "detail": {"marker": [marker]}})
    # When the service emits one (the control endpoint puts events as AWS's services do)
    answer = control("events", "emit", Entries=[entry("default", marker, source="aws.autoscaling")])
    # Then it is accepted and delivered
    assert answer["FailedEntryCount"] == 0, answer
    assert len(capture.wait_for(lambda e: e["detail"]["marker"] == marker, timeout=20)) == 1


def test_a_cloudformation_event_bus_policy_denies_as_written(
    aws: Callable[[str], Any], bus: Bus, role_events: Callable[[], tuple[str, Any]]
) -> None:
    # Given the deny statement declared as an AWS::Events::EventBusPolicy (its Statement form)
    scheduler_arn, scheduler = role_events()
    statement = only_role_puts(bus.arn, scheduler_arn)["Statement"][0]
    statement.pop("Sid")
    template = {
        "Resources": {
            "Policy": {
                "Type": "AWS::Events::EventBusPolicy",
                "Properties": {
                    "EventBusName": bus.name,
                    "StatementId": "OnlyTheScheduler",
                    "Statement": statement,
                },
            }
        }
    }
    cfn, stack = aws("cloudformation"), f"evpol-{uuid.uuid4().hex[:8]}"
    cfn.create_stack(StackName=stack, TemplateBody=json.dumps(template))
    try:
        cfn.get_waiter("stack_create_complete").wait(
            StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )
        # When the root puts an event, Then the statement refuses it; the scheduler role's passes
        assert refusal(aws("events"), [entry(bus.name, "root")]).endswith(
            "explicit deny in a resource-based policy"
        )
        assert scheduler.put_events(Entries=[entry(bus.name, "scheduler")])["FailedEntryCount"] == 0
        assert bus.markers_received({"scheduler"}) == {"scheduler"}
    finally:
        cfn.delete_stack(StackName=stack)
        cfn.get_waiter("stack_delete_complete").wait(
            StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )


def test_a_cloudformation_event_bus_s_policy_property_is_applied_and_updated(
    aws: Callable[[str], Any], role_events: Callable[[], tuple[str, Any]]
) -> None:
    # Given a stack whose AWS::Events::EventBus declares the deny policy as its Policy property
    scheduler_arn, _ = role_events()
    name = f"evpol-{uuid.uuid4().hex[:8]}"
    arn = f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/{name}"
    bus: dict[str, Any] = {"Type": "AWS::Events::EventBus", "Properties": {"Name": name}}
    bus["Properties"]["Policy"] = only_role_puts(arn, scheduler_arn)
    cfn, events = aws("cloudformation"), aws("events")
    waiter = {"Delay": 1, "MaxAttempts": 60}
    cfn.create_stack(StackName=name, TemplateBody=json.dumps({"Resources": {"Bus": bus}}))
    try:
        cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig=waiter)
        # When the root puts an event on the bus, Then the policy refuses it
        assert refusal(events, [entry(name, "root")]).endswith("explicit deny in a resource-based policy")
        # When an update removes the policy, Then the root's event is accepted
        bus["Properties"].pop("Policy")
        bus["Properties"]["Description"] = "no policy"
        cfn.update_stack(StackName=name, TemplateBody=json.dumps({"Resources": {"Bus": bus}}))
        cfn.get_waiter("stack_update_complete").wait(StackName=name, WaiterConfig=waiter)
        assert events.put_events(Entries=[entry(name, "root")])["FailedEntryCount"] == 0
    finally:
        cfn.delete_stack(StackName=name)
        cfn.get_waiter("stack_delete_complete").wait(StackName=name, WaiterConfig=waiter)
