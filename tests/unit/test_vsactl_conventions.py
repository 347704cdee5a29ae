"""vsactl follows the habits operators bring from kubectl and terraform: one version, ``-o
table|json|yaml`` on every command, ``apply -f -``, ``get -o yaml | apply -f -``, ``--wait`` on
delete and restore, a question (or ``--yes``) before anything is destroyed, exit codes a script
can tell apart, shell completion. Against the same real HTTP fake as tests/unit/test_vsactl.py."""

# ruff: noqa: F811 - the fake's fixtures (api, run) are imported by name: pytest finds them here

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.testing
import yaml
from vsactl import backups
from vsactl import main as vsactl_main
from vsactl.client import ExitCode
from vsactl.main import app

from tests.unit import test_vsactl
from tests.unit.test_vsactl import SPEC_YAML, api, run, spec_file  # noqa: F401 - fixtures
from vsa_core import VERSION

ARRAY = yaml.safe_load(SPEC_YAML)
GET_ANSWER = {
    "spec": ARRAY,
    "version": 3,
    "desiredControllers": 2,
    "status": {"controllers": [{"instanceId": "i-0a1b2c3d4e5f60001", "state": "InService"}]},
    "backups": [],
}
UNCHANGED = {"array": ARRAY, "version": 3, "changes": []}


def commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command's path and Typer's command object (Typer carries its own click)."""
    found = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


ALL_COMMANDS = commands(typer.main.get_command(app))


def answered_by_the_fake(monkeypatch, api) -> None:
    """The CLI's own AWS calls (CloudFormation, EC2) go to the fake (the unit tests' conftest
    ignores configured endpoints)."""
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{api.port}")


def test_the_version_is_written_once_and_everything_reports_it(run):
    result = run("--version", endpoint=None)
    assert result.exit_code == 0
    assert result.output.strip() == f"vsactl {VERSION}"
    assert importlib.metadata.version("vsa-control-plane") == VERSION


def test_version_shows_the_deployed_stacks_version_beside_its_own(run, api, monkeypatch):
    served = test_vsactl.DESCRIBE_STACKS.replace(
        "<Outputs>",
        "<Outputs><member><OutputKey>Version</OutputKey><OutputValue>9.8.7</OutputValue></member>",
    )
    monkeypatch.setattr(test_vsactl, "DESCRIBE_STACKS", served)
    answered_by_the_fake(monkeypatch, api)
    result = run("version", "-o", "json", endpoint=None)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"client": VERSION, "stack": "vsa-control-plane", "server": "9.8.7"}


@pytest.mark.parametrize(("path", "command"), ALL_COMMANDS, ids=[" ".join(p) for p, _ in ALL_COMMANDS])
def test_every_command_that_prints_an_answer_offers_table_json_and_yaml(path, command):
    if path == ("completion",):
        return  # prints a shell script, nothing else
    (option,) = [p for p in command.params if "--output" in getattr(p, "opts", [])]
    assert "-o" in option.opts
    offered = [o.value for o in option.type_descriptor.annotation]
    # a list may add kubectl's wide (more columns): backup drills
    assert offered in (["table", "json", "yaml"], ["table", "wide", "json", "yaml"]), path


def test_every_command_has_help(run):
    for path, _ in ALL_COMMANDS:
        result = run(*path, "--help", endpoint=None)
        assert result.exit_code == 0, (path, result.output)


def test_get_yaml_is_the_apis_answer_and_apply_takes_it_back_from_stdin(run, api):
    api.answer("GET", "/v1/arrays/demo", 200, GET_ANSWER)
    api.answer("PUT", "/v1/arrays/demo", 200, UNCHANGED)

    got = run("get", "demo", "-o", "yaml")
    assert got.exit_code == 0, got.output
    assert yaml.safe_load(got.output) == GET_ANSWER

    applied = run("apply", "-f", "-", stdin=got.output)
    assert applied.exit_code == 0, applied.output
    assert "array demo unchanged (version 3)" in applied.output
    put = api.requests[-1]
    assert (put.method, put.path) == ("PUT", "/v1/arrays/demo")
    assert json.loads(put.body) == ARRAY  # the spec alone: status and version are read-only


def test_get_json_is_taken_back_too(run, api, tmp_path):
    api.answer("GET", "/v1/arrays/demo", 200, GET_ANSWER)
    api.answer("PUT", "/v1/arrays/demo", 200, UNCHANGED)
    saved = tmp_path / "demo.json"
    saved.write_text(run("get", "demo", "-o", "json").output)
    assert run("apply", "-f", str(saved)).exit_code == 0
    assert json.loads(api.requests[-1].body) == ARRAY


def test_apply_from_stdin_names_stdin_in_its_errors(run, api):
    result = run("apply", "-f", "-", stdin="arrayId: [unclosed\n")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "<stdin>:" in result.output
    assert api.requests == []


def test_a_destructive_apply_from_stdin_cannot_ask_and_needs_yes(run, api):
    api.answer("PUT", "/v1/arrays/demo?deleteRemovedVolumes=true", 200, UNCHANGED)
    refused = run("apply", "-f", "-", "--delete-removed-volumes", stdin=SPEC_YAML)
    assert refused.exit_code == ExitCode.BAD_INPUT
    assert "pass --yes" in refused.output
    assert api.requests == []

    done = run("apply", "-f", "-", "--delete-removed-volumes", "--yes", stdin=SPEC_YAML)
    assert done.exit_code == 0, done.output
    assert api.only_request().path == "/v1/arrays/demo?deleteRemovedVolumes=true"


def test_a_destructive_apply_asks_and_a_no_sends_nothing(run, api, tmp_path):
    result = run("apply", "-f", spec_file(tmp_path), "--force", stdin="n\n")
    assert result.exit_code == ExitCode.FAILED
    assert "force volumes off mounted hosts?" in result.output
    assert api.requests == []


@pytest.mark.parametrize("keep", ["0", "-1"])
def test_prune_refuses_to_keep_nothing(run, api, keep):
    result = run("backup", "prune", "demo", "--keep", keep, "--yes")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "--keep" in result.output
    assert api.requests == []


RETENTION = {
    "keep": 1,
    "plan": [
        {
            "backupId": "bk-2",
            "createdAt": "2026-01-02",
            "state": "completed",
            "action": "keep",
            "reason": "newest",
        },
        {
            "backupId": "bk-1",
            "createdAt": "2026-01-01",
            "state": "completed",
            "action": "delete",
            "reason": "old",
        },
    ],
}


def test_prune_shows_what_it_would_delete_and_asks(run, api):
    api.answer("GET", "/v1/arrays/demo/retention?keep=1", 200, RETENTION)
    api.answer("POST", "/v1/arrays/demo/retention", 200, {**RETENTION, "deleted": ["bk-1"]})

    declined = run("backup", "prune", "demo", "--keep", "1", stdin="n\n")
    assert declined.exit_code == ExitCode.FAILED
    assert "bk-1" in declined.output
    assert "Delete these 1 backup set(s) of demo" in declined.output
    assert [r.method for r in api.requests] == ["GET"]

    agreed = run("backup", "prune", "demo", "--keep", "1", "--yes")
    assert agreed.exit_code == 0, agreed.output
    assert [r.method for r in api.requests] == ["GET", "GET", "POST"]
    assert json.loads(api.requests[-1].body) == {"keep": 1}


def test_prune_with_nothing_to_delete_asks_nothing(run, api):
    nothing = {**RETENTION, "plan": RETENTION["plan"][:1]}
    api.answer("GET", "/v1/arrays/demo/retention", 200, nothing)
    result = run("backup", "prune", "demo")
    assert result.exit_code == 0, result.output
    assert [r.method for r in api.requests] == ["GET"]


DELETING = {"deleting": "demo", "deleteVolumes": False, "executionArn": "arn:aws:states:x:1:execution:d:e"}


@pytest.fixture
def fast_polls(monkeypatch):
    monkeypatch.setattr(vsactl_main, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(backups, "VOLUME_POLL_SECONDS", 0)


def test_delete_wait_follows_until_the_array_is_gone(run, api, fast_polls):
    api.answer("DELETE", "/v1/arrays/demo?deleteVolumes=false", 202, DELETING)
    api.answer_in_turn(
        "GET", "/v1/arrays/demo", (200, GET_ANSWER), (200, GET_ANSWER), (404, {"message": "gone"})
    )
    result = run("delete", "demo", "--yes", "--wait")
    assert result.exit_code == 0, result.output
    assert "array demo deleted (keeping its volumes)" in result.output
    assert [r.method for r in api.requests] == ["DELETE", "GET", "GET", "GET"]


def test_delete_wait_reports_a_failed_deletion(run, api, fast_polls):
    api.answer("DELETE", "/v1/arrays/demo?deleteVolumes=false", 202, DELETING)
    api.answer("GET", "/v1/arrays/demo", 200, {**GET_ANSWER, "deleteFailure": "DetachVolume refused"})
    result = run("delete", "demo", "--yes", "--wait")
    assert result.exit_code == ExitCode.FAILED
    assert "DetachVolume refused" in result.output


def test_delete_wait_gives_up_at_its_timeout_with_its_own_code(run, api, fast_polls):
    api.answer("DELETE", "/v1/arrays/demo?deleteVolumes=false", 202, DELETING)
    api.answer("GET", "/v1/arrays/demo", 200, GET_ANSWER)
    result = run("delete", "demo", "--yes", "--wait", "--timeout", "0")
    assert result.exit_code == ExitCode.TIMED_OUT
    assert "still being deleted" in result.output


RESTORED = {
    "arrayId": "demo",
    "backupId": "bk-1",
    "target": {"arrayId": "demo2"},
    "availabilityZone": "eu-west-3a",
    "volumes": [
        {"sourceVolumeId": "vol-a", "snapshotId": "snap-a", "volumeId": "vol-0a1b2c3d4e5f60011"},
        {"sourceVolumeId": "vol-b", "snapshotId": "snap-b", "volumeId": "vol-0a1b2c3d4e5f60012"},
    ],
}


def test_restore_wait_follows_the_volumes_with_ec2s_waiter(run, api, fast_polls, monkeypatch):
    answered_by_the_fake(monkeypatch, api)  # EC2's DescribeVolumes
    api.answer("POST", "/v1/arrays/demo/restores", 201, RESTORED)
    api.volume_states = ["creating", "creating", "available"]
    result = run("restore", "demo", "bk-1", "--new-array", "demo2", "--wait")
    assert result.exit_code == 0, result.output
    assert "2 volume(s) available" in result.output
    assert "vsactl get demo2 -o yaml | vsactl apply -f -" in result.output
    assert api.described == [["vol-0a1b2c3d4e5f60011", "vol-0a1b2c3d4e5f60012"]] * 3


def test_restore_wait_times_out_with_its_own_code(run, api, fast_polls, monkeypatch):
    answered_by_the_fake(monkeypatch, api)
    api.answer("POST", "/v1/arrays/demo/restores", 201, RESTORED)
    api.volume_states = ["creating"]
    result = run("restore", "demo", "bk-1", "--volumes-only", "--wait", "--timeout", "1")
    assert result.exit_code == ExitCode.TIMED_OUT, result.output
    assert "not all available" in result.output


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, ExitCode.BAD_INPUT),
        (422, ExitCode.BAD_INPUT),
        (403, ExitCode.REFUSED),
        (409, ExitCode.REFUSED),
        (412, ExitCode.REFUSED),
        (429, ExitCode.REFUSED),
        (404, ExitCode.NOT_FOUND),
        (504, ExitCode.TIMED_OUT),
        (500, ExitCode.FAILED),
    ],
)
def test_exit_codes_tell_bad_input_refused_not_found_and_timed_out_apart(run, api, tmp_path, status, code):
    api.answer("PUT", "/v1/arrays/demo", status, {"message": f"answered {status}"})
    result = run("apply", "-f", spec_file(tmp_path))
    assert result.exit_code == code
    assert f"answered {status}" in result.output


def test_the_exit_codes_are_documented():
    doc = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    for code in ExitCode:
        assert f"| {code.value} |" in doc, (
            f"docs/cli.md does not document exit code {code.value} ({code.name})"
        )


def test_completion_scripts_are_printed_and_complete_commands():
    for shell in ("bash", "zsh", "fish", "powershell"):
        script = typer.testing.CliRunner().invoke(app, ["completion", shell])
        assert script.exit_code == 0
        assert "_VSACTL_COMPLETE" in script.output, shell
    vsactl = Path(sys.executable).parent / "vsactl"  # the installed entry point, as a shell runs it
    env = {
        **os.environ,
        "_VSACTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "vsactl backup pr",
        "COMP_CWORD": "2",
    }
    answer = subprocess.run([str(vsactl)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert answer.stdout.split() == ["prune"], answer


def test_backup_list_shows_every_id_whole_to_copy_into_restore(run, api):
    backup_id = "bk-20261128T215814589Z-4d9a021e"
    row = {"backupId": backup_id, "createdAt": "2026-11-28T21:58:14Z", "mode": "application"}
    row |= {"state": "completed", "consistency": "application-consistent", "snapshots": 2}
    api.answer("GET", "/v1/arrays/demo/backups", 200, {"backups": [row]})
    result = run("backup", "list", "demo")  # not a terminal: 80 columns
    assert result.exit_code == 0, result.output
    assert backup_id in result.output
