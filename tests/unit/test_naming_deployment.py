"""Every name the core gives a resource in the account carries the deployment's name, so two
deployments in one account and region never share a name, even for arrays of the same id."""

import pytest

from vsa_core import naming
from vsa_core.arrays import keys


@pytest.fixture
def stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSA_DEPLOYMENT_NAME", "stage")


def test_every_name_starts_with_the_deployment(stage: None) -> None:
    names = [
        naming.group_name("dbx"),
        naming.launch_template_name("dbx"),
        naming.launch_hook_name("dbx"),
        naming.terminate_hook_name("dbx"),
        naming.backup_schedule_name("dbx"),
        naming.owned_volume_name("dbx", "scratch"),
        naming.iops_alarm_name("dbx", "high"),
        naming.iops_alarm_name("dbx", "low"),
    ]
    assert all(name.startswith("stage-dbx-") for name in names), names
    assert keys.array_secret_name("dbx") == "stage/dbx/keys"
    assert keys.node_secret_name("dbx", "i-0123456789abcdef0").startswith(keys.node_prefix("dbx"))
    assert keys.node_prefix("dbx") == "stage/dbx/node/"
    assert naming.arrays_namespace() == "VSA/stage/Arrays"


def test_the_default_deployment_keeps_its_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VSA_DEPLOYMENT_NAME", raising=False)
    assert naming.group_name("dbx") == "vsa-dbx-controllers"
    assert keys.array_secret_name("dbx") == "vsa/dbx/keys"
    assert naming.arrays_namespace() == "VSA/Arrays"


def test_another_deployments_names_are_not_this_ones(stage: None) -> None:
    # the lifecycle guard and the alarm trigger parse names: another deployment's are not arrays here
    assert naming.group_array_id("stage-dbx-controllers") == "dbx"
    assert naming.group_array_id("vsa-dbx-controllers") is None
    assert naming.match_iops_alarm_name("stage-dbx-iops-high") == ("dbx", "high")
    assert naming.match_iops_alarm_name("vsa-dbx-iops-high") is None
    # nor is a longer deployment name that begins with this one's
    assert naming.group_array_id("stagex-dbx-controllers") is None


@pytest.mark.parametrize("bad", ["vsa-stage", "Stage", "1stage", "averylongname", "st_age"])
def test_a_deployment_name_outside_the_rule_is_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("VSA_DEPLOYMENT_NAME", bad)
    with pytest.raises(ValueError, match="VSA_DEPLOYMENT_NAME"):
        naming.group_name("dbx")


@pytest.mark.parametrize("unset", ["missing", "empty"])
def test_a_function_without_the_deployments_name_names_nothing(
    monkeypatch: pytest.MonkeyPatch, unset: str
) -> None:
    # Given a Lambda function's environment (AWS_LAMBDA_FUNCTION_NAME) without the deployment's name
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "vsa-on-iops-alarm")
    if unset == "empty":
        monkeypatch.setenv("VSA_DEPLOYMENT_NAME", "")
    else:
        monkeypatch.delenv("VSA_DEPLOYMENT_NAME", raising=False)
    # Then no name is made: it would be the default deployment's
    with pytest.raises(ValueError, match="VSA_DEPLOYMENT_NAME is missing or empty"):
        naming.group_name("dbx")
    # And outside a function (the CLI, the tools, the tests) the default deployment's names stand
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
    assert naming.group_name("dbx") == "vsa-dbx-controllers"
