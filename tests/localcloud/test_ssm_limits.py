"""Systems Manager's documented API limits, as the local cloud enforces them."""

from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError


def test_send_command_refuses_more_than_50_instance_ids(aws: Callable[[str], Any]) -> None:
    # AWS: https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html
    # InstanceIds "Array Members: Minimum number of 0 items. Maximum number of 50 items."
    # Given 51 instance ids (the input constraint is checked before the ids themselves)
    ids = [f"i-{n:017x}" for n in range(51)]
    # When a command is sent to them / Then SSM answers ValidationException, as its JSON protocol does
    with pytest.raises(ClientError) as refused:
        aws("ssm").send_command(InstanceIds=ids, DocumentName="AWS-RunShellScript")
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "Member must have length less than or equal to 50" in refused.value.response["Error"]["Message"]
