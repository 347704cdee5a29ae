"""ArrayRegistry over the control plane's DynamoDB table (moto)."""

import json
from datetime import UTC, datetime

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from tests.specs import BASE
from tests.unit.conftest import REGION
from vsa_core.arrays.aws_registry import EXPIRES_AT, ArrayRegistry, array_key, expires_at
from vsa_core.arrays.spec import ArraySpec, Deletion
from vsa_core.errors import ArrayNotFoundError, ConflictError
from vsa_core.health import aws_check


def make_spec(array_id: str = "demo", **overrides: object) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": array_id,
            "availabilityZone": "us-east-1a",
            **BASE,
            "minControllers": 2,
            "maxControllers": 8,
            "perControllerIops": 250_000,
            "targetUtilisation": 0.6,
            **overrides,
        }
    )


@pytest.fixture
def dynamodb(registry_table: str):
    return boto3.client("dynamodb", region_name=REGION)


@pytest.fixture
def registry(registry_table: str, dynamodb) -> ArrayRegistry:
    return ArrayRegistry(registry_table, dynamodb)


def test_create_then_get_round_trips_the_spec(registry: ArrayRegistry):
    # Given a new array spec
    spec = make_spec()
    # When it is registered and read back
    created = registry.create(spec)
    loaded = registry.get("demo")
    # Then it is stored at its minimum size, version 1, with the spec unchanged
    assert created.desired_controllers == 2
    assert created.version == 1
    assert loaded == created
    assert loaded.spec == spec


def test_create_stores_the_documented_item(registry: ArrayRegistry, dynamodb, registry_table: str):
    # Given / When an array is registered
    registry.create(make_spec())
    # Then the SPEC item has the key, JSON spec (camelCase) and counters the workflow updates
    item = dynamodb.get_item(TableName=registry_table, Key=array_key("demo"))["Item"]
    assert item["pk"] == {"S": "ARRAY#demo"}
    assert item["sk"] == {"S": "SPEC"}
    assert json.loads(item["spec"]["S"])["maxControllers"] == 8
    assert item["desiredControllers"] == {"N": "2"}
    assert item["version"] == {"N": "1"}


def test_create_twice_fails_and_keeps_the_first(registry: ArrayRegistry):
    # Given a registered array
    registry.create(make_spec(maxControllers=8))
    # When an array with the same id is registered again
    with pytest.raises(ClientError) as raised:
        registry.create(make_spec(maxControllers=16))
    # Then DynamoDB refuses the write and the first spec is untouched
    assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert registry.get("demo").spec.max_controllers == 8


def test_get_unknown_array_raises_array_not_found(registry: ArrayRegistry):
    # Given an empty registry / When an unknown array is read / Then it is named in the error
    with pytest.raises(ArrayNotFoundError, match="'nope'"):
        registry.get("nope")


def _record_desired_count(dynamodb, table: str, desired: int) -> None:
    """ScaleArray's RecordDesiredCount, as its ASL writes it: the count, and the version bumped."""
    dynamodb.update_item(
        TableName=table,
        Key=array_key("demo"),
        UpdateExpression="SET desiredControllers = :desired ADD version :one",
        ConditionExpression="attribute_exists(pk)",
        ExpressionAttributeValues={":desired": {"N": str(desired)}, ":one": {"N": "1"}},
    )


def test_get_reads_the_count_and_version_the_workflow_wrote(
    registry: ArrayRegistry, dynamodb, registry_table: str
):
    # Given a registered array whose count the ScaleArray workflow updated (RecordDesiredCount)
    registry.create(make_spec())
    _record_desired_count(dynamodb, registry_table, 5)
    # When read / Then the registry reports the new count and version
    loaded = registry.get("demo")
    assert (loaded.desired_controllers, loaded.version) == (5, 2)


def test_arrays_are_kept_apart(registry: ArrayRegistry):
    registry.create(make_spec("alpha", minControllers=1))
    registry.create(make_spec("beta", minControllers=3))
    assert registry.get("alpha").desired_controllers == 1
    assert registry.get("beta").desired_controllers == 3


def test_decisions_are_newest_first_limited_and_per_array(
    registry: ArrayRegistry, dynamodb, registry_table: str
):
    # Given decisions recorded by the workflow for two arrays (the ASL's RecordDecision item)
    registry.create(make_spec())
    for minute, desired in ((1, 3), (2, 4), (3, 5)):
        dynamodb.put_item(
            TableName=registry_table,
            Item={
                "pk": {"S": "ARRAY#demo"},
                "sk": {"S": f"DECISION#2026-11-02T17:0{minute}:00Z#scale-demo-{minute}"},
                "decision": {"S": json.dumps({"desired_controllers": desired})},
            },
        )
    dynamodb.put_item(
        TableName=registry_table,
        Item={
            "pk": {"S": "ARRAY#other"},
            "sk": {"S": "DECISION#2026-11-02T18:00:00Z#scale-other-1"},
            "decision": {"S": json.dumps({"desired_controllers": 9})},
        },
    )
    # When the newest two of "demo" are read
    decisions = registry.scale_decisions().newest("demo", limit=2)
    # Then they are its two latest, newest first, without the SPEC item or the other array's
    assert decisions == [
        {"sk": "DECISION#2026-11-02T17:03:00Z#scale-demo-3", "desired_controllers": 5},
        {"sk": "DECISION#2026-11-02T17:02:00Z#scale-demo-2", "desired_controllers": 4},
    ]


def test_decisions_of_an_array_without_any_are_empty(registry: ArrayRegistry):
    registry.create(make_spec())
    assert registry.scale_decisions().newest("demo") == []


def test_default_client_comes_from_the_environment(registry_table: str):
    # Given no client passed in (as in Lambda: the shared cached client, region from the env)
    registry = ArrayRegistry(registry_table)
    # When used / Then it reaches the same table
    registry.create(make_spec())
    assert registry.get("demo").spec.array_id == "demo"


def test_put_new_registers_at_minimum_and_a_second_create_conflicts(registry: ArrayRegistry):
    # Given / When a new array is put without a version
    created = registry.put(make_spec(), expected_version=None)
    assert (created.version, created.desired_controllers) == (1, 2)
    # Then a concurrent create of the same id loses with a ConflictError
    with pytest.raises(ConflictError, match="concurrent apply"):
        registry.put(make_spec(maxControllers=16), expected_version=None)
    assert registry.get("demo").spec.max_controllers == 8


def test_put_update_bumps_the_version_and_clamps_the_desired_count(registry: ArrayRegistry):
    # Given an array scaled to 5 controllers
    registry.create(make_spec(minControllers=2, maxControllers=8))
    registry.put(make_spec(minControllers=5, maxControllers=8), expected_version=1)
    # When maxControllers is lowered to 4 and minControllers to 1
    updated = registry.put(make_spec(minControllers=1, maxControllers=4), expected_version=2)
    # Then the version moves on and the desired count is clamped into the new bounds
    assert (updated.version, updated.desired_controllers) == (3, 4)
    assert registry.get("demo") == updated


def test_two_applies_from_the_same_version_one_wins_one_conflicts(registry: ArrayRegistry):
    # Given two writers that both read version 1
    registry.create(make_spec())
    registry.put(make_spec(maxControllers=10), expected_version=1)
    # When the second one writes on the version it read
    with pytest.raises(ConflictError, match="changed since version 1"):
        registry.put(make_spec(maxControllers=12), expected_version=1)
    # Then the first update is kept, not lost
    assert registry.get("demo").spec.max_controllers == 10


def test_all_lists_every_array_by_id(registry: ArrayRegistry, dynamodb, registry_table: str):
    registry.create(make_spec("beta"))
    registry.create(make_spec("alpha"))
    dynamodb.put_item(
        TableName=registry_table,
        Item={"pk": {"S": "ARRAY#alpha"}, "sk": {"S": "DECISION#x"}, "decision": {"S": "{}"}},
    )
    assert [a.spec.array_id for a in registry.all()] == ["alpha", "beta"]


def test_mark_deleting_then_forget(registry: ArrayRegistry):
    registry.create(make_spec())
    deletion = Deletion(execution_name="delete-demo-v1", delete_volumes=False, requested_at="t")
    # forgetting an array that is not being deleted is refused
    with pytest.raises(ConflictError, match="not being deleted"):
        registry.forget("demo")
    # marking on a stale version is refused; on the version read it sticks, once
    with pytest.raises(ConflictError):
        registry.mark_deleting("demo", 7, deletion)
    marked = registry.mark_deleting("demo", 1, deletion)
    assert marked.deleting == deletion
    with pytest.raises(ConflictError):
        registry.mark_deleting("demo", marked.version, deletion)
    registry.forget("demo")
    registry.forget("demo")  # idempotent
    with pytest.raises(ArrayNotFoundError):
        registry.get("demo")


def test_retry_deleting_only_after_a_failure(registry: ArrayRegistry, dynamodb, registry_table: str):
    registry.create(make_spec())
    first = Deletion(execution_name="delete-demo-v1", delete_volumes=False, requested_at="t")
    registry.mark_deleting("demo", 1, first)
    second = Deletion(execution_name="delete-demo-v1-r1", delete_volumes=True, requested_at="t2")
    assert registry.retry_deleting("demo", second).deleting == first  # no failure: unchanged
    dynamodb.update_item(
        TableName=registry_table,
        Key=array_key("demo"),
        UpdateExpression="SET deleteFailure = :f",
        ExpressionAttributeValues={":f": {"S": '{"Error": "X", "Cause": "y"}'}},
    )
    assert registry.get("demo").delete_failure == '{"Error": "X", "Cause": "y"}'
    retried = registry.retry_deleting("demo", second)
    assert (retried.deleting, retried.delete_failure) == (second, None)


def slot_item(array_id: str, slot: int, instance_id: str) -> dict:
    return {
        "pk": {"S": f"ARRAY#{array_id}"},
        "sk": {"S": f"SLOT#{slot:02d}"},
        "instanceId": {"S": instance_id},
        "state": {"S": "serving"},
        "address": {"S": "10.0.0.11"},
    }


def test_find_slot_queries_the_instances_index_then_reads_the_slot(
    registry: ArrayRegistry, dynamodb, registry_table: str
):
    # Given controllers of two arrays
    dynamodb.put_item(TableName=registry_table, Item=slot_item("alpha", 0, "i-0000000000000000a"))
    dynamodb.put_item(TableName=registry_table, Item=slot_item("beta", 1, "i-0000000000000000b"))
    # When each is looked up by its instance id / Then its array, slot and fields come back
    assert registry.find_slot("i-0000000000000000b") == (
        "beta",
        1,
        {"instanceId": "i-0000000000000000b", "state": "serving", "address": "10.0.0.11"},
    )
    assert registry.slot_keys("i-0000000000000000a") == [("ARRAY#alpha", "SLOT#00")]
    # and an instance that holds no slot is none
    assert registry.find_slot("i-0000000000000000c") is None
    assert registry.slot_keys("i-0000000000000000c") == []


def test_find_slot_ignores_what_the_index_still_lists_but_the_table_no_longer_holds(registry_table: str):
    # Given an index entry that lags the table (eventually consistent): the slot was released,
    # then leased by another controller
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    registry = ArrayRegistry(registry_table, dynamodb)
    key = {"pk": {"S": "ARRAY#alpha"}, "sk": {"S": "SLOT#00"}}
    with Stubber(dynamodb) as stub:
        stub.add_response("query", {"Items": [{**key, "instanceId": {"S": "i-0000000000000000a"}}]})
        stub.add_response(
            "get_item",
            {"Item": slot_item("alpha", 0, "i-0000000000000000d")},
            {"TableName": registry_table, "Key": key, "ConsistentRead": True},
        )
        # When the old controller is looked up / Then it holds no slot (the table's consistent answer)
        assert registry.find_slot("i-0000000000000000a") is None
        stub.assert_no_pending_responses()


def test_history_expires_after_the_retention(registry_table: str, dynamodb):
    # Given the table as deployed / Then its TTL reads expiresAt
    ttl = dynamodb.describe_time_to_live(TableName=registry_table)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", EXPIRES_AT)
    # And a history item written now goes in 90 days, epoch seconds
    now = datetime(2026, 11, 2, 17, 5, tzinfo=UTC)
    assert expires_at(now, 90) == int(datetime(2027, 1, 31, 17, 5, tzinfo=UTC).timestamp())


@pytest.mark.parametrize(
    ("setting", "default"), [("authentication", "dh-hmac-chap"), ("fencing", "reservations")]
)
def test_a_spec_stored_before_a_setting_existed_keeps_none(
    registry: ArrayRegistry, dynamodb, registry_table: str, setting: str, default: str
):
    # Given an array stored by an earlier release: its spec JSON has no such setting
    registry.create(make_spec())
    stored = json.loads(
        dynamodb.get_item(TableName=registry_table, Key=array_key("demo"))["Item"]["spec"]["S"]
    )
    assert stored.pop(setting) == default  # what this release stores for a new array
    dynamodb.update_item(
        TableName=registry_table,
        Key=array_key("demo"),
        UpdateExpression="SET spec = :spec",
        ExpressionAttributeValues={":spec": {"S": json.dumps(stored)}},
    )
    # When read / Then it runs as it ran: without it (the default is for new arrays)
    assert getattr(registry.get("demo").spec, setting) == "none"


def test_a_stored_version_is_marked_applying_until_its_apply_says_it_finished(registry: ArrayRegistry):
    # Given a new array: stored, its apply not finished yet
    registry.create(make_spec())
    assert registry.get("demo").unfinished_apply() == 1
    # When its apply finishes, Then it is no longer marked
    registry.applied("demo", 1)
    assert registry.get("demo").unfinished_apply() is None
    # When version 2 is stored, it is marked; an older apply's end does not clear it
    registry.put(make_spec(maxControllers=6), expected_version=1)
    registry.applied("demo", 1)
    assert registry.get("demo").unfinished_apply() == 2
    registry.applied("demo", 2)
    assert registry.get("demo").unfinished_apply() is None
    assert registry.get("demo").applying is None


def test_an_array_a_restore_registered_waits_for_its_first_apply_and_is_an_array_like_any_once_applied(
    registry: ArrayRegistry,
):
    # Given an array a restore registered from a backup set
    registry.create(make_spec(), restored_from="bk-20261129-1")
    array = registry.get("demo")
    # Then it carries the apply mark (applying it as it is makes everything) and says why
    assert (array.unfinished_apply(), array.restored_from, array.awaiting_first_apply()) == (
        1,
        "bk-20261129-1",
        True,
    )
    # When its first apply ends, Then it is an array like any other: an apply stopping later is unfinished
    registry.applied("demo", 1)
    array = registry.get("demo")
    assert (array.restored_from, array.awaiting_first_apply()) == (None, False)
    registry.put(make_spec(maxControllers=6), expected_version=1)
    assert (registry.get("demo").unfinished_apply(), registry.get("demo").awaiting_first_apply()) == (
        2,
        False,
    )


def test_a_scale_decision_bumping_the_version_does_not_hide_an_apply_that_stopped(
    registry: ArrayRegistry, dynamodb, registry_table: str
):
    # Given version 1 stored by an apply that stopped part way
    registry.create(make_spec())
    # When ScaleArray sets the desired count as its ASL does (ADD version :one)
    _record_desired_count(dynamodb, registry_table, 3)
    # Then the array is at version 2 and its apply of version 1 still shows as unfinished
    array = registry.get("demo")
    assert (array.version, array.unfinished_apply()) == (2, 1)


def test_a_recorded_change_expires_after_the_deployments_history_retention(
    registry: ArrayRegistry, dynamodb, registry_table: str, monkeypatch: pytest.MonkeyPatch
):
    # Given a function of a deployment whose HistoryRetentionDays is 7 (its Globals variable)
    from vsa_core.arrays.callers import Caller, ChangeRecord

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "vsa-api")
    monkeypatch.setenv("VSA_HISTORY_RETENTION_DAYS", "7")
    at = datetime(2026, 11, 1, tzinfo=UTC)
    change = ChangeRecord(
        at=at, kind="apply", what="spec v1 stored", by=Caller(arn="arn:aws:iam::123456789012:user/ops")
    )
    # When an API records a change
    registry.history.record("demo", change)
    # Then it expires 7 days after it, not after the template's default 90
    items = dynamodb.scan(TableName=registry_table)["Items"]
    (item,) = [i for i in items if i["sk"]["S"].startswith("CHANGE#")]
    assert int(item[EXPIRES_AT]["N"]) == expires_at(at, 7)
    # And inside a function that lost the variable, recording fails rather than keep it 90 days
    monkeypatch.delenv("VSA_HISTORY_RETENTION_DAYS")
    with pytest.raises(ValueError, match="VSA_HISTORY_RETENTION_DAYS"):
        registry.history.record("demo", change)


def test_the_health_check_leaves_out_arrays_being_deleted_and_those_waiting_for_their_first_apply(
    registry: ArrayRegistry,
):
    # Given an applied array, one being deleted, one a restore registered, one whose apply stopped
    for array_id in ("live", "going", "restored", "stopped"):
        registry.create(make_spec(array_id), restored_from="bk-1" if array_id == "restored" else None)
    for array_id in ("live", "going"):
        registry.applied(array_id, 1)
    registry.mark_deleting(
        "going", 1, Deletion(execution_name="delete-going-v1", delete_volumes=False, requested_at="t")
    )
    # Then the check covers the live array and the one whose apply stopped (its alarm says so)
    checked = aws_check.to_check(registry.get(a) for a in ("live", "going", "restored", "stopped"))
    assert [a.spec.array_id for a in checked] == ["live", "stopped"]
