"""DH-HMAC-CHAP on the local cloud (issue #20): the real template deployed, the real Lambda code,
the real documents run by Run Command on the nodes' sandboxes with each node's own instance-role
credentials, and the local cloud's IAM enforcement deciding who reads which secret.

A new array authenticates by default: the apply stores the array's keys and each host's copy,
the controller's bootstrap its own copy; configure-target writes the keys into nvmet's host
entries and connect-path connects with them, each reading its secret on the node. The stack's
NodeKeysPolicy lets a node read only the secret tagged with its own instance ARN
(``ec2:SourceInstanceARN``): another node, of this array or of none, is refused. A rotation
(POST /arrays/{id}/rotate-keys) runs ReconcileArray's rekey phase: every key new, nvmet and the
copies at them, the paths live throughout."""

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import WaiterError

from tests.integration.arrays_world import (
    World,
    create_array,
    follow_run,
    get_array,
    host_paths,
    node_root,
    settle,
    spec_for,
)
from tests.integration.conftest import STACK, Api

AS_TEXT = "--query SecretString --output text"  # as documents/lib/dhchap.sh asks


def _parameter(name: str) -> str:
    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return next(p["ParameterValue"] for p in stack["Parameters"] if p["ParameterKey"] == name)


def _read_on(instance_id: str, secret_id: str) -> tuple[str, str, str]:
    """Run the nodes' AWS CLI on ``instance_id`` (Run Command, as a document does) to read
    ``secret_id``: (invocation status, stdout, stderr)."""
    ssm = boto3.client("ssm")
    aws = _parameter("NodeAwsCommand")
    command = ssm.send_command(
        DocumentName="AWS-RunShellScript",
        InstanceIds=[instance_id],
        Parameters={"commands": [f"{aws} secretsmanager get-secret-value --secret-id {secret_id} {AS_TEXT}"]},
    )["Command"]["CommandId"]
    waiter = ssm.get_waiter("command_executed")
    # a failed command ends the waiter with an error; the invocation says how it ended
    with contextlib.suppress(WaiterError):
        waiter.wait(CommandId=command, InstanceId=instance_id, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    invocation = ssm.get_command_invocation(CommandId=command, InstanceId=instance_id)
    return (
        str(invocation["Status"]),
        str(invocation.get("StandardOutputContent", "")),
        str(invocation.get("StandardErrorContent", "")),
    )


def _secret(name: str) -> dict[str, Any]:
    return dict(json.loads(boto3.client("secretsmanager").get_secret_value(SecretId=name)["SecretString"]))


def _nvmet_host(root: Path, nqn: str) -> Path:
    return root / "sys/kernel/config/nvmet/hosts" / nqn


def test_a_new_array_authenticates_its_host_with_keys_only_that_node_can_read(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    # Given a new array of one host and one controller, its spec silent on authentication
    array_id = arrays()
    spec = spec_for(
        array_id, world, volumes=[{"volumeId": world.volume()}], minControllers=1, maxControllers=1
    )
    assert "authentication" not in spec
    _, reply = create_array(api, array_id, spec)
    assert reply["array"]["authentication"] == "dh-hmac-chap", reply
    settle(array_id)
    host = spec["hosts"][0]["instanceId"]
    (controller,) = [
        i["InstanceId"]
        for i in boto3.client("autoscaling").describe_auto_scaling_groups(
            AutoScalingGroupNames=[f"vsa-{array_id}-controllers"]
        )["AutoScalingGroups"][0]["Instances"]
    ]

    # Then the keys are the control plane's: the array's secret and one copy per node
    keys = _secret(f"vsa/{array_id}/keys")
    (nqn,) = keys["hosts"]
    assert _secret(f"vsa/{array_id}/node/{host}") == {
        "hostKey": keys["hosts"][nqn],
        "controllerKey": keys["controllerKey"],
    }
    assert _secret(f"vsa/{array_id}/node/{controller}") == keys
    tags = boto3.client("secretsmanager").describe_secret(SecretId=f"vsa/{array_id}/node/{host}")["Tags"]
    assert {t["Key"]: t["Value"] for t in tags}["vsa:node"].endswith(f":instance/{host}")

    # ... the controller wrote them into nvmet's entry for the host (both ways) ...
    entry = _nvmet_host(node_root(world.endpoint, controller), nqn)
    assert (entry / "dhchap_key").read_text().strip() == keys["hosts"][nqn]
    assert (entry / "dhchap_ctrl_key").read_text().strip() == keys["controllerKey"]
    # ... and the host connected with them: a live path on every volume
    paths = host_paths(node_root(world.endpoint, host))
    assert paths
    assert all(states and set(states.values()) == {"live"} for states in paths.values()), paths

    # And each node reads its own secret only, with its own instance role
    state, out, err = _read_on(host, f"vsa/{array_id}/node/{host}")
    assert (state, json.loads(out)["hostKey"]) == ("Success", keys["hosts"][nqn]), err
    # another node of the array (the controller) may not read the host's
    state, out, err = _read_on(controller, f"vsa/{array_id}/node/{host}")
    assert state == "Failed"
    assert "AccessDeniedException" in err
    assert "DHHC-1" not in out
    # nor a node outside the array, though it has the very same instance profile
    stranger = world.host()
    state, out, err = _read_on(stranger, f"vsa/{array_id}/node/{host}")
    assert state == "Failed"
    assert "AccessDeniedException" in err
    # nor may any node read the array's own secret
    state, _, err = _read_on(host, f"vsa/{array_id}/keys")
    assert state == "Failed"
    assert "AccessDeniedException" in err


def test_an_array_asked_without_authentication_stores_no_key_and_its_host_connects_without(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": world.volume()}],
        minControllers=1,
        maxControllers=1,
        authentication="none",
    )
    create_array(api, array_id, spec)
    settle(array_id)
    listed = boto3.client("secretsmanager").list_secrets(
        Filters=[{"Key": "name", "Values": [f"vsa/{array_id}/"]}]
    )
    assert listed["SecretList"] == []
    host = spec["hosts"][0]["instanceId"]
    paths = host_paths(node_root(world.endpoint, host))
    assert paths
    assert all(set(states.values()) == {"live"} for states in paths.values()), paths


def test_rotate_keys_replaces_every_key_controller_by_controller_with_paths_kept_live(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    # Given an array of one host and two controllers, authenticated, its paths live
    array_id = arrays()
    spec = spec_for(
        array_id, world, volumes=[{"volumeId": world.volume()}], minControllers=2, maxControllers=2
    )
    create_array(api, array_id, spec)
    settle(array_id)
    host = spec["hosts"][0]["instanceId"]
    controllers = [
        i["InstanceId"]
        for i in boto3.client("autoscaling").describe_auto_scaling_groups(
            AutoScalingGroupNames=[f"vsa-{array_id}-controllers"]
        )["AutoScalingGroups"][0]["Instances"]
    ]
    old = _secret(f"vsa/{array_id}/keys")
    (nqn,) = old["hosts"]

    # When its keys are rotated (vsactl rotate-keys)
    status, reply = api.call("POST", f"/arrays/{array_id}/rotate-keys")
    assert status == 202, reply
    assert reply["rotation"] == "started"
    follow_run(reply)

    # Then the array's keys are all new, no rotation is left half-done
    new = _secret(f"vsa/{array_id}/keys")
    assert "rotation" not in new
    assert new["controllerKey"] != old["controllerKey"]
    assert new["hosts"][nqn] != old["hosts"][nqn]
    # ... each controller's nvmet holds the new keys for the host, and its copy holds no old key
    for controller in controllers:
        entry = _nvmet_host(node_root(world.endpoint, controller), nqn)
        assert (entry / "dhchap_key").read_text().strip() == new["hosts"][nqn]
        assert (entry / "dhchap_ctrl_key").read_text().strip() == new["controllerKey"]
        assert _secret(f"vsa/{array_id}/node/{controller}") == new
    # ... the host's copy holds the new keys only (no per-address keys left)
    assert _secret(f"vsa/{array_id}/node/{host}") == {
        "hostKey": new["hosts"][nqn],
        "controllerKey": new["controllerKey"],
    }
    # ... the host's kernel holds the new keys on both paths (its sysfs, as connect-path wrote them
    # one key at a time; the fake kernel keeps what it was given)
    held = {
        (ctrl / "address").read_text().strip(): (
            (ctrl / "dhchap_secret").read_text().strip(),
            (ctrl / "dhchap_ctrl_secret").read_text().strip(),
        )
        for ctrl in sorted((node_root(world.endpoint, host) / "sys/class/nvme").glob("nvme*"))
    }
    assert held
    assert set(held.values()) == {(new["hosts"][nqn], new["controllerKey"])}, held
    # ... and its paths through both controllers stayed live
    paths = host_paths(node_root(world.endpoint, host))
    assert paths
    assert all(len(states) == 2 and set(states.values()) == {"live"} for states in paths.values()), paths
    # and the array shows the run converged, its last step the rotation's end
    array = get_array(api, array_id)
    assert array["reconcile"]["state"] == "converged", array["reconcile"]


def test_rotate_keys_says_what_to_fix_without_authentication_or_array(
    api: Api, world: World, arrays: Callable[[], str]
) -> None:
    array_id = arrays()
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": world.volume()}],
        minControllers=1,
        maxControllers=1,
        authentication="none",
    )
    create_array(api, array_id, spec)
    status, reply = api.call("POST", f"/arrays/{array_id}/rotate-keys")
    assert status == 409, reply
    assert "authentication none" in reply["message"]
    assert "dh-hmac-chap" in reply["message"]
    status, reply = api.call("POST", "/arrays/no-such-array/rotate-keys")
    assert status == 404, reply
