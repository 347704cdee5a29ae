"""What integration tests of backups share: an array with io2 volumes, hosts whose mountpoints
are real XFS filesystems (loop devices, as in tests/documents/xfs_lab.py, so freeze-io and
thaw-io freeze and thaw for real through the local cloud's Run Command), and a serving
controller.

The serving controller is real: the array's group launches it and the BootstrapController
workflow attaches every array volume, configures the target (on its sandbox node, with the fake
nvme/modprobe) and connects every host's paths before marking its slot ``serving``
(``serving_controller`` waits for that).
"""

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.documents.xfs_lab import Lab, _missing
from tests.integration.arrays_world import AMI, AZ, World, control, create_array, settle
from tests.integration.conftest import Api
from tests.integration.runs import until_final
from tests.prerequisites import require
from vsa_core.controllers.slots import DEVICE_NAMES
from vsa_core.waiters import execution_arn


@dataclass
class BackupArray:
    array_id: str
    volumes: list[str]
    hosts: dict[str, list[Path]]  # instance id -> its XFS mountpoints
    controller: str = ""
    stray_volume: str = ""  # attached to the controller, in no array
    spec: dict[str, Any] = field(default_factory=dict)


def backup_spec(
    array_id: str,
    volume_ids: list[str],
    host_mounts: dict[str, list[Path]],
    mode: str,
    retention: int,
    controller_profile: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An array of these existing volumes and hosts (their mountpoints), one to two controllers,
    a backup policy whose schedule never fires during a test."""
    return {
        "specVersion": 1,
        "arrayId": array_id,
        "availabilityZone": AZ,
        "volumes": [{"volumeId": v} for v in volume_ids],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI, **(controller_profile or {})},
        "perControllerIops": 260_000,  # the figures the tests use (r5b.2xlarge sustains 21,667)
        "minControllers": 1,
        "maxControllers": 2,
        "hosts": [{"instanceId": i, "mountpoints": [str(m) for m in ms]} for i, ms in host_mounts.items()],
        # the watchdog's deadline at the policy's maximum, not the default 10 s: the freeze lasts
        # from the hosts' freeze to the thaw's delivery, several Lambda steps and Run Commands,
        # each seconds long when the local cloud shares two busy cores (the watchdog tests set
        # their own short deadline)
        "backup": {
            "schedule": "cron(0 3 1 1 ? 2099)",
            "mode": mode,
            "retention": retention,
            "freezeTimeoutSeconds": 60,
        },
    }


def serving_controller(table: str, array: BackupArray, world: World, timeout: float = 240) -> str:
    """The array's serving controller, bootstrapped for real by the BootstrapController workflow
    (ControllerLifecycle runs on the local cloud): wait for the group to settle and a slot
    ``serving``; then attach one volume of no array to it, which CreateSnapshots must leave out."""
    settle(array.array_id, timeout=timeout)
    dynamodb = boto3.client("dynamodb")
    deadline = time.monotonic() + timeout
    while True:
        slots = dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :slot)",
            ExpressionAttributeValues={":pk": {"S": f"ARRAY#{array.array_id}"}, ":slot": {"S": "SLOT#"}},
            ConsistentRead=True,
        )["Items"]
        serving = [s["instanceId"]["S"] for s in slots if s.get("state", {}).get("S") == "serving"]
        if serving:
            break
        assert time.monotonic() < deadline, f"array {array.array_id}: no serving controller after {timeout} s"
        time.sleep(1)
    instance_id = serving[0]
    ec2 = boto3.client("ec2")
    stray = world.volume()
    used = {
        m["DeviceName"]
        for m in ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0].get(
            "BlockDeviceMappings", []
        )
    }
    device = next(d for d in DEVICE_NAMES if d not in used)
    ec2.attach_volume(VolumeId=stray, InstanceId=instance_id, Device=device)
    ec2.get_waiter("volume_in_use").wait(VolumeIds=[stray], WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    array.controller, array.stray_volume = instance_id, stray
    return instance_id


@pytest.fixture
def xfs_lab(tmp_path: Path) -> Iterator[Lab]:
    reason = _missing()
    require(reason and f"backups freeze real XFS filesystems: {reason}")
    lab = Lab(root=tmp_path, state_dir=Path("/run/vsa-freeze"))
    try:
        yield lab
    finally:
        lab.cleanup()


@pytest.fixture
def backup_array(
    api: Api, world: World, arrays: Callable[[], str], xfs_lab: Lab, stack_outputs: dict[str, str]
) -> Callable[..., BackupArray]:
    """``backup_array(volumes=2, hosts=2, mountpoints=1, mode="application", retention=7,
    policy=None)``: an applied array with a serving controller (``policy``: more of the backup
    policy, e.g. its drill or copies).
    The backup tests run under the realistic latency profile, but with snapshots pending 10 s,
    not its 30 s: still several polls of every wait on a pending snapshot, and the tier stays
    within the test command's budget."""
    control(world.endpoint, "ebs", "configure", snapshot_seconds=10)

    def make(
        volumes: int = 2,
        hosts: int = 2,
        mountpoints: int = 1,
        mode: str = "application",
        retention: int = 7,
        policy: dict[str, Any] | None = None,
    ) -> BackupArray:
        array_id = arrays()
        volume_ids = [world.volume() for _ in range(volumes)]
        host_mounts: dict[str, list[Path]] = {}
        for h in range(hosts):
            instance = world.host()
            host_mounts[instance] = [xfs_lab.xfs(f"h{h}m{m}").mountpoint for m in range(mountpoints)]
        spec = backup_spec(array_id, volume_ids, host_mounts, mode, retention, world.controller_profile())
        spec["backup"].update(policy or {})
        create_array(api, array_id, spec)
        array = BackupArray(array_id, volume_ids, host_mounts, spec=spec)
        serving_controller(stack_outputs["RegistryTableName"], array, world)
        return array

    return make


def backup_finished(stack_outputs: dict[str, str], backup_id: str) -> dict[str, Any]:
    """The ConsistentBackup execution of ``backup_id`` once it has ended."""
    return until_final(execution_arn(stack_outputs["ConsistentBackupStateMachineArn"], backup_id))


def frozen(lab: Lab, mountpoint: Path) -> bool:
    """Whether writes to ``mountpoint`` block (a frozen filesystem): a write and flush that do not
    finish within 2 s (the lab ends the writer at cleanup, after thawing)."""
    writer = lab.spawn(
        "bash", "-c", f"echo x > {mountpoint}/.probe && sync -f {mountpoint}/.probe", start_new_session=True
    )
    give_up = time.monotonic() + 2
    while time.monotonic() < give_up:
        if writer.poll() is not None:
            return False
        time.sleep(0.02)
    return True
