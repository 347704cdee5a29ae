"""Removing a volume a host has mounted: the rules (``vsa_core.arrays.removals``, pure) and the
hosts' reports read from SSM Run Command's history (``aws_removals``, botocore Stubber: the
exact requests matter, SSM's filters are the freshness bound)."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.stub import Stubber

from vsa_core.arrays import aws_removals, removals
from vsa_core.arrays.dataplane import Report
from vsa_core.arrays.removals import Removed
from vsa_core.nvme import subsystem_nqn

ARRAY = "demo"
GONE, KEPT = "vol-0123456789abcdef0", "vol-0fedcba9876543210"
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
FRESH = timedelta(minutes=15)
CMD = "0b9a4c7e-2f1d-4a3b-9c4d-5e6f7a8b9c0d"


def report(at: datetime, subsystems: list[dict[str, Any]]) -> Report:
    return Report(
        "report-paths",
        "c-1",
        at.isoformat(),
        "Success",
        {"document": "report-paths", "arrayId": ARRAY, "subsystems": subsystems},
    )


def subsystem(volume: str, mounts: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"nqn": subsystem_nqn(ARRAY, volume), "volume": volume, "paths": []}
    if mounts is not ...:
        entry["mounts"] = mounts
    return entry


def judge(reports: dict[str, Report | None]) -> tuple[list[removals.Mount], list[removals.Unknown]]:
    return removals.mounts_of_removed(ARRAY, [Removed(GONE, GONE)], reports, now=NOW, max_age=FRESH)


def test_removed_volumes_are_the_existing_ids_and_owned_names_left_out_of_the_spec() -> None:
    gone = removals.removed_volumes((GONE, KEPT), (KEPT,), ("data", "logs"), ("logs",), {"data": "vol-1"})
    assert gone == [Removed(GONE, GONE), Removed("vol-1", "data (vol-1)", owned=True)]
    # an owned volume never created is nothing to remove
    assert removals.removed_volumes((), (), ("data",), (), {}) == []


def test_a_volume_a_host_has_mounted_is_refused_naming_the_host_the_mountpoint_and_how_to_force() -> None:
    # Given host i-1 reports the removed volume mounted at /data, host i-2 reports nothing mounted
    data = {"device": "/dev/nvme0n1", "mountpoint": "/data", "fstype": "xfs"}
    other = {"device": "/dev/nvme1n1", "mountpoint": "/k"}
    reports = {
        "i-1": report(NOW, [subsystem(GONE, [data])]),
        "i-2": report(NOW, [subsystem(GONE, []), subsystem(KEPT, [other])]),
    }
    # When the removal is judged
    mounts, unknown = judge(reports)
    message = removals.refusal(mounts, unknown)
    # Then only host i-1's mount counts (a kept volume's mount is no reason), and the message
    # names the host, the mountpoint and how to force
    assert [(m.host, m.mountpoint, m.device) for m in mounts] == [("i-1", "/data", "/dev/nvme0n1")]
    assert unknown == []
    assert message is not None
    assert "host i-1 has volume vol-0123456789abcdef0 mounted at /data (/dev/nvme0n1)" in message
    assert "unmount it there first" in message
    assert "force=true" in message
    assert "--force" in message
    assert "Nothing was changed" in message


def test_a_host_that_cannot_tell_is_refused_too() -> None:
    reports = {
        "i-none": None,
        "i-old": report(NOW - timedelta(hours=1), [subsystem(GONE, [])]),
        "i-unreadable": report(NOW, [subsystem(GONE, None)]),
        "i-connect-path": report(NOW, [subsystem(GONE, ...)]),
    }
    mounts, unknown = judge(reports)
    assert mounts == []
    assert [u.host for u in unknown] == ["i-connect-path", "i-none", "i-old", "i-unreadable"]
    message = removals.refusal(mounts, unknown)
    assert message is not None
    assert "run the health check (report-paths) on it first" in message


def test_nothing_mounted_on_any_host_is_no_refusal() -> None:
    reports = {"i-1": report(NOW, [subsystem(GONE, [])]), "i-2": report(NOW, [])}
    mounts, unknown = judge(reports)
    assert removals.refusal(mounts, unknown) is None
    # and no removal is never a refusal, whatever the hosts report
    assert removals.mounts_of_removed(ARRAY, [], {"i-1": None}, now=NOW, max_age=FRESH) == ([], [])


def test_the_hosts_last_report_paths_of_the_last_hour_is_what_is_read() -> None:
    # Given SSM's history of host i-1: one report-paths run, its stdout a report with a mount
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    check = aws_removals.MountCheck(ssm=ssm, report_paths="vsa-report-paths", period=timedelta(minutes=5))
    srv = {"device": "/dev/nvme0n1p1", "mountpoint": "/srv", "fstype": "ext4"}
    body = report(NOW, [subsystem(GONE, [srv])]).body
    with Stubber(ssm) as stub:
        stub.add_response(
            "list_command_invocations",
            {
                "CommandInvocations": [
                    {"CommandId": CMD, "InstanceId": "i-1", "Status": "Success", "RequestedDateTime": NOW}
                ]
            },
            {
                "InstanceId": "i-1",
                "Filters": [
                    {"key": "DocumentName", "value": "vsa-report-paths"},
                    {"key": "InvokedAfter", "value": "2026-11-25T11:00:00Z"},
                ],
            },
        )
        stub.add_response(
            "get_command_invocation",
            {"StandardOutputContent": "listing\n" + json.dumps(body) + "\n"},
            {"CommandId": CMD, "InstanceId": "i-1"},
        )
        # When the apply's check reads it
        mounts, unknown = aws_removals.mounted(check, ARRAY, ["i-1"], [Removed(GONE, GONE)], now=NOW)
        stub.assert_no_pending_responses()
    # Then the mount is found, and a report within two health-check periods counts
    assert [(m.host, m.mountpoint) for m in mounts] == [("i-1", "/srv")]
    assert unknown == []
    assert check.max_age == FRESH


def test_no_removal_reads_no_report() -> None:
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    check = aws_removals.MountCheck(ssm=ssm, report_paths="vsa-report-paths", period=timedelta(minutes=5))
    with Stubber(ssm) as stub:
        assert aws_removals.mounted(check, ARRAY, ["i-1"], [], now=NOW) == ([], [])
        stub.assert_no_pending_responses()
