"""The flows docs/cli.md documents, run as an operator runs them: the installed ``vsactl``
(a subprocess, its own AWS session and SigV4 signing) against the deployed stack, the real
Lambda code and workflows behind it.

- ``vsactl get ID -o yaml | vsactl apply -f -`` is a plan with no change (the declarative round trip).
- A restore as documented: ``backup create --wait``, ``restore --new-array NEW --wait``, then
  ``vsactl get NEW -o yaml | vsactl apply -f - --wait`` makes NEW serve, and ``delete --yes --wait``
  returns when it is gone.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.integration.arrays_world import put_new, settle, spec_for
from tests.integration.conftest import STACK, Api

VSACTL = Path(sys.executable).parent / "vsactl"


def vsactl(*args: str, stdin: str | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The installed vsactl, as a shell runs it (the environment names the local cloud)."""
    return subprocess.run(
        [str(VSACTL), "--stack", STACK, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"{result.args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


def test_get_as_yaml_applied_back_is_a_plan_with_no_change(api: Api, world: Any, arrays: Any) -> None:
    # Given an applied array (an existing volume and an owned one, a host, a backup policy)
    array_id = arrays()
    put_new(api, spec_for(array_id, world))
    settle(array_id)

    # When its YAML is read and applied back from stdin
    got = ok(vsactl("get", array_id, "-o", "yaml"))
    applied = ok(vsactl("apply", "-f", "-", stdin=got))

    # Then nothing changes: the plan is empty and the version the same
    before = yaml.safe_load(got)
    assert f"array {array_id} unchanged (version {before['version']})" in applied, applied
    after = json.loads(ok(vsactl("get", array_id, "-o", "json")))
    assert (after["version"], after["spec"]) == (before["version"], before["spec"])


@pytest.mark.usefixtures("realistic_timings")
def test_a_restore_as_documented_serves_a_new_array_and_delete_waits_until_it_is_gone(
    api: Api, backup_array: Any, arrays: Any
) -> None:
    # Given an array with a serving controller, and a set of it made with vsactl
    array = backup_array(volumes=1, hosts=1, mode="crash")
    backup = json.loads(
        ok(vsactl("backup", "create", array.array_id, "--mode", "crash", "--wait", "-o", "json"))
    )
    assert backup["state"] == "completed", backup

    # When it is restored into a new array as docs/cli.md says, and that array applied
    new = arrays()  # deleted after the test whatever happens
    restored = json.loads(
        ok(vsactl("restore", array.array_id, backup["backupId"], "--new-array", new, "--wait", "-o", "json"))
    )
    volumes = [v["volumeId"] for v in restored["volumes"]]
    ec2 = boto3.client("ec2")
    assert {v["State"] for v in ec2.describe_volumes(VolumeIds=volumes)["Volumes"]} == {"available"}
    # registered, nothing made yet: shown as waiting for its first apply, not as one that stopped
    shown = ok(vsactl("get", new))
    assert "Awaiting apply" in shown, shown
    assert "Apply unfinished" not in shown, shown
    spec = ok(vsactl("get", new, "-o", "yaml"))
    applied = ok(vsactl("apply", "-f", "-", "--wait", stdin=spec))

    # Then the new array is applied on the restored volumes and converged
    assert f"array {new} applied" in applied, applied
    answer = json.loads(ok(vsactl("get", new, "-o", "json")))
    assert [v["volumeId"] for v in answer["spec"]["volumes"]] == volumes
    assert answer["reconcile"]["state"] == "converged", answer["reconcile"]
    assert answer.get("applying") is None, answer["applying"]

    # And delete --wait returns once the array is gone (the restored volumes stay: not owned)
    gone = ok(vsactl("delete", new, "--yes", "--wait"))
    assert f"array {new} deleted" in gone
    assert api.call("GET", f"/arrays/{new}")[0] == 404
    for volume in volumes:
        ec2.get_waiter("volume_available").wait(
            VolumeIds=[volume], WaiterConfig={"Delay": 1, "MaxAttempts": 120}
        )
        ec2.delete_volume(VolumeId=volume)
