"""Request limits AWS keeps and moto does not, as the local cloud enforces them
(tools/localcloud/vsa_localcloud/aws_limits.py). Each refused request is one the product made
before it learned the limit: a spec holds up to 256 hosts."""

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError


def test_describe_instances_refuses_more_than_200_filter_values(aws: Callable[[str], Any]) -> None:
    # AWS (EC2's error, as it answers): FilterLimitExceeded, "The maximum number of filter values
    # specified on a single call is 200"
    ec2 = aws("ec2")
    ids = [f"i-{n:017x}" for n in range(201)]
    with pytest.raises(ClientError) as refused:
        ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": ids}])
    assert refused.value.response["Error"]["Code"] == "FilterLimitExceeded"
    assert "200" in refused.value.response["Error"]["Message"]
    # counted over every filter of the call, and 200 are answered
    with pytest.raises(ClientError):
        ec2.describe_volumes(
            Filters=[
                {"Name": "volume-id", "Values": [f"vol-{n:017x}" for n in range(150)]},
                {"Name": "attachment.instance-id", "Values": ids[:51]},
            ]
        )
    answered = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": ids[:200]}])
    assert answered["Reservations"] == []


def test_describe_instance_information_refuses_a_filter_of_more_than_100_ids(
    aws: Callable[[str], Any],
) -> None:
    # AWS: https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_InstanceInformationStringFilter.html
    # Values "Array Members: Minimum number of 1 item. Maximum number of 100 items."
    ssm = aws("ssm")
    ids = [f"i-{n:017x}" for n in range(101)]
    with pytest.raises(ClientError) as refused:
        ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": ids}])
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "Member must have length less than or equal to 100" in refused.value.response["Error"]["Message"]
    answered = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": ids[:100]}])
    assert answered["InstanceInformationList"] == []


def test_a_secret_string_over_65536_characters_is_refused(aws: Callable[[str], Any]) -> None:
    # AWS: https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html
    # (and PutSecretValue, UpdateSecret) SecretString "Length Constraints: Maximum length of 65536"
    secrets = aws("secretsmanager")
    name = f"limits-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ClientError) as refused:
        secrets.create_secret(Name=name, SecretString="x" * 65_537)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "less than or equal to 65536" in refused.value.response["Error"]["Message"]
    secrets.create_secret(Name=name, SecretString="x" * 65_536)
    with pytest.raises(ClientError) as again:
        secrets.put_secret_value(SecretId=name, SecretString="y" * 65_537)
    assert again.value.response["Error"]["Code"] == "ValidationException"
    assert secrets.get_secret_value(SecretId=name)["SecretString"] == "x" * 65_536
    secrets.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
