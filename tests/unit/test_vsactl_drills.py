"""vsactl backup drill|drills|drill-show against the same real HTTP fake as tests/unit/test_vsactl.py:
the body and headers a drill is started with, --wait to each end, and what people are shown."""

# ruff: noqa: F811 - the fake's fixtures (api, run) are imported by name: pytest finds them here

import json

import pytest
from vsactl import drills
from vsactl.client import ExitCode

from tests.unit.test_vsactl import api, assert_signed, run  # noqa: F401 - fixtures

DRILL_ID = "drill-20261129t203000z-ab12cd"
SET_ID = "bk-20261129T190000000Z-5f4c3b2a"
PATH = "/v1/arrays/demo/drills"
VOLUMES = [
    {"sourceVolumeId": "vol-0a1b2c3d4e5f60001", "snapshotId": "snap-0a1b2c3d4e5f60001",
     "volumeId": "vol-0d1d2d3d4d5d60001"},
    {"sourceVolumeId": "vol-0a1b2c3d4e5f60002", "snapshotId": "snap-0a1b2c3d4e5f60002",
     "volumeId": "vol-0d1d2d3d4d5d60002"},
]  # fmt: skip
SUMMARY = {
    "drillId": DRILL_ID,
    "arrayId": "demo",
    "backupId": SET_ID,
    "trigger": "api",
    "state": "running",
    "stage": "restoring",
    "startedAt": "2026-11-29T20:30:00Z",
    "endedAt": None,
    "setCreatedAt": "2026-11-29T19:00:00Z",
    "rpoSeconds": 5400.0,
    "rtoSeconds": None,
    "message": None,
    "cleanedUp": None,
    "leftovers": [],
    "instanceId": None,
}
RUNNING = {
    **SUMMARY,
    "volumes": VOLUMES,
    "checks": None,
    "by": {"kind": "iam", "arn": "arn:aws:iam::1:user/op"},
}
CHECKED = {
    "status": "passed",
    "volumes": [
        {"volumeId": "vol-0d1d2d3d4d5d60001", "device": "/dev/nvme1n1", "found": "filesystem",
         "filesystems": [{"device": "/dev/nvme1n1", "type": "xfs", "mount": "ok", "check": "ok",
                          "detail": None, "mountpoint": "/drill/vol-0d1d2d3d4d5d60001", "seconds": 2.5}]},
        {"volumeId": "vol-0d1d2d3d4d5d60002", "device": "/dev/nvme2n1", "found": "filesystem",
         "filesystems": [{"device": "/dev/nvme2n1", "type": "ext4", "mount": "ok", "check": "ok",
                          "detail": None, "mountpoint": "/drill/vol-0d1d2d3d4d5d60002", "seconds": 1.25}]},
    ],
    "command": {"given": "test -s /drill/*/db/CURRENT", "exitCode": 0, "timedOut": False, "seconds": 0.4,
                "output": ""},
    "seconds": 4.2,
    "problems": [],
}  # fmt: skip
PASSED = {
    **RUNNING,
    "state": "passed",
    "stage": "done",
    "endedAt": "2026-11-29T20:36:00Z",
    "rtoSeconds": 302.0,
    "cleanedUp": True,
    "instanceId": "i-0d1d2d3d4d5d60001",
    "checks": CHECKED,
}
XFS_ERROR = "Superblock has unknown read-only compatible features"
FAILED_CHECKS = {
    **CHECKED,
    "status": "failed",
    "volumes": [
        CHECKED["volumes"][0],
        {**CHECKED["volumes"][1],
         "filesystems": [{**CHECKED["volumes"][1]["filesystems"][0], "type": "xfs", "mount": "failed",
                          "check": "failed", "detail": XFS_ERROR, "mountpoint": None}]},
    ],
    "command": {"given": "test -s /drill/*/db/CURRENT", "exitCode": 1, "timedOut": False, "seconds": 0.1,
                "output": "no such file: /drill/vol-0d1d2d3d4d5d60002/db/CURRENT\n"},
    "problems": ["/dev/nvme2n1 (vol-0d1d2d3d4d5d60002): xfs does not mount: " + XFS_ERROR],
}  # fmt: skip
FAILED = {
    **PASSED,
    "state": "failed",
    "rtoSeconds": None,
    "message": "1 filesystem failed its check: restore the previous set, or repair with xfs_repair",
    "cleanedUp": False,
    "leftovers": ["vol-0d1d2d3d4d5d60002", "i-0d1d2d3d4d5d60001"],
    "checks": FAILED_CHECKS,
}


@pytest.fixture
def fast_polls(monkeypatch):
    monkeypatch.setattr(drills, "POLL_SECONDS", 0.01)


def test_drill_posts_an_empty_body_signed_with_a_key_and_says_what_started(run, api):
    api.answer("POST", PATH, 202, RUNNING)

    result = run("backup", "drill", "demo")

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert_signed(request)
    assert json.loads(request.body) == {}  # the API picks the newest completed set
    assert request.headers["idempotency-key"].startswith("vsactl-")
    assert f"drill {DRILL_ID} started on demo: set {SET_ID} (RPO 1h30m)" in result.output
    assert f"vsactl backup drill-show demo {DRILL_ID}" in result.output


def test_drill_set_names_the_set_and_the_key_is_passed_on(run, api):
    api.answer("POST", PATH, 202, RUNNING)

    result = run("backup", "drill", "demo", "--set", SET_ID, "--idempotency-key", "weekly-48", "-o", "json")

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert json.loads(request.body) == {"backupId": SET_ID}
    assert request.headers["idempotency-key"] == "weekly-48"
    assert json.loads(result.stdout) == RUNNING


def test_drill_refused_shows_the_apis_message(run, api):
    api.answer("POST", PATH, 409, {"message": "a drill of demo is running: drill-x; wait for it"})

    result = run("backup", "drill", "demo")

    assert result.exit_code == ExitCode.REFUSED
    assert "HTTP 409" in result.output
    assert "a drill of demo is running" in result.output


def test_drill_wait_follows_the_stages_until_passed_and_shows_the_drill(run, api, fast_polls):
    api.answer("POST", PATH, 202, RUNNING)
    api.answer_in_turn(
        "GET",
        f"{PATH}/{DRILL_ID}",
        (200, {**RUNNING, "stage": "attaching"}),
        (200, {**RUNNING, "stage": "checking"}),
        (200, PASSED),
    )

    result = run("backup", "drill", "demo", "--wait")

    assert result.exit_code == 0, result.output
    assert [r.method for r in api.requests] == ["POST", "GET", "GET", "GET"]
    for stage in ("running (attaching)", "running (checking)", "passed"):
        assert f"{DRILL_ID}: {stage}" in result.stderr
    for text in ("5m02s", "1h30m", "/drill/vol-0d1d2d3d4d5d60001", "exit code 0", "checks: passed"):
        assert text in result.stdout, text
    assert "cleaned up: every drill volume and the instance are gone" in result.stdout


def test_drill_wait_exits_1_with_the_message_when_the_drill_failed(run, api, fast_polls):
    api.answer("POST", PATH, 202, RUNNING)
    api.answer("GET", f"{PATH}/{DRILL_ID}", 200, FAILED)

    result = run("backup", "drill", "demo", "--wait", "-o", "json")

    assert result.exit_code == ExitCode.FAILED
    assert json.loads(result.stdout)["state"] == "failed"  # stdout stays the answer
    assert f"drill {DRILL_ID} failed: 1 filesystem failed its check" in result.stderr


def test_drill_wait_gives_up_at_its_timeout_and_says_the_drill_goes_on(run, api, fast_polls):
    api.answer("POST", PATH, 202, RUNNING)
    api.answer("GET", f"{PATH}/{DRILL_ID}", 200, {**RUNNING, "stage": "launching"})

    result = run("backup", "drill", "demo", "--wait", "--timeout", "0")

    assert result.exit_code == ExitCode.TIMED_OUT
    said = " ".join(result.stderr.split())
    assert f"drill {DRILL_ID} still running (launching) after 0 s" in said
    assert f"the drill goes on: look at it with vsactl backup drill-show demo {DRILL_ID}" in said


def test_drill_wait_that_cannot_read_the_drill_shows_the_error_and_says_the_drill_goes_on(
    run, api, fast_polls
):
    api.answer("POST", PATH, 202, RUNNING)
    api.answer("GET", f"{PATH}/{DRILL_ID}", 500, {"message": "Internal server error"})

    result = run("backup", "drill", "demo", "--wait")

    assert result.exit_code == ExitCode.FAILED
    assert "HTTP 500" in result.stderr
    assert f"the drill goes on: look at it with vsactl backup drill-show demo {DRILL_ID}" in result.stderr


LIST = {
    "arrayId": "demo",
    "drills": [
        {**SUMMARY, "drillId": "drill-20261129t203000z-ab12cd", "stage": "checking"},
        {**{k: v for k, v in FAILED.items() if k not in ("volumes", "checks", "by")},
         "drillId": "drill-20261128t203000z-cd34ef", "startedAt": "2026-11-28T20:30:00Z"},
        {**{k: v for k, v in PASSED.items() if k not in ("volumes", "checks", "by")},
         "drillId": "drill-20261127t203000z-ef56ab", "startedAt": "2026-11-27T20:30:00Z",
         "rpoSeconds": 37.0, "rtoSeconds": 3720.0, "trigger": "schedule"},
    ],
}  # fmt: skip


def rows(output: str) -> list[str]:
    """The table's lines that carry a drill, in order."""
    return [line for line in output.splitlines() if "drill-2026" in line]


def test_drills_lists_running_failed_and_passed_newest_first_with_human_durations(run, api):
    api.answer("GET", PATH, 200, LIST)

    result = run("backup", "drills", "demo")

    assert result.exit_code == 0, result.output
    assert_signed(api.only_request())
    running, failed, passed = rows(result.stdout)
    assert "drill-20261129t203000z-ab12cd" in running
    assert "running" in running
    assert "1h30m" in running
    assert "2026-11-29 20:30:00Z" in running
    assert "drill-20261128t203000z-cd34ef" in failed
    assert "failed" in failed
    assert "1 filesystem" in failed  # the message, wrapped in its column
    assert "drill-20261127t203000z-ef56ab" in passed
    assert "passed" in passed
    assert "37s" in passed
    assert "1h02m" in passed
    assert SET_ID in passed  # ids whole, to copy
    assert "i-0d1d2d3d4d5d60001" not in result.stdout


def test_drills_wide_adds_the_instance_and_whether_it_was_cleaned_up(run, api):
    api.answer("GET", PATH, 200, LIST)

    result = run("backup", "drills", "demo", "-o", "wide")

    assert result.exit_code == 0, result.output
    assert "cleaned up" in " ".join(result.stdout.split())
    _running, failed, passed = rows(result.stdout)
    assert "i-0d1d2d3d4d5d60001" in failed
    assert failed.rstrip().rstrip("│ ").endswith("no")
    assert passed.rstrip().rstrip("│ ").endswith("yes")


def test_drills_json_is_the_apis_answer(run, api):
    api.answer("GET", PATH, 200, LIST)

    result = run("backup", "drills", "demo", "-o", "json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == LIST


def test_drills_without_any_says_how_to_start_one(run, api):
    api.answer("GET", PATH, 200, {"arrayId": "demo", "drills": []})

    result = run("backup", "drills", "demo")

    assert result.exit_code == 0, result.output
    assert "no restore drills (start one with: vsactl backup drill demo)" in result.output


def test_drill_show_gives_the_failed_check_the_command_the_problems_and_the_leftovers(run, api):
    api.answer("GET", f"{PATH}/{DRILL_ID}", 200, FAILED)

    result = run("backup", "drill-show", "demo", DRILL_ID)

    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    for text in (
        f"drill {DRILL_ID}",
        SET_ID,
        "arn:aws:iam::1:user/op",
        "/dev/nvme2n1",
        f"failed │ failed │ - │ 1.2s │ {XFS_ERROR}",
        "checks: failed in 4.2s",
        "command: test -s /drill/*/db/CURRENT: exit code 1 after 0.1s",
        "| no such file: /drill/vol-0d1d2d3d4d5d60002/db/CURRENT",
        "problems: - /dev/nvme2n1 (vol-0d1d2d3d4d5d60002): xfs does not mount",
        "NOT CLEANED UP: left behind: vol-0d1d2d3d4d5d60002, i-0d1d2d3d4d5d60001",
        f"each carries the tag vsa:drill={DRILL_ID}",
        f"aws ec2 describe-volumes --filters Name=tag:vsa:drill,Values={DRILL_ID}",
    ):
        assert text in said, text


def test_drill_show_of_an_unknown_drill_exits_4_with_the_apis_message(run, api):
    api.answer("GET", f"{PATH}/drill-nope", 404, {"message": "no drill drill-nope of array demo"})

    result = run("backup", "drill-show", "demo", "drill-nope")

    assert result.exit_code == ExitCode.NOT_FOUND
    assert "no drill drill-nope of array demo" in result.output


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0.4, "0.4s"), (9.96, "10s"), (37.0, "37s"), (59.6, "1m00s"), (245, "4m05s"),
     (3720.0, "1h02m"), (273600, "3d04h")],
)  # fmt: skip
def test_durations_read_as_people_say_them(seconds, shown):
    assert drills.duration(seconds) == shown
