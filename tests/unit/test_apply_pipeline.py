"""The apply's pipeline (vsa_core.api.apply, vsa_core.api.aws_apply): its pure decisions without
AWS, and the stages' promises where AWS is involved (moto, botocore's Stubber): a refused
request reads or writes nothing it should not, and of two applies over one version one stores."""

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tests.unit.conftest import REGION, load_event
from vsa_core.api import apply, aws_apply
from vsa_core.api.apply import Applied, ApplyPlan, ApplyRequest, Stored, Validated
from vsa_core.api.aws_apply import ApplyPorts
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.callers import Caller
from vsa_core.arrays.plan import Change
from vsa_core.arrays.removals import Mount, Removed, Unknown
from vsa_core.arrays.spec import ArraySpec, Deletion, RegisteredArray
from vsa_core.errors import ConflictError, InvalidSpecError
from vsa_core.reconcile.aws_start import ReconcileStarter

OPERATOR = Caller(arn="arn:aws:iam::123456789012:assumed-role/vsa-operator/alice")
ROLE = "arn:aws:iam::123456789012:role/vsa-backup-scheduler"
HOST = "i-0a1b2c3d4e5f60101"


def spec_of(**changes: Any) -> ArraySpec:
    """The sample PUT's spec (array ``demo``: an existing volume, owned ``data2``, one host),
    with crash-consistent backups (which need no host's mountpoints)."""
    body = json.loads(load_event("apigateway/put_array.json")["body"])
    body["backup"]["mode"] = "crash"
    body.update(changes)
    return ArraySpec.model_validate(body)


def registered(spec: ArraySpec | None = None, **fields: Any) -> RegisteredArray:
    return RegisteredArray(spec=spec or spec_of(), desired_controllers=2, version=1, **fields)


def request_of(spec: ArraySpec | None = None, **options: Any) -> ApplyRequest:
    return ApplyRequest(array_id="demo", spec=spec or spec_of(), by=OPERATOR, **options)


def validated(current: RegisteredArray | None, spec: ArraySpec | None = None, **fields: Any) -> Validated:
    options = {k: fields.pop(k) for k in ("delete_removed_volumes", "force") if k in fields}
    spec = spec or spec_of()
    return Validated(request=request_of(spec, **options), current=current, spec=spec, **fields)


# ---------------------------------------------------------------- validate: what is refused


def test_a_body_naming_another_array_is_refused_saying_what_to_fix() -> None:
    with pytest.raises(InvalidSpecError, match="arrayId 'other' differs from the path's 'demo'"):
        apply.check_target(request_of(spec_of(arrayId="other")))
    apply.check_target(request_of())


@pytest.mark.parametrize(
    ("if_match", "current", "refused"),
    [
        (None, registered(), None),
        ('"1"', registered(), None),
        ("1", None, "If-Match 1 does not match the array's version none"),
        ("7", registered(), "If-Match 7 does not match the array's version 1: read the array again"),
        ("none", None, None),
    ],
)
def test_if_match_must_name_the_version_read(
    if_match: str | None, current: RegisteredArray | None, refused: str | None
) -> None:
    request = request_of(if_match=if_match)
    if refused is None:
        apply.check_current(request, current)
        return
    with pytest.raises(ConflictError, match=refused):
        apply.check_current(request, current)


def test_an_array_being_deleted_refuses_an_apply_naming_its_workflow() -> None:
    deleting = registered(
        deleting=Deletion(execution_name="delete-demo-v1", delete_volumes=False, requested_at="2026-01-01")
    )
    with pytest.raises(ConflictError, match=r"being deleted \(workflow delete-demo-v1\)"):
        apply.check_current(request_of(), deleting)


def test_removing_a_mounted_volume_is_refused_unless_forced_and_forced_says_what_it_overrode() -> None:
    volume = Removed("vol-0a1b2c3d4e5f60001", "vol-0a1b2c3d4e5f60001")
    found = [Mount(HOST, volume, "/data", "/dev/nvme1n1")]
    unknown = [Unknown("i-0a1b2c3d4e5f60102", "its report is old")]
    assert apply.overridden([], [], force=False) == ()
    with pytest.raises(ConflictError, match=f"host {HOST} has volume vol-0a1b2c3d4e5f60001 mounted at /data"):
        apply.overridden(found, unknown, force=False)
    assert apply.overridden(found, unknown, force=True) == (
        f"removed although host {HOST} has vol-0a1b2c3d4e5f60001 mounted at /data",
        "removed although host i-0a1b2c3d4e5f60102 could not tell: its report is old",
    )


def test_volumes_kept_earlier_are_the_owned_ones_neither_listed_nor_removed_now() -> None:
    owned = {
        "data2": {"VolumeId": "vol-listed"},
        "old": {"VolumeId": "vol-kept"},
        "gone": {"VolumeId": "vol-removed-now"},
    }
    removed = [Removed("vol-removed-now", "gone (vol-removed-now)", owned=True)]
    assert apply.kept_earlier(spec_of(), removed, owned) == ("vol-kept",)


# ---------------------------------------------------------------- plan: what is stored and deleted


def test_the_plan_deletes_removed_owned_volumes_and_earlier_ones_only_when_asked() -> None:
    removed = (Removed("vol-ext", "vol-ext"), Removed("vol-own", "old (vol-own)", owned=True))
    kept = apply.plan(validated(registered(), removed=removed, earlier=("vol-earlier",)))
    asked = apply.plan(
        validated(registered(), removed=removed, earlier=("vol-earlier",), delete_removed_volumes=True)
    )
    assert kept.deletions == ()
    assert asked.deletions == ("vol-own", "vol-earlier")


def test_the_plan_stores_nothing_when_the_array_already_holds_the_spec() -> None:
    current = registered()
    assert apply.plan(validated(current)).kept is current
    assert apply.plan(validated(current, spec_of(maxControllers=6))).kept is None
    assert apply.plan(validated(None)).kept is None


def test_the_plan_names_the_hosts_the_spec_drops_the_unfinished_apply_and_the_last_run() -> None:
    current = registered(applying=1, reconcile={"state": "failed"})
    planned = apply.plan(validated(current, spec_of(hosts=[])))
    assert (planned.left_hosts, planned.unfinished, planned.last_state) == ((HOST,), 1, "failed")
    new = apply.plan(validated(None))
    assert (new.left_hosts, new.unfinished, new.last_state, new.before) == ((), None, None, None)


# ---------------------------------------------------------------- start: whether ReconcileArray runs


@pytest.mark.parametrize(
    ("plan", "creating", "runs"),
    [
        # a new array: its controllers' bootstrap gives them everything, but for owned volumes
        (apply.plan(validated(None)), [], False),
        (apply.plan(validated(None)), ["data2"], True),
        # the same spec again: nothing, unless its last run failed or its own apply stopped
        (apply.plan(validated(registered())), [], False),
        (apply.plan(validated(registered(reconcile={"state": "failed"}))), [], True),
        (apply.plan(validated(registered(applying=1))), [], True),
        # the data plane changes: a host leaves
        (apply.plan(validated(registered(), spec_of(hosts=[]))), [], True),
        # the control plane only: no run
        (apply.plan(validated(registered(), spec_of(maxControllers=6))), [], False),
    ],
)
def test_reconcile_array_starts_when_the_data_plane_has_something_to_do(
    plan: ApplyPlan, creating: list[str], runs: bool
) -> None:
    assert apply.converges(plan, creating) is runs


def test_the_run_is_told_first_that_it_finishes_a_stopped_apply() -> None:
    planned = apply.plan(validated(registered(applying=1), spec_of(hosts=[])))
    assert apply.run_work(planned, []) == [
        "finishing the apply of version 1, which stopped part way",
        f"host {HOST}: disconnect from every controller, then disallow",
    ]


def test_the_history_says_what_was_applied_and_by_whom() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    current = registered()
    removed = (Removed("vol-own", "old (vol-own)", owned=True),)
    planned = apply.plan(validated(current, removed=removed, delete_removed_volumes=True))
    record = apply.change_record(Stored(plan=planned, array=current), at)
    assert (record.what, record.reference, record.by, record.kind) == (
        "spec v1 applied again, unchanged, deleting volumes vol-own once detached",
        "v1",
        OPERATOR,
        "apply",
    )
    changed = apply.plan(validated(current, spec_of(maxControllers=6)))
    stored = Stored(
        plan=changed, array=registered(spec_of(maxControllers=6)).model_copy(update={"version": 2})
    )
    assert apply.change_record(stored, at).what == "spec v2 applied"


# ---------------------------------------------------------------- reply


def test_the_answer_lists_volume_modifications_once_then_the_other_changes() -> None:
    grown = [Change("volume/data2", "update", (("Size", 500, 600),))]
    made = [Change("volume/data2", "unchanged"), Change("group/vsa-demo-controllers", "unchanged")]
    assert apply.changes(grown, made) == (grown[0], made[1])


def test_the_answer_names_what_was_forced_and_what_the_run_creates_only_when_there_are_some() -> None:
    planned = apply.plan(validated(None))
    stored = Stored(plan=planned, array=registered(applying=1))
    quiet = apply.reply(Applied(stored=stored, changes=(), started=None, creating=("data2",)))
    assert "forced" not in quiet
    assert (quiet["version"], quiet["creating"], quiet["reconcile"]) == (1, [], None)
    forced = apply.plan(validated(registered(), forced=("removed although ...",)))
    run = {"state": "converging", "executionName": "reconcile-demo-v1"}
    loud = apply.reply(
        Applied(stored=Stored(plan=forced, array=registered()), changes=(), started=run, creating=("data2",))
    )
    assert (loud["forced"], loud["creating"], loud["reconcile"]) == (["removed although ..."], ["data2"], run)
    assert Applied(stored=stored, changes=(), started=None, creating=()).created is True


# ---------------------------------------------------------------- dry run


def test_a_dry_run_of_new_launch_settings_names_the_roll_and_new_mountpoints() -> None:
    current = registered()
    spec = spec_of(hosts=[{"instanceId": HOST, "mountpoints": ["/data", "/logs"]}])
    planned = apply.plan(validated(current, spec))
    control = [Change("launch-template/vsa-demo-controllers", "update", (("ImageId", "a", "b"),))]
    answer = apply.preview_reply(planned, control, ["i-2", "i-1"])
    assert (answer["dryRun"], answer["version"], answer["desiredControllers"]) == (True, 1, 2)
    by_resource = {c["resource"]: c for c in answer["changes"]}
    roll = by_resource["group/vsa-demo-controllers"]
    assert (roll["action"], roll["fields"]) == (
        "roll",
        [{"field": "controllers", "before": ["i-1", "i-2"], "after": 2}],
    )
    assert by_resource[f"host/{HOST}"]["fields"] == [
        {"field": "mountpoints", "before": ["/data"], "after": ["/data", "/logs"]}
    ]
    # no serving controller: nothing to roll
    idle = apply.preview_reply(planned, control, [])
    assert "group/vsa-demo-controllers" not in {c["resource"] for c in idle["changes"]}


def test_only_serving_controllers_with_an_instance_are_rolled() -> None:
    slots = {
        0: {"state": "serving", "instanceId": "i-1"},
        1: {"state": "bootstrapping", "instanceId": "i-2"},
        2: {"state": "serving"},
    }
    assert apply.serving(slots) == ["i-1"]


# ---------------------------------------------------------------- the stages on AWS


@pytest.fixture
def ports(reconcile_starter: ReconcileStarter) -> ApplyPorts:
    """The apply's adapters over moto: the registry table, the array's AWS, a ReconcileArray."""
    return ApplyPorts(
        registry=ArrayRegistry(reconcile_starter.table, reconcile_starter.dynamodb),
        service=ArrayService(scheduler_role_arn=ROLE),
        reconcile=reconcile_starter,
    )


def test_a_body_naming_another_array_reads_nothing(ports: ApplyPorts) -> None:
    # Given a registry whose every call would fail the test (a Stubber with nothing queued)
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    registry = ArrayRegistry("unused", dynamodb)
    with Stubber(dynamodb) as stub:
        # When the body names another array, Then it is refused before the registry is read
        with pytest.raises(InvalidSpecError):
            aws_apply.validate(
                request_of(spec_of(arrayId="other")), ApplyPorts(registry, ports.service, ports.reconcile)
            )
        stub.assert_no_pending_responses()


def test_a_stale_if_match_is_refused_before_aws_validates_anything(ports: ApplyPorts) -> None:
    # Given a stored array, and EC2 (which validation reads first) answering nothing
    ports.registry.create(spec_of())
    ec2 = boto3.client("ec2", region_name=REGION)
    service = ArrayService(scheduler_role_arn=ROLE, ec2=ec2)
    with Stubber(ec2) as stub:
        # When an apply names another version, Then 409, and EC2 was not called (Stubber would raise)
        with pytest.raises(ConflictError, match="If-Match 7"):
            aws_apply.validate(request_of(if_match="7"), ApplyPorts(ports.registry, service, ports.reconcile))
        stub.assert_no_pending_responses()


def test_of_two_applies_over_one_version_one_stores_and_the_other_touches_nothing(ports: ApplyPorts) -> None:
    # Given an array at version 1, read by two applies
    current = ports.registry.create(spec_of())
    first = apply.plan(validated(current, spec_of(maxControllers=6)))
    second = apply.plan(validated(current, spec_of(maxControllers=7)))
    # When both store
    stored = aws_apply.store(first, ports)
    with pytest.raises(ConflictError, match="changed since version 1"):
        aws_apply.store(second, ports)
    # Then the first's spec is version 2, and only its apply is in the history
    assert stored.array.version == 2
    assert ports.registry.get("demo").spec.max_controllers == 6
    history = ports.registry.history.read("demo", None, 10)
    assert [(c.what, c.by) for c in history] == [("spec v2 applied", OPERATOR)]


def test_of_two_applies_creating_one_array_one_creates_it(ports: ApplyPorts) -> None:
    first, second = apply.plan(validated(None)), apply.plan(validated(None, spec_of(maxControllers=7)))
    assert aws_apply.store(first, ports).array.version == 1
    with pytest.raises(ConflictError, match="created by a concurrent apply"):
        aws_apply.store(second, ports)
    assert ports.registry.get("demo").spec.max_controllers == 8
    assert len(ports.registry.history.read("demo", None, 10)) == 1


def test_the_same_spec_again_stores_nothing_but_records_the_volumes_to_delete(ports: ApplyPorts) -> None:
    # Given an array at version 1 whose earlier apply kept an owned volume
    current = ports.registry.create(spec_of())
    planned = apply.plan(validated(current, earlier=("vol-kept",), delete_removed_volumes=True))
    # When the same spec is applied again asking to delete it
    stored = aws_apply.store(planned, ports)
    # Then the version stays, and the registry holds the deletion for ReconcileArray
    assert stored.array is current
    again = ports.registry.get("demo")
    assert (again.version, again.pending_volume_deletions) == (1, ("vol-kept",))
    (record,) = ports.registry.history.read("demo", None, 10)
    assert record.what == "spec v1 applied again, unchanged, deleting volumes vol-kept once detached"
