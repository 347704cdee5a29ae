"""The freeze window's signals bucket as the template declares it: private, encrypted, TLS only,
markers that expire, written by the backup steps' role alone (a marker written early would
thaw a host before its snapshot), and that role's grants on it limited to the markers."""

import json
from typing import Any

from tests.infra.test_statemachine_definitions import load_template

RESOURCES: dict[str, Any] = load_template()["Resources"]


def test_the_bucket_is_private_encrypted_and_its_markers_expire_within_a_day() -> None:
    bucket = RESOURCES["SignalsBucket"]["Properties"]
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    assert bucket["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    sse = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert sse["SSEAlgorithm"] in ("AES256", "aws:kms")
    rules = bucket["LifecycleConfiguration"]["Rules"]
    assert any(r["Status"] == "Enabled" and r["ExpirationInDays"] <= 1 and "Prefix" not in r for r in rules)
    assert "VersioningConfiguration" not in bucket  # a version would outlive the expiry


def test_only_the_backup_steps_role_writes_a_marker_and_only_over_tls() -> None:
    policy = RESOURCES["SignalsBucketPolicy"]["Properties"]
    assert policy["Bucket"] == {"Ref": "SignalsBucket"}
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    tls = statements["TlsOnly"]
    assert (tls["Effect"], tls["Principal"], tls["Action"]) == ("Deny", "*", "s3:*")
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    write = statements["OnlyTheBackupStepsWrite"]
    assert (write["Effect"], write["Principal"], write["Action"]) == ("Deny", "*", "s3:PutObject")
    assert write["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": {"GetAtt": "TaskBackupRole.Arn"}}}


def test_no_role_but_the_backup_steps_is_granted_the_bucket_and_that_one_only_its_markers() -> None:
    granted: dict[str, list[dict[str, Any]]] = {}
    for name, resource in RESOURCES.items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for policy in resource["Properties"].get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                if "SignalsBucket" in json.dumps(statement):
                    granted.setdefault(name, []).append(statement)
    assert set(granted) == {"TaskBackupRole"}
    for statement in granted["TaskBackupRole"]:
        resource = statement["Resource"]["Sub"]
        if statement["Action"] == "s3:ListBucket":
            assert resource.endswith(":::${SignalsBucket}")
            assert statement["Condition"] == {"StringLike": {"s3:prefix": "signals/*"}}
        else:
            assert set(statement["Action"]) == {"s3:PutObject", "s3:GetObject", "s3:DeleteObject"}
            assert resource.endswith(":::${SignalsBucket}/signals/*")
