"""A body whose JSON gives one key twice is refused (400 naming the key and where it is) before
any route of either REST API runs, and nothing is stored: ``json.loads`` would keep the last
value silently, so what the API stored could differ from what its caller read in the body."""

import json
from typing import Any

import boto3
import pytest
from api_arrays import handler as arrays_handler
from api_backups import handler as backups_handler

from tests.unit.conftest import REGION, FakeLambdaContext, load_event
from vsa_core.api import replies

SCHEDULE_TWICE = '"backup": {"schedule": "cron(0 3 * * ? *)", "schedule": "cron(0 3 * * * *)"}'


def _put_with(raw_body: str) -> dict[str, Any]:
    """The sample PUT /arrays/demo, its body replaced by ``raw_body`` (raw text: json.dumps
    cannot write a key twice)."""
    event = load_event("apigateway/put_array.json")
    event["body"] = raw_body
    return event


def _sample_body_with(fragment: str) -> str:
    """The sample PUT's body with its ``backup`` member replaced by ``fragment``."""
    spec = json.loads(load_event("apigateway/put_array.json")["body"])
    spec.pop("backup", None)
    return json.dumps(spec)[:-1] + ", " + fragment + "}"


def _answer(reply: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return reply["statusCode"], json.loads(reply["body"])


def test_a_put_giving_a_nested_key_twice_is_400_naming_it_and_stores_nothing(
    registry_table: str, function_env: None
) -> None:
    # Given the sample PUT whose backup policy gives "schedule" twice (the second value, which a
    # plain json.loads would keep, is one EventBridge Scheduler refuses)
    event = _put_with(_sample_body_with(SCHEDULE_TWICE))

    # When it reaches the arrays API's handler
    status, answer = _answer(arrays_handler.lambda_handler(event, FakeLambdaContext()))

    # Then 400 naming the key and the object holding it, and the registry holds nothing
    assert status == 400, answer
    assert "'schedule'" in answer["message"]
    assert "$.backup" in answer["message"]
    items = boto3.client("dynamodb", region_name=REGION).scan(TableName=registry_table)["Items"]
    assert items == []
    get = load_event("apigateway/get_array.json")
    assert arrays_handler.lambda_handler(get, FakeLambdaContext())["statusCode"] == 404


def test_the_same_body_with_each_key_once_passes_the_screen() -> None:
    # Given the same body with the schedule given once / Then the screen lets it through to the route
    once = _put_with(_sample_body_with('"backup": {"schedule": "cron(0 3 * * ? *)"}'))
    assert replies.screen(once) is None


def test_a_backup_request_giving_a_key_twice_is_400_too(registry_table: str, function_env: None) -> None:
    # Given the sample POST /arrays/demo/backups with "mode" twice / When the backups API gets it
    event = load_event("apigateway/create_backup.json")
    event["body"] = '{"mode": "crash", "label": "nightly", "mode": "application"}'
    status, answer = _answer(backups_handler.lambda_handler(event, FakeLambdaContext()))
    # Then 400 naming it, before the route (which would have answered 404: no array demo)
    assert status == 400, answer
    assert "'mode'" in answer["message"]
    assert "object at $:" in answer["message"]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"a": 1, "a": 1}', ("a", "$")),
        ('{"volumes": [{"volumeId": "v"}, {"name": "d", "iops": 1, "name": "e"}]}', ("name", "$.volumes[1]")),
        ('{"x": {"y": {"z": [[{"k": 1, "k": 2}]]}}}', ("k", "$.x.y.z[0][0]")),
        ('{"a": {"b": 1, "b": 2}, "c": 1, "c": 2}', ("c", "$")),  # an object's own first
        ('{"a": {"b": 1, "b": 2}, "d": {"c": 1, "c": 2}}', ("b", "$.a")),  # then in document order
    ],
)
def test_the_first_key_given_twice_is_found_with_its_path(text: str, found: tuple[str, str]) -> None:
    assert replies.duplicate_key(text) == found


@pytest.mark.parametrize(
    "text",
    [
        '{"a": {"x": 1}, "b": {"x": 2}}',  # one key in two objects: each object gives it once
        '{"a": "\\"a\\": 1, \\"a\\": 2"}',  # what looks like keys inside a string is a string
        '[{"a": 1}, {"a": 2}]',
        "{not json",  # not JSON: the route's own parse answers
        "7",
    ],
)
def test_no_key_given_twice_is_none(text: str) -> None:
    assert replies.duplicate_key(text) is None
