"""``make demo`` leaves a usable array: tools/demo.py run against the deployed stack, then every
command it prints for a newcomer run as printed (taken from its facts file, checked against what
it printed), in a shell holding only the line it says to export, then its release of the host's
filesystem.

The demo runs with ``--skip-day2``: its scale-out by alarm, added volume, controller replacement
and key rotation (two of its three minutes) are covered by their own tests and change nothing the
printed commands need; the commands it prints are the ones ``make demo`` prints.
"""

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.documents.xfs_lab import _missing, is_mountpoint
from tests.integration.arrays_world import control, read_array, wait_until_gone
from tests.integration.conftest import ROOT, Api
from tests.prerequisites import require

PRINTED = [
    "get",
    "get-yaml",
    "events",
    "backup-create",
    "backup-list",
    "restore",
    "delete-restored",
    "delete",
    "clean",
]
DEMO_SECONDS = 600  # the demo with --skip-day2 takes about a minute on an idle machine
COMMAND_SECONDS = 600  # each command bounds its own --wait; this only stops a hung process


@dataclass
class DemoRun:
    facts: dict[str, Any]
    printed: str
    seconds: float

    def command(self, name: str) -> str:
        return str(next(c["run"] for c in self.facts["commands"] if c["name"] == name))


def newcomer(line: str, facts: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``line`` run from the checkout as a newcomer would, in a new shell that exported only
    the demo's printed environment (a terminal 200 columns wide)."""
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "COLUMNS": "200",
        **facts["env"],
    }
    return subprocess.run(
        shlex.split(line), cwd=ROOT, env=env, capture_output=True, text=True, timeout=COMMAND_SECONDS
    )


def attached_to(device: str) -> str | None:
    try:
        return Path("/sys/block", Path(device).name, "loop", "backing_file").read_text().strip()
    except OSError:
        return None


def delete_array(api: Api, array_id: str, timeout: float = 300) -> None:
    """DELETE (with its owned volumes), asked again while refused (409: a controller still
    bootstrapping), then wait until it is gone."""
    deadline = time.monotonic() + timeout
    while (answer := api.call("DELETE", f"/arrays/{array_id}?deleteVolumes=true"))[0] == 409:
        assert time.monotonic() < deadline, f"array {array_id} still refuses deletion: {answer}"
        time.sleep(2)
    assert answer[0] in (200, 202, 404), answer
    wait_until_gone(api, array_id, timeout=timeout)


def leave_nothing(api: Api, state: Path) -> None:
    """Undo what the demo made, whatever the test reached: its arrays, its host's filesystem,
    the restored volumes, and the operator's volumes and host it made first (in that order: the
    callbacks run last first). Every step runs even when one before it failed."""
    with contextlib.ExitStack() as undo:
        for path in state.glob("demo-*.json"):
            facts = json.loads(path.read_text())
            array_id, operator = facts["arrayId"], facts.get("operator", {})
            if host := operator.get("hostInstanceId"):
                undo.callback(boto3.client("ec2").terminate_instances, InstanceIds=[host])
                undo.callback(
                    control, os.environ["AWS_ENDPOINT_URL"], "ssm", "deregister_node", InstanceId=host
                )
            undo.callback(delete_volumes, [operator.get("volumeId"), operator.get("gp3VolumeId")])
            undo.callback(delete_restored_volumes, f"{array_id}-restored")
            undo.callback(
                subprocess.run,
                [sys.executable, "tools/demo.py", "--clean", array_id],
                cwd=ROOT,
                env={**os.environ, "VSA_STATE": str(state)},
                check=True,
                timeout=120,
            )
            for array in (array_id, f"{array_id}-restored"):
                undo.callback(delete_array, api, array)


def delete_restored_volumes(array_id: str) -> None:
    found = boto3.client("ec2").describe_volumes(Filters=[{"Name": "tag:vsa:array", "Values": [array_id]}])
    delete_volumes([v["VolumeId"] for v in found["Volumes"]])


def delete_volumes(volumes: list[str | None]) -> None:
    ec2 = boto3.client("ec2")
    for volume in filter(None, volumes):
        # still attached to a controller being terminated: the local cloud is thrown away
        with contextlib.suppress(ec2.exceptions.ClientError):
            ec2.delete_volume(VolumeId=volume)


@pytest.fixture
def demo(tmp_path: Path, api: Api) -> Iterator[DemoRun]:
    """tools/demo.py --skip-day2 run to its end, its state (spec, facts, the host's filesystem)
    under the test's tmp dir; everything it made undone afterwards, even on failure."""
    reason = _missing()
    require(reason and f"the demo's host filesystem is real XFS on a loop device: {reason}")
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "tools/demo.py", "--skip-day2"],
            cwd=ROOT,
            env={**os.environ, "VSA_STATE": str(tmp_path), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=DEMO_SECONDS,
        )
        seconds = time.monotonic() - started
        assert done.returncode == 0, f"the demo failed:\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
        (facts_file,) = tmp_path.glob("demo-*.json")
        print(f"the demo (--skip-day2): {seconds:.0f} s")
        yield DemoRun(json.loads(facts_file.read_text()), done.stdout, seconds)
    finally:
        leave_nothing(api, tmp_path)


@pytest.mark.timeout(1200)  # the demo, then nine commands (three wait on workflows), beside other tests
def test_the_commands_the_demo_prints_work_as_shown(demo: DemoRun, api: Api) -> None:
    # Given the array the demo left: its facts are what it printed, its host's filesystem mounted
    facts = demo.facts
    array_id, restored, backup_id = facts["arrayId"], facts["restoredArrayId"], facts["backupId"]
    assert facts["finished"] is True
    assert [c["name"] for c in facts["commands"]] == PRINTED
    export = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in facts["env"].items())
    for line in [export, *(c["run"] for c in facts["commands"])]:
        assert f"    {line}\n" in demo.printed, f"not printed as is: {line}"
    (fs,) = facts["host"]["filesystems"]
    mountpoint, image = Path(fs["mountpoint"]), Path(fs["image"])
    assert is_mountpoint(mountpoint)

    # When a newcomer looks around
    shown = newcomer(demo.command("get"), facts)
    as_yaml = newcomer(demo.command("get-yaml"), facts)
    story = newcomer(demo.command("events"), facts)

    # Then the array is there, converged, with the host's mountpoint and the demo's backup set
    assert shown.returncode == 0, shown.stderr
    assert f"Array {array_id}" in shown.stdout
    assert str(mountpoint) in shown.stdout
    assert backup_id in shown.stdout
    assert as_yaml.returncode == 0, as_yaml.stderr
    spec = yaml.safe_load(as_yaml.stdout)["spec"]
    assert spec["arrayId"] == array_id
    assert spec["hosts"][0]["mountpoints"] == [str(mountpoint)]
    assert story.returncode == 0, story.stderr
    assert f"[{backup_id}]" in story.stdout

    # When they take an application-consistent backup, then list the sets
    made = newcomer(demo.command("backup-create"), facts)
    listed = newcomer(demo.command("backup-list"), facts)

    # Then it completes application-consistent (the host's filesystem froze and thawed), listed
    # beside the demo's
    assert made.returncode == 0, f"{made.stdout}\n{made.stderr}"
    status, answer = api.call("GET", f"/arrays/{array_id}/backups")
    assert status == 200, answer
    newest, *_ = answer["backups"]
    assert newest["backupId"] != backup_id
    assert (newest["state"], newest["consistency"]) == ("completed", "application-consistent"), newest
    assert "application-consistent" in made.stdout
    assert listed.returncode == 0, listed.stderr
    assert newest["backupId"] in listed.stdout
    assert backup_id in listed.stdout

    # When they restore the demo's set as a new array
    restoring = newcomer(demo.command("restore"), facts)

    # Then the new array is registered with one available volume per volume of the source
    assert restoring.returncode == 0, f"{restoring.stdout}\n{restoring.stderr}"
    status, copy = read_array(api, restored)
    assert status == 200, copy
    source_volumes = len(read_array(api, array_id)[1]["spec"]["volumes"])
    volumes = [v["volumeId"] for v in copy["spec"]["volumes"]]
    assert len(volumes) == source_volumes
    described = boto3.client("ec2").describe_volumes(VolumeIds=volumes)["Volumes"]
    assert {v["State"] for v in described} == {"available"}

    # When they delete both arrays, waiting
    gone_copy = newcomer(demo.command("delete-restored"), facts)
    gone = newcomer(demo.command("delete"), facts)

    # Then each is gone when the command returns
    assert gone_copy.returncode == 0, f"{gone_copy.stdout}\n{gone_copy.stderr}"
    assert api.call("GET", f"/arrays/{restored}")[0] == 404
    assert gone.returncode == 0, f"{gone.stdout}\n{gone.stderr}"
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404

    # When they release the host's filesystem, twice
    released = newcomer(demo.command("clean"), facts)
    again = newcomer(demo.command("clean"), facts)

    # Then it is unmounted, its loop device detached and its image gone; the second run is a no-op
    assert released.returncode == 0, f"{released.stdout}\n{released.stderr}"
    assert not is_mountpoint(mountpoint)
    assert attached_to(fs["device"]) != str(image)
    assert not image.exists()
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr}"
    assert "nothing left to release" in again.stdout
