"""The array's DH-HMAC-CHAP keys in Secrets Manager (vsa_core.arrays.aws_keys), on moto: what
each apply stores, what each node's copy holds and how it is tagged, and that no key leaves
Secrets Manager in a change."""

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.specs import BASE
from vsa_core.arrays import aws_keys, keys
from vsa_core.arrays.spec import ArraySpec
from vsa_core.nvme import host_nqn

REGION = "us-east-1"
HOST_1, HOST_2, HOST_3 = "i-0a1b2c3d4e5f60101", "i-0a1b2c3d4e5f60102", "i-0a1b2c3d4e5f60103"
CONTROLLER_1, CONTROLLER_2 = "i-0c0000000000000c1", "i-0c0000000000000c2"


@pytest.fixture
def clients() -> Iterator[aws_keys.KeysClients]:
    with mock_aws():
        key = boto3.client("kms", region_name=REGION).create_key(Description="keys")["KeyMetadata"]["Arn"]
        yield aws_keys.keys_clients(
            boto3.client("secretsmanager", region_name=REGION),
            key,
            "arn:aws:iam::123456789012:role/scheduler",
            REGION,
        )


def spec(*hosts: str, **overrides: Any) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            **BASE,
            "arrayId": "dbx",
            "availabilityZone": "us-east-1a",
            "minControllers": 2,
            "maxControllers": 4,
            "hosts": [{"instanceId": h} for h in hosts],
            **overrides,
        }
    )


def secret(clients: aws_keys.KeysClients, name: str) -> dict[str, Any]:
    return dict(json.loads(clients.secretsmanager.get_secret_value(SecretId=name)["SecretString"]))


def described(clients: aws_keys.KeysClients, name: str) -> dict[str, Any]:
    return dict(clients.secretsmanager.describe_secret(SecretId=name))


def test_an_apply_stores_the_keys_and_each_hosts_own_copy_tagged_to_that_host(
    clients: aws_keys.KeysClients,
) -> None:
    the_spec = spec(HOST_1, HOST_2)
    changes = aws_keys.converge(clients, the_spec, [])
    assert sorted((c.resource, c.action) for c in changes) == [
        ("secret/vsa/dbx/keys", "create"),
        (f"secret/vsa/dbx/node/{HOST_1}", "create"),
        (f"secret/vsa/dbx/node/{HOST_2}", "create"),
    ]
    stored = keys.ArrayKeys.from_secret(json.dumps(secret(clients, "vsa/dbx/keys")))
    nqn_1 = host_nqn(the_spec.hosts[0])
    assert secret(clients, f"vsa/dbx/node/{HOST_1}") == {
        "hostKey": stored.hosts[nqn_1],
        "controllerKey": stored.controller_key,
    }
    meta = described(clients, f"vsa/dbx/node/{HOST_1}")
    tags = {t["Key"]: t["Value"] for t in meta["Tags"]}
    assert tags == {
        "vsa:array": "dbx",
        "vsa:deployment": "vsa",
        "vsa:node": f"arn:aws:ec2:{REGION}:123456789012:instance/{HOST_1}",
        "vsa:keys": "node",
        # the content's digest: one ListSecrets says which copies are current
        "vsa:digest": aws_keys.digest(
            json.dumps({"hostKey": stored.hosts[nqn_1], "controllerKey": stored.controller_key})
        ),
    }
    assert meta["KmsKeyId"] == clients.kms_key_id
    # what the answer shows holds no key
    shown = json.dumps([c.as_dict() for c in changes])
    assert "DHHC-1" not in shown
    assert stored.controller_key not in shown


def test_a_reapply_changes_nothing_and_hosts_added_or_removed_change_only_theirs(
    clients: aws_keys.KeysClients,
) -> None:
    aws_keys.converge(clients, spec(HOST_1, HOST_2), [])
    before = secret(clients, "vsa/dbx/keys")
    assert aws_keys.converge(clients, spec(HOST_1, HOST_2), []) == []
    versions = clients.secretsmanager.list_secret_version_ids(SecretId=f"vsa/dbx/node/{HOST_1}")["Versions"]
    assert len(versions) == 1  # written once, not on every apply

    changes = aws_keys.converge(clients, spec(HOST_1, HOST_3), [])
    assert sorted((c.resource, c.action) for c in changes) == [
        ("secret/vsa/dbx/keys", "update"),
        (f"secret/vsa/dbx/node/{HOST_2}", "delete"),
        (f"secret/vsa/dbx/node/{HOST_3}", "create"),
    ]
    after = secret(clients, "vsa/dbx/keys")
    assert after["controllerKey"] == before["controllerKey"]
    nqn_1 = host_nqn(spec(HOST_1).hosts[0])
    assert after["hosts"][nqn_1] == before["hosts"][nqn_1]
    assert len(after["hosts"]) == 2
    assert list(aws_keys.node_secrets(clients, "dbx")) == [f"vsa/dbx/node/{HOST_1}", f"vsa/dbx/node/{HOST_3}"]


def test_a_controller_gets_its_copy_at_bootstrap_and_the_copies_of_controllers_gone_go(
    clients: aws_keys.KeysClients,
) -> None:
    the_spec = spec(HOST_1, HOST_2)
    aws_keys.converge(clients, the_spec, [])
    answer = aws_keys.write_controller(clients, the_spec, CONTROLLER_1, [CONTROLLER_1])
    assert answer == {"authentication": "dh-hmac-chap", "keysSecretId": f"vsa/dbx/node/{CONTROLLER_1}"}
    stored = secret(clients, "vsa/dbx/keys")
    assert secret(clients, answer["keysSecretId"]) == stored
    # controller 1 is lost without a drain; controller 2's bootstrap deletes its copy
    aws_keys.write_controller(clients, the_spec, CONTROLLER_2, [CONTROLLER_2])
    assert f"vsa/dbx/node/{CONTROLLER_1}" not in aws_keys.node_secrets(clients, "dbx")
    # an apply adding a host brings the serving controller's copy up to date, creates none
    changes = aws_keys.converge(clients, spec(HOST_1, HOST_2, HOST_3), [CONTROLLER_1, CONTROLLER_2])
    assert (f"secret/vsa/dbx/node/{CONTROLLER_2}", "update") in [(c.resource, c.action) for c in changes]
    assert f"vsa/dbx/node/{CONTROLLER_1}" not in aws_keys.node_secrets(clients, "dbx")
    assert len(secret(clients, f"vsa/dbx/node/{CONTROLLER_2}")["hosts"]) == 3


def test_a_draining_controller_keeps_its_copy_until_its_drain_lets_it_go() -> None:
    # with fencing a planned drain has the leaving controller release its volumes first, a
    # configure-target that reads its keys: a controller bootstrapping meanwhile must not drop them
    for state in ("InService", "Pending", "Pending:Wait", "Terminating", "Terminating:Wait"):
        assert aws_keys.keeps_keys(state), state
    for state in ("Terminating:Proceed", "Terminated"):
        assert not aws_keys.keeps_keys(state), state


def test_refresh_writes_each_controllers_copy_as_the_keys_are_now(clients: aws_keys.KeysClients) -> None:
    aws_keys.converge(clients, spec(HOST_1), [])
    aws_keys.write_controller(clients, spec(HOST_1), CONTROLLER_1, [CONTROLLER_1])
    # a host added while the controller bootstrapped: its copy lacks the new key until refreshed
    aws_keys.converge(clients, spec(HOST_1, HOST_2), [])
    aws_keys.refresh_controllers(clients, spec(HOST_1, HOST_2), [CONTROLLER_1, CONTROLLER_2])
    assert secret(clients, f"vsa/dbx/node/{CONTROLLER_1}") == secret(clients, "vsa/dbx/keys")
    assert secret(clients, f"vsa/dbx/node/{CONTROLLER_2}") == secret(clients, "vsa/dbx/keys")


def test_a_dry_run_says_what_would_change_and_changes_nothing(clients: aws_keys.KeysClients) -> None:
    changes = aws_keys.converge(clients, spec(HOST_1), [], dry_run=True)
    assert sorted((c.resource, c.action) for c in changes) == [
        ("secret/vsa/dbx/keys", "create"),
        (f"secret/vsa/dbx/node/{HOST_1}", "create"),
    ]
    assert clients.secretsmanager.list_secrets()["SecretList"] == []


def test_without_authentication_no_key_is_kept_and_the_nodes_read_none(clients: aws_keys.KeysClients) -> None:
    aws_keys.converge(clients, spec(HOST_1), [])
    aws_keys.write_controller(clients, spec(HOST_1), CONTROLLER_1, [CONTROLLER_1])
    off = spec(HOST_1, authentication="none")
    assert aws_keys.write_controller(clients, off, CONTROLLER_1) == {
        "authentication": "none",
        "keysSecretId": "none",
    }
    changes = aws_keys.converge(clients, off, [CONTROLLER_1])
    assert {c.action for c in changes} == {"delete"}
    assert clients.secretsmanager.list_secrets()["SecretList"] == []


def test_teardown_deletes_every_key_of_the_array_and_none_of_another(clients: aws_keys.KeysClients) -> None:
    aws_keys.converge(clients, spec(HOST_1), [])
    aws_keys.converge(clients, spec(HOST_2, arrayId="dbx-2"), [])
    deleted = aws_keys.delete_all(clients, "dbx")
    assert sorted(deleted) == ["vsa/dbx/keys", f"vsa/dbx/node/{HOST_1}"]
    assert aws_keys.delete_all(clients, "dbx") == []
    assert sorted(s["Name"] for s in clients.secretsmanager.list_secrets()["SecretList"]) == [
        "vsa/dbx-2/keys",
        f"vsa/dbx-2/node/{HOST_2}",
    ]


def test_the_arrays_own_keys_stay_recoverable_after_teardown_and_come_back_when_declared_again(
    clients: aws_keys.KeysClients,
) -> None:
    # Given an array's keys, and its teardown
    aws_keys.converge(clients, spec(HOST_1), [])
    before = aws_keys.array_keys(clients, "dbx")
    assert before is not None
    aws_keys.delete_all(clients, "dbx")
    # Then its own secret is scheduled for deletion (a recovery window), a node's copy is gone
    sm = clients.secretsmanager
    assert "DeletedDate" in sm.describe_secret(SecretId="vsa/dbx/keys")
    with pytest.raises(sm.exceptions.ResourceNotFoundException):
        sm.describe_secret(SecretId=f"vsa/dbx/node/{HOST_1}")
    assert aws_keys.array_keys(clients, "dbx") is None  # a read restores nothing
    # When the array is declared again within the window
    aws_keys.converge(clients, spec(HOST_1), [])
    # Then its keys are restored, not made anew: the host still holds its key
    after = aws_keys.array_keys(clients, "dbx")
    assert after is not None
    assert after.hosts == before.hosts
    assert "DeletedDate" not in sm.describe_secret(SecretId="vsa/dbx/keys")


def test_the_nodes_arns_come_from_the_stacks_key_arn_or_fail_saying_what_is_missing() -> None:
    made = aws_keys.keys_clients(None, "", "arn:aws-cn:kms:cn-north-1:123456789012:key/k", "cn-north-1")
    assert (
        made.node_arn("i-0123456789abcdef0")
        == "arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-0123456789abcdef0"
    )
    with pytest.raises(ValueError, match="need an ARN of the stack's"):
        aws_keys.keys_clients(None, "", "", REGION)
