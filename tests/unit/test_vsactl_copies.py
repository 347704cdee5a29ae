"""vsactl and backup copies, against the same real HTTP fake as tests/unit/test_vsactl.py: a set's
copies in backup show and backup list -o wide, the sets copied into a Region (backup copies), and
a copied set restored into a new array there (backup restore-copy): the body and headers sent,
what people are shown, and the API's refusals with their exit codes."""

# ruff: noqa: F811 - the fake's fixtures (api, run) are imported by name: pytest finds them here

import json

import pytest
import yaml
from vsactl import backups
from vsactl.client import ExitCode

from tests.unit.test_vsactl import SPEC_YAML, api, assert_signed, run, spec_file  # noqa: F401 - fixtures
from tests.unit.test_vsactl_conventions import answered_by_the_fake
from vsa_core.api.aws_backups import _summary
from vsa_core.backups.sets import BackupSet

SET_ID = "bk-20261129T190000000Z-5f4c3b2a"
OLDER_ID = "bk-20261128T190000000Z-0a1b2c3d"
ACCOUNT = "210987654321"
SNAPSHOTS = [
    {"volumeId": "vol-0a1b2c3d4e5f60001", "snapshotId": "snap-0a1b2c3d4e5f60001", "state": "completed",
     "progress": 100},
    {"volumeId": "vol-0a1b2c3d4e5f60002", "snapshotId": "snap-0a1b2c3d4e5f60002", "state": "completed",
     "progress": 100},
]  # fmt: skip


def copy_of(snapshot: dict, n: int, state: str) -> dict:
    return {"volumeId": snapshot["volumeId"], "sourceSnapshotId": snapshot["snapshotId"],
            "snapshotId": f"snap-0c0c0c0c0c0c0000{n}", "state": state}  # fmt: skip


COPIES = [
    {"region": "eu-west-1", "accountId": None, "state": "completed",
     "snapshots": [copy_of(SNAPSHOTS[0], 1, "completed"), copy_of(SNAPSHOTS[1], 2, "completed")],
     "startedAt": "2026-11-29T19:05:00+00:00", "completedAt": "2026-11-29T19:21:00+00:00", "failure": None},
    {"region": "us-east-1", "accountId": ACCOUNT, "state": "copying",
     "snapshots": [copy_of(SNAPSHOTS[0], 3, "completed"), copy_of(SNAPSHOTS[1], 4, "pending")],
     "startedAt": "2026-11-29T19:05:00+00:00", "completedAt": None, "failure": None},
    {"region": "ap-southeast-2", "accountId": None, "state": "failed", "snapshots": [],
     "startedAt": "2026-11-29T19:05:00+00:00", "completedAt": None,
     "failure": "CopySnapshot: the KMS key alias/vsa-dr is not shared with the account"},
]  # fmt: skip
BACKUP = {
    "backupId": SET_ID,
    "arrayId": "demo",
    "mode": "crash",
    "label": "nightly",
    "state": "completed",
    "consistency": "crash-consistent",
    "createdAt": "2026-11-29T19:00:00+00:00",
    "snapshots": SNAPSHOTS,
    "hosts": [],
    "copies": COPIES,
}


def said(output: str) -> str:
    """The output with runs of spaces (a table's padding, a wrapped line) made one."""
    return " ".join(output.split())


def row_of(output: str, text: str) -> str:
    (line,) = [line for line in output.splitlines() if text in line]
    return line


# --- backup show / backup list -o wide -----------------------------------------------------------


def test_show_gives_each_copys_destination_state_snapshots_copied_and_failure(run, api):
    api.answer("GET", f"/v1/arrays/demo/backups/{SET_ID}", 200, BACKUP)

    result = run("backup", "show", "demo", SET_ID)

    assert result.exit_code == 0, result.output
    assert_signed(api.only_request())
    completed = row_of(result.stdout, "eu-west-1")
    for text in ("completed", "2/2 copied", "2026-11-29T19:21:00+00:00"):
        assert text in completed, text
    copying = row_of(result.stdout, f"us-east-1/{ACCOUNT}")
    assert "copying" in copying
    assert "1/2 copied" in copying
    failed = row_of(result.stdout, "ap-southeast-2")
    assert "failed" in failed
    assert "0/2 copied" in failed  # no snapshot copy began: counted against the set's two
    assert "CopySnapshot: the KMS key alias/vsa-dr is not shared with the account" in said(result.stdout)


def test_show_of_a_set_without_copies_draws_no_copies_table(run, api):
    api.answer("GET", f"/v1/arrays/demo/backups/{SET_ID}", 200, {**BACKUP, "copies": []})

    result = run("backup", "show", "demo", SET_ID)

    assert result.exit_code == 0, result.output
    assert "destination" not in result.stdout


def listed(backup: dict) -> dict:
    """The list route's row of ``backup``, made by the API's own ``_summary``."""
    return _summary(BackupSet.model_validate(backup))


def test_the_list_route_carries_each_sets_copies_by_place():
    row = listed(BACKUP)

    assert row["copies"] == {"eu-west-1": "completed", f"us-east-1/{ACCOUNT}": "copying",
                             "ap-southeast-2": "failed"}  # fmt: skip
    assert listed({**BACKUP, "copies": []})["copies"] == {}


def test_list_wide_adds_where_each_set_is_copied_and_the_default_table_does_not(run, api):
    older = {**BACKUP, "backupId": OLDER_ID, "createdAt": "2026-11-28T19:00:00+00:00", "copies": []}
    answer = {"arrayId": "demo", "backups": [listed(BACKUP), listed(older)]}
    api.answer("GET", "/v1/arrays/demo/backups", 200, answer)

    wide = run("backup", "list", "demo", "-o", "wide")
    table = run("backup", "list", "demo")

    assert wide.exit_code == 0, wide.output
    assert "eu-west-1: completed" in row_of(wide.stdout, SET_ID)  # the rest wraps in its cell
    for place in (f"us-east-1/{ACCOUNT}: copying", "ap-southeast-2: failed"):
        assert place in wide.stdout, place
    assert row_of(wide.stdout, OLDER_ID).rstrip().rstrip("│ ").endswith("-")
    assert table.exit_code == 0, table.output
    assert "eu-west-1" not in table.stdout
    assert SET_ID in table.stdout


def test_list_json_is_the_apis_answer_with_its_copies(run, api):
    answer = {"arrayId": "demo", "backups": [listed(BACKUP)]}
    api.answer("GET", "/v1/arrays/demo/backups", 200, answer)

    result = run("backup", "list", "demo", "-o", "json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == answer


# --- backup copies ------------------------------------------------------------------------------

COPIED = {
    "copies": [
        {"backupId": SET_ID, "arrayId": "demo", "createdAt": "2026-11-29T19:00:00+00:00",
         "state": "complete", "consistency": "application-consistent", "label": "nightly",
         "snapshots": [
             {"snapshotId": "snap-0c0c0c0c0c0c00001", "sourceVolumeId": "vol-0a1b2c3d4e5f60001",
              "state": "completed"},
             {"snapshotId": "snap-0c0c0c0c0c0c00002", "sourceVolumeId": "vol-0a1b2c3d4e5f60002",
              "state": "completed"}]},
        {"backupId": OLDER_ID, "arrayId": "demo", "createdAt": "2026-11-28T19:00:00+00:00",
         "state": "incomplete", "consistency": None, "label": None,
         "snapshots": [
             {"snapshotId": "snap-0c0c0c0c0c0c00003", "sourceVolumeId": "vol-0a1b2c3d4e5f60001",
              "state": "error"}]},
    ]
}  # fmt: skip


def test_copies_lists_the_sets_copied_here_newest_first(run, api):
    api.answer("GET", "/v1/copies", 200, COPIED)

    result = run("backup", "copies")

    assert result.exit_code == 0, result.output
    assert_signed(api.only_request())
    assert "backup sets copied into this Region" in result.stdout
    header = row_of(result.stdout, "consistency")
    for column in ("set", "array", "created", "state", "snapshots", "label"):
        assert column in header, column
    complete, incomplete = (line for line in result.stdout.splitlines() if "bk-2026" in line)
    assert SET_ID in complete  # whole, to copy into restore-copy
    for text in ("demo", "2026-11-29 19:00:00Z", "complete", "application-consistent", "2/2", "nightly"):
        assert text in complete, text
    assert OLDER_ID in incomplete
    assert "incomplete" in incomplete
    assert "0/1" in incomplete


def test_copies_of_one_array_asks_for_its_sets_and_json_is_the_apis_answer(run, api):
    api.answer("GET", "/v1/copies?arrayId=demo", 200, COPIED)

    result = run("backup", "copies", "--array", "demo", "-o", "json")

    assert result.exit_code == 0, result.output
    assert api.only_request().path == "/v1/copies?arrayId=demo"
    assert json.loads(result.stdout) == COPIED


def test_copies_without_any_says_where_to_run_it(run, api):
    api.answer("GET", "/v1/copies?arrayId=demo", 200, {"copies": []})

    result = run("backup", "copies", "--array", "demo")

    assert result.exit_code == 0, result.output
    assert "no backup sets of array demo copied into this Region" in said(result.stdout)
    assert "run this against the destination's stack" in said(result.stdout)


# --- backup restore-copy ------------------------------------------------------------------------

RESTORE_PATH = f"/v1/copies/{SET_ID}/restores"
DR_SPEC = yaml.safe_load(SPEC_YAML) | {"arrayId": "demo-dr", "availabilityZone": "eu-west-1a"}
RESTORED = {
    "backupId": SET_ID,
    "sourceArrayId": "demo",
    "target": {"arrayId": "demo-dr"},
    "availabilityZone": "eu-west-1a",
    "volumes": [
        {"sourceVolumeId": "vol-0a1b2c3d4e5f60001", "snapshotId": "snap-0c0c0c0c0c0c00001",
         "volumeId": "vol-0e1e2e3e4e5e60001"},
        {"sourceVolumeId": "vol-0a1b2c3d4e5f60002", "snapshotId": "snap-0c0c0c0c0c0c00002",
         "volumeId": "vol-0e1e2e3e4e5e60002"},
    ],
    "registered": DR_SPEC,
}  # fmt: skip


@pytest.fixture
def dr_spec(tmp_path) -> str:
    return spec_file(tmp_path, yaml.safe_dump(DR_SPEC))


def test_restore_copy_posts_the_spec_signed_with_a_key_and_shows_the_new_arrays_volumes(run, api, dr_spec):
    api.answer("POST", RESTORE_PATH, 201, RESTORED)

    result = run("backup", "restore-copy", SET_ID, "-f", dr_spec)

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert_signed(request)
    assert json.loads(request.body) == {"spec": DR_SPEC}
    assert request.headers["idempotency-key"].startswith("vsactl-")
    shown = said(result.stdout)
    assert f"restored the copy of {SET_ID} (array demo) in eu-west-1a" in shown
    for volume in RESTORED["volumes"]:
        assert f"{volume['sourceVolumeId']} │ {volume['snapshotId']} │ {volume['volumeId']}" in shown
    assert "array demo-dr is registered with these volumes" in shown
    assert "vsactl get demo-dr -o yaml | vsactl apply -f -" in shown
    assert "available" not in shown  # not waited for


def test_restore_copy_takes_get_output_without_volumes_from_stdin_and_passes_the_key_on(run, api):
    api.answer("POST", RESTORE_PATH, 201, RESTORED)
    without_volumes = {k: v for k, v in DR_SPEC.items() if k != "volumes"}
    got = yaml.safe_dump({"spec": without_volumes, "version": 3, "status": {}})

    result = run(
        "backup", "restore-copy", SET_ID, "-f", "-", "--idempotency-key", "dr-1", "-o", "json", stdin=got
    )

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert json.loads(request.body) == {"spec": without_volumes}  # the server makes the volumes
    assert request.headers["idempotency-key"] == "dr-1"
    assert json.loads(result.stdout) == RESTORED


def test_restore_copy_wait_follows_the_volumes_with_ec2s_waiter(run, api, dr_spec, monkeypatch):
    monkeypatch.setattr(backups, "VOLUME_POLL_SECONDS", 0)
    answered_by_the_fake(monkeypatch, api)  # EC2's DescribeVolumes
    api.answer("POST", RESTORE_PATH, 201, RESTORED)
    api.volume_states = ["creating", "available"]

    result = run("backup", "restore-copy", SET_ID, "-f", dr_spec, "--wait")

    assert result.exit_code == 0, result.output
    assert api.described == [["vol-0e1e2e3e4e5e60001", "vol-0e1e2e3e4e5e60002"]] * 2
    assert "2 volume(s) available" in result.stdout
    assert "vsactl get demo-dr -o yaml | vsactl apply -f -" in said(result.stdout)


def test_restore_copy_wait_times_out_with_its_own_code(run, api, dr_spec, monkeypatch):
    monkeypatch.setattr(backups, "VOLUME_POLL_SECONDS", 0)
    answered_by_the_fake(monkeypatch, api)
    api.answer("POST", RESTORE_PATH, 201, RESTORED)
    api.volume_states = ["creating"]

    result = run("backup", "restore-copy", SET_ID, "-f", dr_spec, "--wait", "--timeout", "1")

    assert result.exit_code == ExitCode.TIMED_OUT, result.output
    assert "not all available" in result.output


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (409, f"the copy of {SET_ID} here is copying (1 of 2 snapshots): only a complete copy can be "
              "restored", ExitCode.REFUSED),
        (409, "array 'demo-dr' exists: restore into a new array id", ExitCode.REFUSED),
        (404, f"no copy of backup set '{SET_ID}' in this Region: `GET /copies` lists the sets copied here",
         ExitCode.NOT_FOUND),
    ],
)  # fmt: skip
def test_restore_copy_refused_shows_the_apis_message_and_exit_code(run, api, dr_spec, status, message, code):
    api.answer("POST", RESTORE_PATH, status, {"message": message})

    result = run("backup", "restore-copy", SET_ID, "-f", dr_spec)

    assert result.exit_code == code
    assert f"HTTP {status}" in result.stderr
    assert message in said(result.stderr)
    assert result.stdout == ""


def test_restore_copy_with_a_bad_spec_file_sends_nothing(run, api, tmp_path):
    missing = run("backup", "restore-copy", SET_ID, "-f", str(tmp_path / "nope.yaml"))
    no_id = run("backup", "restore-copy", SET_ID, "-f", spec_file(tmp_path, "availabilityZone: eu-west-1a\n"))

    assert missing.exit_code == ExitCode.BAD_INPUT
    assert "no such file" in missing.output
    assert no_id.exit_code == ExitCode.BAD_INPUT
    assert "the spec has no arrayId" in no_id.output
    assert api.requests == []
