"""The array lock (vsa_core.arrays.lock, aws_lock) on the registry table (moto): one holder,
lease expiry, renewal only by the holder; and the ScaleArray and ReconcileArray workflows take
and release it with exactly these expressions."""

import json
from pathlib import Path

import boto3
import pytest

from tests.specs import BASE
from tests.unit.conftest import REGION
from vsa_core.arrays import aws_lock, lock
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.spec import ArraySpec
from vsa_core.errors import ArrayNotFoundError, LockLostError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dynamodb(registry_table: str):
    client = boto3.client("dynamodb", region_name=REGION)
    ArrayRegistry(registry_table, client).create(
        ArraySpec.model_validate(
            {
                "arrayId": "demo",
                "availabilityZone": "us-east-1a",
                **BASE,
                "minControllers": 1,
                "maxControllers": 2,
            }
        )
    )
    return client


def test_one_holder_at_a_time_until_its_lease_ends(registry_table: str, dynamodb) -> None:
    first = aws_lock.acquire(dynamodb, registry_table, "demo", "reconcile-demo-v2", 900, now=1000)
    assert first == {"acquired": True, "holder": "reconcile-demo-v2", "until": 1900, "lock": "held"}
    # another run is refused while the lease holds, and told by whom and for how long
    busy = aws_lock.acquire(dynamodb, registry_table, "demo", "scale-demo-abc", 600, now=1500)
    assert busy["acquired"] is False
    assert busy["lock"] == "held by reconcile-demo-v2 for 400 s more"
    # the holder taking it again (a retried step) keeps it
    assert aws_lock.acquire(dynamodb, registry_table, "demo", "reconcile-demo-v2", 900, now=1500)["acquired"]
    # once the lease has ended, another may take it
    assert aws_lock.acquire(dynamodb, registry_table, "demo", "scale-demo-abc", 600, now=2401)["acquired"]
    assert aws_lock.read(dynamodb, registry_table, "demo") == lock.Lease("scale-demo-abc", 3001)


def test_only_the_holder_renews_and_a_lost_lease_says_who_took_it(registry_table: str, dynamodb) -> None:
    aws_lock.acquire(dynamodb, registry_table, "demo", "reconcile-demo-v2", 900, now=1000)
    aws_lock.renew(dynamodb, registry_table, "demo", "reconcile-demo-v2", 900, now=1800)
    assert aws_lock.read(dynamodb, registry_table, "demo").until == 2700
    aws_lock.acquire(dynamodb, registry_table, "demo", "scale-demo-abc", 600, now=2701)
    with pytest.raises(LockLostError, match="held by scale-demo-abc"):
        aws_lock.renew(dynamodb, registry_table, "demo", "reconcile-demo-v2", 900, now=2702)


def test_no_lock_on_an_unregistered_array(registry_table: str, dynamodb) -> None:
    with pytest.raises(ArrayNotFoundError):
        aws_lock.acquire(dynamodb, registry_table, "other", "reconcile-other-v1", 900, now=1)


def test_the_lease_rule_in_python_is_the_condition_s() -> None:
    lease = lock.Lease("a", until=100)
    assert lease.free_for("a", 50)
    assert not lease.free_for("b", 100)
    assert lease.free_for("b", 101)
    assert lock.Lease(None, 0).free_for("b", 0)


def _states(name: str) -> dict[str, dict]:
    return json.loads((ROOT / "statemachines" / name).read_text())["States"]


def test_scale_array_takes_and_releases_the_lock_as_defined() -> None:
    states = _states("scale_array.asl.json")
    acquire = states["AcquireLock"]["Parameters"]
    assert (acquire["UpdateExpression"], acquire["ConditionExpression"]) == (
        lock.ACQUIRE_UPDATE,
        lock.ACQUIRE_CONDITION,
    )
    for name in ("ReleaseLock", "ReleaseLockOnFailure"):
        release = states[name]["Parameters"]
        assert (release["UpdateExpression"], release["ConditionExpression"]) == (
            lock.RELEASE_UPDATE,
            lock.RELEASE_CONDITION,
        )


def test_reconcile_array_releases_the_lock_as_defined_on_every_path_out() -> None:
    states = _states("reconcile_array.asl.json")
    releases = [n for n, s in states.items() if "REMOVE scalingLock" in json.dumps(s)]
    assert sorted(releases) == ["ReleaseLock", "ReleaseLockOnFailure"]
    for name in releases:
        release = states[name]["Parameters"]
        assert (release["UpdateExpression"], release["ConditionExpression"]) == (
            lock.RELEASE_UPDATE,
            lock.RELEASE_CONDITION,
        )
    # every Fail state is reached only through the release (or before the lock was taken)
    assert states["RecordFailure"]["Next"] == "ReleaseLockOnFailure"
    assert states["FailWithoutLock"]["Next"] == "Failed"
