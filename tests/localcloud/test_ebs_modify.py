"""ModifyVolume (Elastic Volumes) with AWS's states and limits.

* EC2 API reference, ModifyVolume
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifyVolume.html): "After you
  initiate a volume modification, you must wait for that modification to reach the completed
  state before you can initiate another modification for the same volume. You can modify a
  volume up to four times within a rolling 24-hour period" (older text: a 6-hour cooldown; the
  current reference is followed).
* "Monitor the progress of Amazon EBS volume modifications"
  (https://docs.aws.amazon.com/ebs/latest/userguide/monitoring-volume-modifications.html):
  modifying, then optimizing, then completed; "Size increases take effect once the volume
  modification reaches the optimizing state".
* DescribeVolumesModifications: "If a volume has been modified more than once, the output
  includes only the most recent modification request."

moto applies a modification at once, any number of times, reports each one ``completed`` and
lists them all; every test here fails there.
"""

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

ZONE = "us-east-1a"


@pytest.fixture
def ec2(aws: Callable[[str], Any]) -> Any:
    return aws("ec2")


@pytest.fixture
def profile(control: Callable[..., dict[str, Any]]) -> Iterator[Callable[..., dict[str, Any]]]:
    """``profile(name, **overrides)`` switches the latency profile; back to ``fast`` afterwards."""
    yield lambda name="realistic", **overrides: control("timings", "configure", profile=name, **overrides)
    control("timings", "configure", profile="fast")


@pytest.fixture
def io2(ec2: Any) -> Iterator[Callable[..., str]]:
    made: list[str] = []

    def create(size: int = 100, iops: int = 3000) -> str:
        volume_id: str = ec2.create_volume(
            AvailabilityZone=ZONE, Size=size, Iops=iops, VolumeType="io2", MultiAttachEnabled=True
        )["VolumeId"]
        made.append(volume_id)
        ec2.get_waiter("volume_available").wait(VolumeIds=[volume_id], WaiterConfig={"Delay": 1})
        return volume_id

    yield create
    for volume_id in made:
        ec2.delete_volume(VolumeId=volume_id)


def _volume(ec2: Any, volume_id: str) -> dict[str, Any]:
    volume: dict[str, Any] = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    return volume


def _modifications(ec2: Any, volume_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ec2.describe_volumes_modifications(VolumeIds=[volume_id])[
        "VolumesModifications"
    ]
    return found


def _until_state(ec2: Any, volume_id: str, state: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latest = _modifications(ec2, volume_id)[-1]
        if latest["ModificationState"] == state:
            return latest
        time.sleep(0.2)
    raise AssertionError(f"modification of {volume_id} not {state} within {timeout} s: {latest}")


def _refusal(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = excinfo.value.response["Error"]
    return error["Code"], error["Message"]


def test_a_modification_is_modifying_then_optimizing_with_the_new_size_then_completed(ec2, profile, io2):
    # Given an io2 volume of 100 GiB / 3,000 IOPS, and modifications taking 2 s + 2 s
    profile("fast", volume_modifying=2, volume_optimizing=2)
    volume_id = io2()

    # When it is grown to 200 GiB / 6,000 IOPS
    answer = ec2.modify_volume(VolumeId=volume_id, Size=200, Iops=6000)["VolumeModification"]

    # Then the modification is modifying and the volume still has its old size and IOPS
    assert answer["ModificationState"] == "modifying"
    modifying = _modifications(ec2, volume_id)[-1]
    assert (modifying["ModificationState"], modifying["Progress"]) == ("modifying", 0)
    assert (modifying["OriginalSize"], modifying["TargetSize"]) == (100, 200)
    assert "EndTime" not in modifying
    assert (_volume(ec2, volume_id)["Size"], _volume(ec2, volume_id)["Iops"]) == (100, 3000)
    # and optimizing next, the new size now the volume's
    _until_state(ec2, volume_id, "optimizing")
    assert (_volume(ec2, volume_id)["Size"], _volume(ec2, volume_id)["Iops"]) == (200, 6000)
    # and completed last, at 100 % with its end time
    completed = _until_state(ec2, volume_id, "completed")
    assert completed["Progress"] == 100
    assert "EndTime" in completed


def test_a_new_modification_is_refused_until_the_previous_one_has_completed(ec2, profile, io2):
    # Given a volume whose modification is still modifying, then optimizing
    profile("fast", volume_modifying=2, volume_optimizing=2)
    volume_id = io2()
    ec2.modify_volume(VolumeId=volume_id, Size=200)

    # When another modification is asked for in each of those states
    # Then EC2 refuses it with IncorrectModificationState, naming the state
    with pytest.raises(ClientError) as refused:
        ec2.modify_volume(VolumeId=volume_id, Size=300)
    assert _refusal(refused) == (
        "IncorrectModificationState",
        f"Volume {volume_id} cannot be modified in modification state MODIFYING",
    )
    _until_state(ec2, volume_id, "optimizing")
    with pytest.raises(ClientError) as refused:
        ec2.modify_volume(VolumeId=volume_id, Size=300)
    assert _refusal(refused) == (
        "IncorrectModificationState",
        f"Volume {volume_id} cannot be modified in modification state OPTIMIZING",
    )
    # and accepts it once the previous modification has completed
    _until_state(ec2, volume_id, "completed")
    assert ec2.modify_volume(VolumeId=volume_id, Size=300)["VolumeModification"]["TargetSize"] == 300


def test_at_most_four_modifications_in_a_rolling_24_hours_and_only_the_latest_is_described(ec2, io2):
    # Given a volume modified four times (the fast profile completes each at once)
    volume_id = io2(size=10, iops=1000)
    for size in (11, 12, 13, 14):
        ec2.modify_volume(VolumeId=volume_id, Size=size)

    # When it is modified a fifth time within 24 hours
    with pytest.raises(ClientError) as refused:
        ec2.modify_volume(VolumeId=volume_id, Size=15)

    # Then EC2 refuses it with VolumeModificationRateExceeded
    code, message = _refusal(refused)
    assert code == "VolumeModificationRateExceeded"
    assert "4 times within a rolling 24-hour period" in message
    assert _volume(ec2, volume_id)["Size"] == 14
    # and DescribeVolumesModifications shows the most recent modification only
    described = _modifications(ec2, volume_id)
    assert [(m["TargetSize"], m["ModificationState"]) for m in described] == [(14, "completed")]
    # (filterable by its state)
    filtered = ec2.describe_volumes_modifications(
        VolumeIds=[volume_id], Filters=[{"Name": "modification-state", "Values": ["optimizing"]}]
    )["VolumesModifications"]
    assert filtered == []


def test_a_volume_cannot_shrink_nor_leave_io2s_ranges(ec2, io2):
    volume_id = io2(size=100, iops=3000)
    cases = {
        "shrink": ({"Size": 50}, "New size cannot be smaller than existing size"),
        "too large": ({"Size": 70000}, "Volume of 70000GiB is too large; maximum is 65536GiB."),
        "too many IOPS": ({"Iops": 300000}, "Volume iops of 300000 is too high; maximum is 256000."),
        "too many IOPS per GiB": (
            {"Iops": 200000},
            "Iops to volume size ratio of 2000.000000 is too high; maximum is 1000.000000.",
        ),
    }
    for case, (change, message) in cases.items():
        with pytest.raises(ClientError) as refused:
            ec2.modify_volume(VolumeId=volume_id, **change)
        assert _refusal(refused) == ("InvalidParameterValue", message), case
    # A refused modification is no modification: none is described (asked for by id, a volume
    # never modified is InvalidVolumeModification.NotFound; by filter, absent), the volume is unchanged
    with pytest.raises(ClientError) as refused:
        _modifications(ec2, volume_id)
    assert _refusal(refused) == (
        "InvalidVolumeModification.NotFound",
        f"Modification for volume '{volume_id}' does not exist.",
    )
    by_filter = ec2.describe_volumes_modifications(Filters=[{"Name": "volume-id", "Values": [volume_id]}])
    assert by_filter["VolumesModifications"] == []
    assert (_volume(ec2, volume_id)["Size"], _volume(ec2, volume_id)["Iops"]) == (100, 3000)
