"""Backup copies and disaster recovery end to end on the local cloud with two Regions: the
deployment's stack in us-east-1 copies a set of an array whose volume holds a real ext4
filesystem into us-west-2 (CopyBackupSet, the real Lambda code), and the same deployment's stack
in us-west-2, whose registry never saw the set, lists the copy and restores it into a new array
there, whose volume reads back the set's file. The local cloud's snapshots and their copies carry
data (tests/localcloud/test_ebs_data.py, test_ebs_copy.py)."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.integration.arrays_world import AMI, control, read_array
from tests.integration.backups_world import BackupArray, backup_finished
from tests.integration.conftest import DR_REGION, STACK, Api
from tests.integration.runs import until_final
from tests.prerequisites import require
from vsa_core.waiters import execution_arn

MARKER = "copied-out-and-back"


@pytest.fixture
def ext4_tools() -> None:
    missing = [t for t in ("mkfs.ext4", "debugfs") if shutil.which(t) is None]
    require(missing and f"the copy carries a real ext4 filesystem: install e2fsprogs ({missing})")


@pytest.fixture
def dr_api(local_env: dict[str, str], dr_outputs: dict[str, str]) -> Api:
    return Api(local_env["AWS_ENDPOINT_URL"], dr_outputs["ApiId"], region=DR_REGION)


def data_path(volume_id: str) -> str:
    found = control(os.environ["AWS_ENDPOINT_URL"], "ebs", "data_file", VolumeId=volume_id)
    assert found["Exists"], found
    return str(found["Path"])


def copy_run_ended(stack_outputs: dict[str, str], backup_id: str) -> dict[str, Any]:
    """The set's CopyBackupSet run (named after it, started by ConsistentBackup's last states),
    once it has ended."""
    return until_final(execution_arn(stack_outputs["CopyBackupSetStateMachineArn"], backup_id))


@pytest.mark.usefixtures("ext4_tools")
def test_a_set_copied_to_another_region_restores_there_into_a_new_array_with_its_data(
    api: Api, dr_api: Api, backup_array: Any, stack_outputs: dict[str, str], tmp_path: Path
) -> None:
    # Given an array copying its sets to the DR Region, its volume holding a file, and a set of it
    array: BackupArray = backup_array(
        volumes=1, hosts=1, mode="crash", policy={"copies": [{"region": DR_REGION, "retention": 1}]}
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "proof.txt").write_text(MARKER)
    subprocess.run(
        [
            "mkfs.ext4",
            "-F",
            "-q",
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1",
            "-d",
            str(tmp_path / "src"),
            data_path(array.volumes[0]),
        ],
        check=True,
    )
    status, backup = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "crash"})
    assert status == 202, backup
    backup_id = backup["backupId"]
    assert backup_finished(stack_outputs, backup_id)["status"] == "SUCCEEDED"

    # When ConsistentBackup's CopyBackupSet run (named after the set) has copied it
    assert copy_run_ended(stack_outputs, backup_id)["status"] == "SUCCEEDED"

    # Then the set records its copy, completed, one copy per snapshot
    shown = api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")[1]
    [copy] = shown["copies"]
    assert (copy["region"], copy["state"]) == (DR_REGION, "completed"), copy
    assert [s["sourceSnapshotId"] for s in copy["snapshots"]] == [s["snapshotId"] for s in shown["snapshots"]]

    # And the DR Region's stack lists it from the copies' tags alone
    status, listed = dr_api.call("GET", f"/copies?arrayId={array.array_id}")
    assert status == 200, listed
    [copied] = listed["copies"]
    assert (copied["backupId"], copied["state"]) == (backup_id, "complete")

    # When it is restored there into a new array (its spec for that Region)
    new_array = f"{array.array_id}-dr"
    spec = {
        "specVersion": 1,
        "arrayId": new_array,
        "availabilityZone": f"{DR_REGION}a",
        "volumes": [],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI},
        "perControllerIops": 260_000,
        "minControllers": 1,
        "maxControllers": 2,
    }
    status, restored = dr_api.call("POST", f"/copies/{backup_id}/restores", {"spec": spec})
    assert status == 201, restored
    try:
        # Then the new array is registered there, awaiting its first apply, on the restored volume
        status, registered = read_array(dr_api, new_array)
        assert status == 200, registered
        [volume] = restored["volumes"]
        assert registered["spec"]["volumes"] == [{"volumeId": volume["volumeId"]}]
        assert registered["applying"]["reason"] == "restored", registered
        # and its volume reads back the set's file, from the copy's blocks
        read = subprocess.run(
            ["debugfs", "-R", "cat /proof.txt", data_path(volume["volumeId"])],
            capture_output=True,
            text=True,
            check=True,
        )
        assert read.stdout.strip() == MARKER
        dr_ec2 = boto3.client("ec2", region_name=DR_REGION)
        [made] = dr_ec2.describe_volumes(VolumeIds=[volume["volumeId"]])["Volumes"]
        assert made["AvailabilityZone"] == f"{DR_REGION}a"
        assert made["SnapshotId"] == copy["snapshots"][0]["snapshotId"]
    finally:
        dr_api.call("DELETE", f"/arrays/{new_array}")


OTHER_ACCOUNT = "222222222222"
"""The local clouds' second account: the stack's BackupCopyAccounts (tools/deploy-local.sh). The
local cloud takes a 12-digit access key id as its account, and enforces IAM for assumed roles."""


def _copy_role_arn() -> str:
    """The deployment's copy steps' role (TaskCopyRole), the one the other account's role trusts."""
    stack = boto3.client("cloudformation").describe_stack_resource(
        StackName=STACK, LogicalResourceId="TaskCopyRole"
    )
    name = stack["StackResourceDetail"]["PhysicalResourceId"]
    return str(boto3.client("iam").get_role(RoleName=name)["Role"]["Arn"])


def _destination_role(trusted: str) -> tuple[Any, str]:
    """The role docs/backups.md ("Another account") asks the destination account for, made there:
    under /vsa-backup-copy/, trusting the copy role, allowed exactly what the page names (the
    set is unencrypted: no KMS grants)."""
    iam = boto3.client("iam", aws_access_key_id=OTHER_ACCOUNT, aws_secret_access_key="test")
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": trusted}, "Action": "sts:AssumeRole"}],
    }
    snapshots = "arn:aws:ec2:*::snapshot/*"
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "ec2:CopySnapshot", "Resource": snapshots},
            {
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": snapshots,
                "Condition": {"StringEquals": {"ec2:CreateAction": "CopySnapshot"}},
            },
            {"Effect": "Allow", "Action": "ec2:DescribeSnapshots", "Resource": "*"},
            {
                "Effect": "Allow",
                "Action": "ec2:DeleteSnapshot",
                "Resource": snapshots,
                "Condition": {"StringLike": {"aws:ResourceTag/vsa:copy-of": "*"}},
            },
        ],
    }
    name = f"dr-{int(time.time() * 1000) % 10**9}"
    role = iam.create_role(
        RoleName=name, Path="/vsa-backup-copy/", AssumeRolePolicyDocument=json.dumps(trust)
    )["Role"]
    iam.put_role_policy(RoleName=name, PolicyName="copies", PolicyDocument=json.dumps(policy))
    return iam, str(role["Arn"])


def test_a_set_copied_to_another_account_is_made_there_by_its_role_and_unshared_after(
    api: Api, backup_array: Any, stack_outputs: dict[str, str]
) -> None:
    # Given a role in another account, made as the backups page says, and an array copying its
    # sets into that account's DR Region through it
    iam, role_arn = _destination_role(_copy_role_arn())
    copies = [{"region": DR_REGION, "accountId": OTHER_ACCOUNT, "roleArn": role_arn, "retention": 1}]
    array: BackupArray = backup_array(volumes=2, hosts=1, mode="crash", policy={"copies": copies})
    try:
        # When a set is taken and its CopyBackupSet run ends
        status, backup = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "crash"})
        assert status == 202, backup
        backup_id = backup["backupId"]
        assert backup_finished(stack_outputs, backup_id)["status"] == "SUCCEEDED"
        ended = copy_run_ended(stack_outputs, backup_id)
        shown = api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")[1]
        assert ended["status"] == "SUCCEEDED", (ended.get("cause"), shown.get("copies"))

        # Then the set records its copy in that account, completed, one copy per snapshot
        [copy] = shown["copies"]
        assert (copy["region"], copy["accountId"], copy["state"]) == (
            DR_REGION,
            OTHER_ACCOUNT,
            "completed",
        ), copy
        sources = {s["snapshotId"] for s in shown["snapshots"]}
        assert {s["sourceSnapshotId"] for s in copy["snapshots"]} == sources
        # and the copies are the other account's own, in its DR Region, completed and tagged as
        # copies of this set's snapshots
        there = boto3.client(
            "ec2", region_name=DR_REGION, aws_access_key_id=OTHER_ACCOUNT, aws_secret_access_key="test"
        )
        made = there.describe_snapshots(SnapshotIds=[s["snapshotId"] for s in copy["snapshots"]])["Snapshots"]
        assert {s["OwnerId"] for s in made} == {OTHER_ACCOUNT}
        assert {s["State"] for s in made} == {"completed"}
        tagged = {t["Value"] for s in made for t in s.get("Tags", []) if t["Key"] == "vsa:copy-of"}
        assert tagged == {f"us-east-1/{source}" for source in sources}
        # and the source snapshots are no longer shared with it (shared for the copy only)
        ec2 = boto3.client("ec2")
        for source in sources:
            shared = ec2.describe_snapshot_attribute(SnapshotId=source, Attribute="createVolumePermission")
            assert shared["CreateVolumePermissions"] == [], (source, shared)
        # and this account holds no copy in the DR Region: the copy was made there, by its role
        here = boto3.client("ec2", region_name=DR_REGION).describe_snapshots(
            Filters=[{"Name": "tag:vsa:copy-of", "Values": sorted(tagged)}]
        )["Snapshots"]
        assert here == []
    finally:
        iam.delete_role_policy(RoleName=role_arn.rsplit("/", 1)[1], PolicyName="copies")
        iam.delete_role(RoleName=role_arn.rsplit("/", 1)[1])
