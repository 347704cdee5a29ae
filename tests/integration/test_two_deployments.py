"""Two deployments in one account and region (staging beside production) never touch each
other's arrays: the real template deployed twice on one local cloud (the second as
``DeploymentName=st<run>``), one array of the same id in each, then the second's bootstrap,
scaling, drain, backup and teardown, each checked against the first's array. That a role of one
deployment is refused on another's resources even when it asks directly is shown in
``test_escalations.py::test_no_role_deletes_another_deployments_owned_volume``."""

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, WaiterError

from tests.infra.test_statemachine_definitions import load_template
from tests.integration.arrays_world import World, read_array, settle, spec_for, wait_until_gone
from tests.integration.conftest import Api, fire_alarm, recent_stamp, wait_for_execution
from tests.integration.runs import succeeded
from tests.node_profile import NAME as NODE_ROLE
from tests.node_profile import ensure_node_profile

ROOT = Path(__file__).resolve().parents[2]
RUN = uuid.uuid4().hex[:6]
SECOND = f"vsa-stage-{RUN}"
"""The second deployment's stack, named afresh each run: its access log group is retained when
the stack is deleted (as on AWS), and a stack of the same name could not create it again."""
STAGE = f"st{RUN}"
"""Its DeploymentName."""


def outputs(stack: str) -> dict[str, str]:
    described = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}


@pytest.fixture(scope="module")
def second(stack_outputs: dict[str, str], local_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The second deployment (this checkout's build, ``DeploymentName=STAGE``), deleted after."""
    env = {
        **os.environ,
        # the account's API Gateway logging role is the first deployment's
        "VSA_DEPLOY_PARAMETERS": f"DeploymentName={STAGE} ApiGatewayAccountRole=AlreadySet",
    }
    result = subprocess.run(
        ["bash", "tools/deploy-local.sh", "--stack-name", SECOND],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, (
        f"deploying {SECOND} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    deployed = outputs(SECOND)
    # the nodes' role reads each deployment's keys only through that deployment's policy (its
    # secrets are <DeploymentName>/...): an operator running both gives the role both
    iam = boto3.client("iam")
    ensure_node_profile(iam, deployed["NodeKeysPolicyArn"])
    yield deployed
    iam.detach_role_policy(RoleName=NODE_ROLE, PolicyArn=deployed["NodeKeysPolicyArn"])
    cloudformation = boto3.client("cloudformation")
    cloudformation.delete_stack(StackName=SECOND)
    cloudformation.get_waiter("stack_delete_complete").wait(
        StackName=SECOND, WaiterConfig={"Delay": 2, "MaxAttempts": 300}
    )
    boto3.client("logs").delete_log_group(logGroupName=f"/aws/apigateway/{SECOND}/access")


def group(prefix: str, array_id: str) -> dict[str, Any] | None:
    found = boto3.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[f"{prefix}-{array_id}-controllers"]
    )["AutoScalingGroups"]
    return found[0] if found else None


def settled(prefix: str, array_id: str, timeout: float = 300) -> dict[str, Any]:
    """The group once every controller is InService and it has DesiredCapacity of them."""
    deadline = time.monotonic() + timeout
    while True:
        found = group(prefix, array_id)
        assert found is not None, f"{prefix}-{array_id}-controllers is gone"
        states = [i["LifecycleState"] for i in found["Instances"]]
        if states.count("InService") == len(states) == found["DesiredCapacity"]:
            return found
        assert time.monotonic() < deadline, f"{prefix}'s {array_id}: controllers still {states}"
        time.sleep(1)


def apply_new(
    api: Api, outputs: dict[str, str], prefix: str, spec: dict[str, Any], timeout: float = 600
) -> None:
    """PUT a new array through ``api`` (``prefix``'s deployment) and follow its ReconcileArray run
    to the end. After API Gateway's 504 (an apply past 29 s on a loaded machine) it does what a
    caller does: GET until the spec is stored, its apply finished and the group made."""
    status, reply = api.call("PUT", f"/arrays/{spec['arrayId']}", spec)
    deadline = time.monotonic() + timeout
    while status == 504 or (status == 200 and reply.get("applying") is not None):
        assert time.monotonic() < deadline, f"{prefix}'s {spec['arrayId']} not applied: {status} {reply}"
        time.sleep(2)
        status, reply = api.call("GET", f"/arrays/{spec['arrayId']}")
        if status == 200 and group(prefix, spec["arrayId"]) is None:
            status = 504  # stored, its group not made yet: ask again
    assert status in (200, 201, 202), reply
    run = reply.get("reconcile") or {}
    # PUT's answer names the run's ARN; GET's, its name
    name = run.get("executionName") or run.get("execution")
    if name:
        machine = outputs["ReconcileArrayStateMachineArn"]
        succeeded(f"{machine.replace(':stateMachine:', ':execution:')}:{name}")


def footprint(prefix: str, array_id: str) -> dict[str, Any]:
    """What one deployment's array has in the account: its group (size, instances), its alarms,
    its schedule, its owned volumes and its secrets."""
    found = group(prefix, array_id)
    alarms = boto3.client("cloudwatch").describe_alarms(AlarmNamePrefix=f"{prefix}-{array_id}-")[
        "MetricAlarms"
    ]
    try:
        schedule = boto3.client("scheduler").get_schedule(Name=f"{prefix}-{array_id}-backup")["Name"]
    except ClientError:
        schedule = None
    volumes = boto3.client("ec2").describe_volumes(
        Filters=[
            {"Name": "tag:vsa:array", "Values": [array_id]},
            {"Name": "tag:vsa:deployment", "Values": [prefix]},
        ]
    )["Volumes"]
    secrets = boto3.client("secretsmanager").list_secrets(
        Filters=[{"Key": "name", "Values": [f"{prefix}/{array_id}/"]}]
    )["SecretList"]
    return {
        "group": None
        if found is None
        else (found["DesiredCapacity"], sorted(i["InstanceId"] for i in found["Instances"])),
        "alarms": sorted(a["AlarmName"] for a in alarms),
        "schedule": schedule,
        "volumes": sorted(v["VolumeId"] for v in volumes if v["State"] != "deleted"),
        "secrets": sorted(s["Name"] for s in secrets),
    }


def started_for(state_machine_arn: str) -> set[str]:
    """The instances a deployment's workflow (BootstrapController, DrainController) was started
    for (named in each execution's input)."""
    sfn = boto3.client("stepfunctions")
    pages = sfn.get_paginator("list_executions").paginate(stateMachineArn=state_machine_arn)
    inputs = (
        str(sfn.describe_execution(executionArn=e["executionArn"])["input"])
        for page in pages
        for e in page["executions"]
    )
    return {instance for text in inputs for instance in re.findall(r"i-[0-9a-f]{8,17}", text)}


@pytest.mark.timeout(1800)  # two arrays through five workflows each, beside other tests
def test_a_second_deployment_scales_drains_backs_up_and_tears_down_only_its_own_array(
    api: Api,
    stack_outputs: dict[str, str],
    second: dict[str, str],
    world: World,
    local_env: dict[str, str],
) -> None:
    # Given two deployments ("vsa", the default, and STAGE) and an array of the same id in each
    array_id = f"it-{uuid.uuid4().hex[:8]}"
    other_api = Api(local_env["AWS_ENDPOINT_URL"], second["ApiId"])
    for prefix, each_api, each in (("vsa", api, stack_outputs), (STAGE, other_api, second)):
        apply_new(each_api, each, prefix, spec_for(array_id, world, minControllers=1, maxControllers=2))
    try:
        # Then each one's controllers were launched in its own group and bootstrapped by its own
        # workflow only (the launch events of both groups reach both deployments' rules)
        first = settled("vsa", array_id)
        staged = settled(STAGE, array_id)
        mine = {i["InstanceId"] for i in first["Instances"]}
        theirs = {i["InstanceId"] for i in staged["Instances"]}
        assert mine
        assert theirs
        assert not mine & theirs
        assert started_for(stack_outputs["BootstrapControllerStateMachineArn"]) >= mine
        assert not started_for(stack_outputs["BootstrapControllerStateMachineArn"]) & theirs
        assert not started_for(second["BootstrapControllerStateMachineArn"]) & mine
        described = boto3.client("ec2").describe_instances(InstanceIds=sorted(mine | theirs))
        for reservation in described["Reservations"]:
            for each in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in each.get("Tags", [])}
                expected = "vsa" if each["InstanceId"] in mine else STAGE
                assert tags.get("vsa:deployment") == expected, tags
        before = footprint("vsa", array_id)
        assert before["group"] == (1, sorted(mine)), before
        assert len(before["alarms"]) == 2, before
        assert before["schedule"], before
        assert before["secrets"], before

        # When the second one's high alarm goes off: it scales out its own array, not the first's
        name = fire_alarm(array_id, 60_000, recent_stamp(), "high", deployment=STAGE)
        assert wait_for_execution(second["ScaleArrayStateMachineArn"], name)["status"] == "SUCCEEDED"
        assert settled(STAGE, array_id)["DesiredCapacity"] == 2
        assert footprint("vsa", array_id) == before
        first_scale = stack_outputs["ScaleArrayStateMachineArn"].replace(":stateMachine:", ":execution:")
        with pytest.raises(ClientError, match="ExecutionDoesNotExist"):
            boto3.client("stepfunctions").describe_execution(executionArn=f"{first_scale}:{name}")

        # When one of its controllers is taken out of its group (the terminate lifecycle action
        # reaches both deployments' rules): its own DrainController drains it, the first's not
        leaving = sorted(i["InstanceId"] for i in settled(STAGE, array_id)["Instances"])[-1]
        boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
            InstanceId=leaving, ShouldDecrementDesiredCapacity=True
        )
        assert settled(STAGE, array_id)["DesiredCapacity"] == 1
        assert leaving in started_for(second["DrainControllerStateMachineArn"])
        assert leaving not in started_for(stack_outputs["DrainControllerStateMachineArn"])
        settle(array_id)
        assert footprint("vsa", array_id) == before

        # When it backs its array up: the set is its own, tagged so; the first has none
        status, answer = other_api.call("POST", f"/arrays/{array_id}/backups", {"mode": "crash"})
        assert status == 202, answer
        backup_id = answer["backupId"]
        run = wait_for_execution(second["ConsistentBackupStateMachineArn"], backup_id)
        assert run["status"] == "SUCCEEDED", run.get("cause")
        snapshots = boto3.client("ec2").describe_snapshots(
            OwnerIds=["self"], Filters=[{"Name": "tag:vsa:backup", "Values": [backup_id]}]
        )["Snapshots"]
        assert snapshots
        for snapshot in snapshots:
            assert {"Key": "vsa:deployment", "Value": STAGE} in snapshot["Tags"]
        assert api.call("GET", f"/arrays/{array_id}/backups")[1]["backups"] == []

        # When it tears its array down, with its owned volumes
        status, answer = other_api.call("DELETE", f"/arrays/{array_id}?deleteVolumes=true")
        assert status == 202, answer
        wait_until_gone(other_api, array_id, timeout=300)

        # Then everything of the second's array is gone and the first's is as it was
        gone = footprint(STAGE, array_id)
        assert gone["group"] is None, gone
        assert gone["alarms"] == [], gone
        assert gone["schedule"] is None, gone
        assert gone["volumes"] == [], gone
        assert gone["secrets"] == [], gone
        assert footprint("vsa", array_id) == before
        status, shown = read_array(api, array_id)
        assert status == 200, shown
    finally:
        for each_api in (other_api, api):
            status, _ = each_api.call("DELETE", f"/arrays/{array_id}?deleteVolumes=true")
            if status in (200, 202):
                wait_until_gone(each_api, array_id, timeout=300)


def test_a_deployment_name_already_taken_in_the_account_fails_the_second_stack() -> None:
    # Given the template's claim on its DeploymentName (the first deployment holds "vsa")
    claim = _long_form(load_template()["Resources"]["DeploymentNameClaim"])
    body = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Parameters": {"DeploymentName": {"Type": "String"}},
        "Resources": {"DeploymentNameClaim": claim},
    }
    cloudformation = boto3.client("cloudformation")
    stack = f"it-claim-{uuid.uuid4().hex[:8]}"
    # When another stack claims the same name
    cloudformation.create_stack(
        StackName=stack,
        TemplateBody=json.dumps(body),
        Parameters=[{"ParameterKey": "DeploymentName", "ParameterValue": "vsa"}],
    )
    try:
        with pytest.raises(WaiterError):
            cloudformation.get_waiter("stack_create_complete").wait(
                StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
        # Then it fails, and the first deployment's claim still names the first stack
        value = boto3.client("ssm").get_parameter(Name="/vsa/deployments/vsa")["Parameter"]["Value"]
        assert value == "vsa-control-plane"
    finally:
        cloudformation.delete_stack(StackName=stack)


def _long_form(value: Any) -> Any:
    """A template value with its short-form intrinsics (as load_template keeps them) in long form."""
    if isinstance(value, dict):
        if len(value) == 1 and (key := next(iter(value))) in {"Sub", "GetAtt", "Join"}:
            return {f"Fn::{key}": _long_form(value[key])}
        return {k: _long_form(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_long_form(v) for v in value]
    return value
