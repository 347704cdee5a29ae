"""An array's timeline: the pure merge (``vsa_core.api.timeline``), the AWS reads
(``vsa_core.api.aws_timeline``: moto's DynamoDB for the registry, botocore's Stubber for Step
Functions and Auto Scaling, whose request shapes matter here and which moto answers without
history), and the route ``GET /arrays/{id}/events``."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from api_arrays import handler
from botocore.stub import ANY, Stubber
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.conftest import ACCOUNT, REGION, FakeLambdaContext, load_event, record_decision
from vsa_core.api import aws_timeline, timeline
from vsa_core.api.timeline import Event, Execution
from vsa_core.arrays import callers
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.backups.sets import BackupSet, new_backup_id

T0 = datetime(2025, 1, 31, 8, 0, tzinfo=UTC)
I1, I2, OTHER = "i-0123456789abcdef0", "i-0fedcba9876543210", "i-00000000000000aaa"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def sm(name: str) -> str:
    return f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"


# ---------------------------------------------------------------- the pure core


def test_runs_are_the_arrays_by_their_whole_name_not_a_prefix() -> None:
    assert timeline.is_array_run("scale", "demo", "scale-demo-" + "a" * 20)
    assert not timeline.is_array_run("scale", "demo", "scale-demo-2-" + "a" * 20)
    assert timeline.is_array_run("reconcile", "demo", "reconcile-demo-v3")
    assert timeline.is_array_run("reconcile", "demo", "reconcile-demo-v3-r1738310400")
    assert not timeline.is_array_run("reconcile", "demo", "reconcile-demo-v2-v3")  # array "demo-v2"
    assert timeline.is_array_run("reconcile", "demo-v2", "reconcile-demo-v2-v3")
    assert timeline.is_array_run("delete", "demo", "delete-demo-v7-r1738310400")
    assert not timeline.is_array_run("delete", "demo", "reconcile-demo-v7")
    assert timeline.controller_run(f"lost-{I1}-terminated") == ("lost", I1, "terminated")
    assert timeline.controller_run(f"bootstrap-{I1}-0123456789abcdef") == (
        "bootstrap",
        I1,
        "0123456789abcdef",
    )
    assert timeline.controller_run("bk-20250131") is None
    assert timeline.instances_in(f"Launching a new EC2 instance: {I1}") == {I1}


def test_a_decision_carries_its_runs_outcome_and_a_run_without_one_stands_alone() -> None:
    decided = "scale-demo-" + "a" * 20
    skipped = "scale-demo-" + "b" * 20
    decisions = [
        (
            at(1),
            decided,
            {
                "action": "scale-out",
                "current_controllers": 2,
                "desired_controllers": 4,
                "demand_iops": 612345.0,
                "reason": "demand above target",
            },
        ),
        (at(0), "scale-demo-" + "c" * 20, {"action": "hold", "reason": "cooldown"}),
    ]
    runs = [
        Execution(decided, "SUCCEEDED", at(1), at(2)),
        Execution(skipped, "FAILED", at(3), at(4), error="ArrayNotFoundError", cause="gone"),
    ]
    found = {e.reference: e for e in timeline.scale_events(decisions, runs)}
    assert found[decided].kind == "decision"
    assert found[decided].outcome == "succeeded"
    assert found[decided].what == "scale-out 2 -> 4 controllers at 612,345 IOPS: demand above target"
    assert found[decided].ended_at == at(2)
    assert found["scale-demo-" + "c" * 20].outcome == "recorded"  # its run is no longer listed
    assert (found[skipped].kind, found[skipped].outcome) == ("scale", "failed")
    assert (found[skipped].error, found[skipped].cause) == ("ArrayNotFoundError", "gone")
    assert len(found) == 3


def test_only_the_arrays_controllers_runs_are_its_events() -> None:
    runs = [
        Execution(f"bootstrap-{I1}-0123456789abcdef", "SUCCEEDED", at(0), at(1)),
        Execution(f"drain-{I1}-fedcba9876543210", "TIMED_OUT", at(5)),
        Execution(f"lost-{I2}-terminated", "SUCCEEDED", at(6)),
        Execution(f"bootstrap-{OTHER}-0123456789abcdef", "SUCCEEDED", at(0)),
    ]
    found = timeline.controller_events(runs, {I1, I2})
    assert [(e.kind, e.outcome) for e in found] == [
        ("bootstrap", "succeeded"),
        ("drain", "timed-out"),
        ("lost", "succeeded"),
    ]
    assert found[2].what == f"controller {I2} lost (terminated): drained"


def backup_set(minute: int, state: str, failure: str | None = None) -> BackupSet:
    return BackupSet.model_validate(
        {"backupId": new_backup_id(at(minute), entropy=state), "arrayId": "demo", "mode": "application",
         "state": state, "createdAt": at(minute), "failure": failure}
    )  # fmt: skip


def test_a_failed_backup_says_why() -> None:
    backup = backup_set(0, "failed", "FreezeFailed: host i-1 offline")
    event = timeline.backup_event(backup)
    assert (event.kind, event.outcome, event.cause) == ("backup", "failed", "FreezeFailed: host i-1 offline")
    assert event.reference == backup.backup_id


def _event(minute: int, kind: str, n: int) -> Event:
    return Event(at=at(minute), kind=kind, what=f"thing {n}", outcome="succeeded", reference=f"r{n}")  # type: ignore[arg-type]


EVENT_LISTS = st.lists(
    st.lists(
        st.builds(
            _event,
            st.integers(0, 120),
            st.sampled_from(["decision", "bootstrap", "backup"]),
            st.integers(0, 10**6),
        ),
        max_size=20,
    ),
    max_size=6,
)


@given(EVENT_LISTS, st.one_of(st.none(), st.integers(0, 120)), st.integers(1, timeline.MAX_LIMIT))
def test_the_timeline_is_sorted_keeps_the_newest_and_drops_nothing_else(
    sources: list[list[Event]], since_minute: int | None, limit: int
) -> None:
    since = at(since_minute) if since_minute is not None else None
    found = timeline.timeline(sources, since=since, limit=limit)
    wanted = [e for s in sources for e in s if since is None or e.at >= since]
    assert list(found.events) == sorted(found.events)
    assert len(found.events) == min(limit, len(wanted))
    assert found.truncated == (len(wanted) > limit)
    # every kept event was asked for, and only the oldest were left out
    left_out = list(wanted)
    for event in found.events:
        left_out.remove(event)
    assert all(e <= found.events[0] for e in left_out)


def test_the_timeline_refuses_a_limit_outside_its_bounds() -> None:
    with pytest.raises(ValueError, match=r"outside 1\.\.500"):
        timeline.timeline([], since=None, limit=0)


# ---------------------------------------------------------------- the AWS reads


def _spec(array_id: str = "demo") -> ArraySpec:
    body = json.loads(load_event("apigateway/put_array.json")["body"])
    body["arrayId"] = array_id
    return ArraySpec.model_validate(body)


WORKFLOWS = aws_timeline.Workflows(
    scale=sm("scale"),
    bootstrap=sm("bootstrap"),
    drain=sm("drain"),
    reconcile=sm("reconcile"),
    delete=sm("delete"),
)


def _listing(runs: list[tuple[str, str, datetime]], token: str | None = None) -> dict[str, Any]:
    page: dict[str, Any] = {
        "executions": [
            {
                "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:x:{n}",
                "stateMachineArn": sm("x"),
                "name": n,
                "status": s,
                "startDate": d,
            }
            for n, s, d in runs
        ]
    }
    if token:
        page["nextToken"] = token
    return page


@pytest.fixture
def stubbed(registry_table: str) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    ArrayRegistry(registry_table).create(_spec())
    return {
        "sfn": sfn,
        "autoscaling": autoscaling,
        "clients": aws_timeline.EventClients(
            sfn=sfn,
            dynamodb=boto3.client("dynamodb", region_name=REGION),
            autoscaling=autoscaling,
            table=registry_table,
            workflows=WORKFLOWS,
        ),
    }


def test_read_events_merges_the_registry_the_runs_and_the_group_in_order(
    stubbed: dict[str, Any], registry_table: str
) -> None:
    # Given a decision, a backup set, and the group's history naming I1 (launched) and I2
    scale_name = "scale-demo-" + "a" * 20
    record_decision(
        registry_table,
        "2025-01-31T08:03:00.000Z",
        scale_name,
        {"action": "scale-out", "current_controllers": 1, "desired_controllers": 2, "reason": "demand"},
    )
    BackupRegistry(registry_table).create(backup_set(9, "completed"))
    autoscaling, sfn = Stubber(stubbed["autoscaling"]), Stubber(stubbed["sfn"])
    autoscaling.add_response(
        "describe_scaling_activities",
        {
            "Activities": [
                {
                    "ActivityId": "a2",
                    "AutoScalingGroupName": "vsa-demo-controllers",
                    "Cause": "c",
                    "StartTime": at(4),
                    "StatusCode": "Successful",
                    "Description": f"Launching a new EC2 instance: {I2}",
                },
                {
                    "ActivityId": "a1",
                    "AutoScalingGroupName": "vsa-demo-controllers",
                    "Cause": "c",
                    "StartTime": at(1),
                    "StatusCode": "Failed",
                    "StatusMessage": "InsufficientInstanceCapacity",
                    "Description": f"Launching a new EC2 instance: {I1}",
                },
            ]
        },
        {"AutoScalingGroupName": "vsa-demo-controllers", "MaxRecords": 100},
    )
    # And each workflow's listing, newest first, with another array's runs among ours
    sfn.add_response(
        "list_executions",
        _listing([(scale_name, "SUCCEEDED", at(3)), ("scale-demo-2-" + "b" * 20, "SUCCEEDED", at(2))]),
        {"stateMachineArn": sm("scale"), "maxResults": 1000},
    )
    sfn.add_response(
        "list_executions",
        _listing([("reconcile-demo-v2", "FAILED", at(6))]),
        {"stateMachineArn": sm("reconcile"), "maxResults": 1000},
    )
    sfn.add_response("list_executions", _listing([]), {"stateMachineArn": sm("delete"), "maxResults": 1000})
    sfn.add_response(
        "list_executions",
        _listing(
            [
                (f"bootstrap-{I2}-0123456789abcdef", "SUCCEEDED", at(5)),
                (f"bootstrap-{OTHER}-0123456789abcdef", "FAILED", at(5)),
            ]
        ),
        {"stateMachineArn": sm("bootstrap"), "maxResults": 1000},
    )
    sfn.add_response(
        "list_executions",
        _listing([(f"drain-{I2}-0123456789abcdef", "SUCCEEDED", at(8))]),
        {"stateMachineArn": sm("drain"), "maxResults": 1000},
    )
    # And only our failed run is described (not the other array's controller's)
    sfn.add_response(
        "describe_execution",
        {
            "executionArn": "x",
            "stateMachineArn": sm("reconcile"),
            "status": "FAILED",
            "startDate": at(6),
            "error": "ReconcileFailed",
            "cause": "connect-path failed on i-1",
        },
        {"executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:reconcile:reconcile-demo-v2"},
    )
    with autoscaling, sfn:
        # When the timeline is read
        answer = aws_timeline.read_events(stubbed["clients"], "demo", since=None, limit=100)
        # Then every call was the one expected, in that order
        sfn.assert_no_pending_responses()
    # And the events are ours, oldest first, with their outcomes and the failure's cause
    assert [(e["kind"], e["outcome"]) for e in answer["events"]] == [
        ("group", "failed"),
        ("decision", "succeeded"),
        ("bootstrap", "succeeded"),
        ("reconcile", "failed"),
        ("drain", "succeeded"),
        ("backup", "completed"),
    ]
    reconcile = answer["events"][3]
    assert (reconcile["error"], reconcile["cause"]) == ("ReconcileFailed", "connect-path failed on i-1")
    assert answer["events"][0]["cause"] == "InsufficientInstanceCapacity"
    assert answer["truncated"] is False
    assert answer["incomplete"] == []


def test_a_listing_stops_at_since_and_at_its_page_cap(stubbed: dict[str, Any]) -> None:
    sfn = Stubber(stubbed["sfn"])
    mine = "scale-demo-" + "a" * 20
    # a listing older than since ends at the first older run (no second page asked)
    sfn.add_response(
        "list_executions",
        _listing([(mine, "SUCCEEDED", at(10)), (mine + "x", "SUCCEEDED", at(1))], "t"),
        {"stateMachineArn": sm("scale"), "maxResults": 1000},
    )
    for page in range(aws_timeline.MAX_PAGES):
        sfn.add_response(
            "list_executions",
            _listing([(mine, "SUCCEEDED", at(30 - page))], f"t{page}"),
            {
                "stateMachineArn": sm("scale"),
                "maxResults": 1000,
                **({"nextToken": f"t{page - 1}"} if page else {}),
            },
        )
    with sfn:
        found, cut = aws_timeline._list_runs(stubbed["sfn"], sm("scale"), lambda n: n == mine, at(5))
        assert ([r.started_at for r in found], cut) == ([at(10)], False)
        found, cut = aws_timeline._list_runs(stubbed["sfn"], sm("scale"), lambda n: n == mine, None)
        assert (len(found), cut) == (aws_timeline.MAX_PAGES, True)
        sfn.assert_no_pending_responses()


def test_an_unset_workflow_is_named_as_not_read(stubbed: dict[str, Any]) -> None:
    clients = stubbed["clients"]
    bare = aws_timeline.EventClients(
        sfn=clients.sfn,
        dynamodb=clients.dynamodb,
        autoscaling=clients.autoscaling,
        table=clients.table,
        workflows=aws_timeline.Workflows(scale="", bootstrap="", drain="", reconcile="", delete=""),
    )
    autoscaling = Stubber(stubbed["autoscaling"])
    autoscaling.add_response(
        "describe_scaling_activities", {"Activities": []}, {"AutoScalingGroupName": ANY, "MaxRecords": 100}
    )
    with autoscaling:
        answer = aws_timeline.read_events(bare, "demo", since=None, limit=5)
    assert answer["events"] == []
    assert len(answer["incomplete"]) == 5
    assert all("not read" in note for note in answer["incomplete"])


# ---------------------------------------------------------------- the route


def call(event: dict[str, Any]) -> tuple[int, Any]:
    reply = handler.lambda_handler(event, FakeLambdaContext())
    return reply["statusCode"], json.loads(reply["body"]) if reply.get("body") else None


def events_request(array_id: str = "demo", **query: str) -> dict[str, Any]:
    event = load_event("apigateway/get_array_events.json")
    event["path"] = f"/arrays/{array_id}/events"
    event["pathParameters"] = {"id": array_id}
    if query:
        event["queryStringParameters"] = query
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    return event


@pytest.fixture
def api(registry_table: str, function_env: None, workflows: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The arrays API over moto: the array registered, the five workflows' ARNs unset (moto lists
    no history: the route's reads of them are the tests above)."""
    ArrayRegistry(registry_table).create(_spec())


@pytest.mark.parametrize(
    ("query", "fix"),
    [
        ({"limit": "0"}, "query.limit"),
        ({"limit": "501"}, "query.limit"),
        ({"limit": "many"}, "query.limit"),
        ({"since": "yesterday"}, "query.since"),
        ({"since": "2025-01-31T08:00:00"}, "query.since"),  # no timezone: which 08:00?
        ({"since": "9999-12-31T23:59:59-23:59"}, "out of range in UTC"),
    ],
)
def test_bad_query_parameters_answer_422_naming_the_parameter(
    api: None, query: dict[str, str], fix: str
) -> None:
    status, reply = call(events_request(**query))
    assert status == 422, reply
    assert fix in reply["message"]


def test_an_unknown_array_is_404(api: None) -> None:
    status, reply = call(events_request("nope"))
    assert status == 404, reply
    assert "nope" in reply["message"]


def test_the_route_answers_the_decisions_since_as_asked(api: None, registry_table: str) -> None:
    run = "scale-demo-"
    record_decision(registry_table, "2025-01-31T07:00:00.000Z", run + "a" * 20, {"action": "hold"})
    record_decision(registry_table, "2025-01-31T09:00:00.000Z", run + "b" * 20, {"action": "scale-out"})
    status, reply = call(load_event("apigateway/get_array_events.json"))  # since 08:00Z, limit 20
    assert status == 200, reply
    assert [(e["kind"], e["what"], e["outcome"]) for e in reply["events"]] == [
        ("decision", "scale-out", "recorded")
    ]
    assert (reply["since"], reply["limit"]) == ("2025-01-31T08:00:00+00:00", 20)


# ---------------------------------------------------------------- who asked


OPERATOR = callers.Caller(arn="arn:aws:iam::123456789012:user/vsa-operator")


def test_the_caller_is_the_identity_api_gateway_verified_and_nothing_else() -> None:
    identity = load_event("apigateway/put_array.json")["requestContext"]["identity"]
    caller = callers.caller_of(identity)
    assert caller.model_dump(by_alias=True) == {
        "kind": "iam",
        "arn": "arn:aws:iam::123456789012:user/vsa-operator",
        "account": "123456789012",
        "accessKeyId": "AKIAIOSFODNN7EXAMPLE",
        "sourceIp": "203.0.113.10",
    }
    assert caller.principal == caller.arn
    assert callers.Caller.schedule("vsa-demo-backup").principal == "schedule:vsa-demo-backup"
    for missing in (None, {}, {**identity, "userArn": None}, {**identity, "userArn": ""}):
        with pytest.raises(callers.CallerUnknownError, match="no IAM caller"):
            callers.caller_of(missing)


def test_a_deletion_s_run_carries_its_caller_and_other_changes_are_events_of_their_own() -> None:
    run = timeline.delete_event(Execution(name="delete-demo-v3", status="RUNNING", started_at=at(2)))
    asked = callers.ChangeRecord(
        at=at(1), kind="delete", what="deletion requested", reference="delete-demo-v3", by=OPERATOR
    )
    gone = callers.ChangeRecord(at=at(0), kind="delete", what="x", reference="delete-demo-v1", by=OPERATOR)
    applied = callers.ChangeRecord(
        at=at(0), kind="apply", what="spec v3 applied", reference="v3", by=OPERATOR
    )
    found = timeline.attributed([run], [asked, gone, applied])
    assert [(e.kind, e.reference, e.outcome, e.by) for e in sorted(found)] == [
        ("apply", "v3", "recorded", OPERATOR.arn),
        ("delete", "delete-demo-v1", "recorded", OPERATOR.arn),  # its run aged out: the request stays
        ("delete", "delete-demo-v3", "running", OPERATOR.arn),
    ]
    assert timeline.attributed([run], []) == [run]
    assert run.as_dict()["by"] is None


def test_a_backup_set_shows_who_asked_for_it(registry_table: str) -> None:
    requested = backup_set(3, "completed").model_copy(update={"requested_by": callers.Caller.schedule("s")})
    assert timeline.backup_event(requested).as_dict()["by"] == "schedule:s"
    assert timeline.backup_event(backup_set(3, "completed")).by is None


def test_recorded_changes_are_read_back_newest_first_from_since(registry_table: str) -> None:
    registry = ArrayRegistry(registry_table)
    for minute in (1, 2, 3):
        change = callers.ChangeRecord(at=at(minute), kind="apply", what=f"v{minute}", by=OPERATOR)
        registry.history.record("demo", change, retention_days=90)
    registry.history.record(
        "other", callers.ChangeRecord(at=at(2), kind="apply", what="x", by=OPERATOR), retention_days=90
    )
    assert [c.what for c in registry.history.read("demo", since=at(2), limit=10)] == ["v3", "v2"]
    assert [c.what for c in registry.history.read("demo", since=None, limit=1)] == ["v3"]
