"""The deployment's own alarms as deployed on the local cloud: each exists under the stack's
name, pages the AlertsTopic and watches something that exists (a deployed state machine, the
dead-letter queue); a message in the dead-letter queue raises the dead-letters alarm."""

import os
import time
import uuid
from typing import Any

import boto3

from tests.infra.test_alarms import ALARMS
from tests.integration.arrays_world import control
from tests.integration.conftest import STACK


def deployed_alarms() -> dict[str, dict[str, Any]]:
    found = boto3.client("cloudwatch").describe_alarms(AlarmNamePrefix=f"{STACK}-")["MetricAlarms"]
    return {a["AlarmName"]: a for a in found}


def test_every_alarm_of_the_template_is_deployed_on_what_exists(stack_outputs: dict[str, str]) -> None:
    # Given the deployed stack
    deployed = deployed_alarms()
    sfn = boto3.client("stepfunctions")
    for resource, props in ALARMS.items():
        name = props["AlarmName"]["Sub"].replace("${AWS::StackName}", STACK)
        # Then each alarm exists and pages the stack's alerts topic
        assert name in deployed, f"{resource}: {name} not deployed"
        alarm = deployed[name]
        assert alarm["AlarmActions"] == [stack_outputs["AlertsTopicArn"]], name
        # And every state machine it watches is one the stack deployed
        for query in alarm.get("Metrics", []):
            for dimension in query.get("MetricStat", {}).get("Metric", {}).get("Dimensions", []):
                if dimension["Name"] == "StateMachineArn":
                    sfn.describe_state_machine(stateMachineArn=dimension["Value"])
        for dimension in alarm.get("Dimensions", []):
            if dimension["Name"] == "QueueName":
                assert stack_outputs["TriggerDeadLetterQueueUrl"].endswith("/" + dimension["Value"])


def test_a_message_in_the_dead_letter_queue_raises_the_dead_letters_alarm(
    stack_outputs: dict[str, str],
) -> None:
    # Given a trigger's event left in the dead-letter queue
    sqs, cloudwatch = boto3.client("sqs"), boto3.client("cloudwatch")
    url, term = stack_outputs["TriggerDeadLetterQueueUrl"], f"test-dead-letter-{uuid.uuid4().hex}"
    sqs.send_message(QueueUrl=url, MessageBody=term)
    alarm = f"{STACK}-dead-letters"
    try:
        # When SQS publishes the queue's depth (every minute, as on AWS: the local cloud's
        # LocalStack SQS reports ApproximateNumberOfMessagesVisible on that interval)
        queue = url.rsplit("/", 1)[-1]
        deadline = time.monotonic() + 180
        while True:
            now = time.time()
            points = cloudwatch.get_metric_statistics(
                Namespace="AWS/SQS",
                MetricName="ApproximateNumberOfMessagesVisible",
                Dimensions=[{"Name": "QueueName", "Value": queue}],
                StartTime=now - 600,
                EndTime=now + 60,
                Period=60,
                Statistics=["Maximum"],
            )["Datapoints"]
            if any(p["Maximum"] >= 1 for p in points):
                break
            assert time.monotonic() < deadline, "the queue's depth was never published"
            time.sleep(5)
        # Then the alarm evaluates to ALARM. (Asked until it does, within minutes: tests beside
        # this one receive from the queue too, and a receive hides the message for its
        # visibility timeout, so one minute's published depth can be 0 while the message stays.)
        deadline = time.monotonic() + 300
        while True:
            control(os.environ["AWS_ENDPOINT_URL"], "cloudwatch", "evaluate", AlarmName=alarm)
            state = deployed_alarms()[alarm]["StateValue"]
            if state == "ALARM":
                break
            assert time.monotonic() < deadline, f"{alarm} still {state} with a message in the queue"
            time.sleep(5)
    finally:
        # only this test's message is taken out (other tests read the queue for theirs)
        for message in sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=0
        ).get("Messages", []):
            if message["Body"] == term:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
