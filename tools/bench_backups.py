"""The freeze window of application-consistent backups, as the hosts measured it.

    make bench-backups PORT=4610            (the local cloud running, the stack deployed, root)
    python tools/bench_backups.py [--runs 20] [--volumes 16 64] [--hosts 4] [--designs signals atonce ...]

For each volume count: an array of that many io2 volumes and ``--hosts`` hosts, each with one
real XFS filesystem on a loop device as its mountpoint, and a serving controller that the
array's group launched and BootstrapController brought into service (as in the integration
tests, ``tests/integration/backups_world.py``). Then ``--runs`` application-consistent backups one after
the other through the API and the deployed ConsistentBackup workflow (freeze-io and thaw-io run
for real by the local cloud's Run Command), and from each set's record:

* **host window**: each host's freeze-io ``freezeStartedAt`` → thaw-io ``thawedAt`` (the host's
  own clock): how long its writes were paused;
* **array window**: the first host's freeze started → the last host thawed;
* **CreateSnapshots**: how long the one call took (the Lambda's clock);
* **thawed by**: how many host windows ended on the set's thaw marker (``signal``) and how many
  by the thaw-io command.

Each design runs on the same stack, one after the other: ``signals`` (the deployed one: every
host freezes at one instant a lead after the sends, reports its freeze to S3 and thaws on the
set's thaw marker; the Snapshot step looks again at once), ``atonce`` (the same without the
common instant: each host freezes as its command arrives; ``VSA_FREEZE_LEAD_MILLISECONDS=0``) and
``runcommand`` (the design before the signals, which a deployment without a signals bucket runs:
a look at Run Command's status each second, thaw-io as the thaw; no instant either). For the
last two the backup steps' function runs with its environment changed for the length of their
runs, and gets it back after, whatever happens.

Percentiles are nearest-rank over all samples. Figures, not a test: nothing is asserted. The
EBS per-volume rate (one snapshot every 15 s) paces the runs; snapshots complete after 1 s
(``/_localcloud/ebs/configure``) so the runs are not waiting on EBS copying data.
"""

import argparse
import json
import math
import os
import shutil
import signal
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core")]

import boto3  # noqa: E402

# the integration conftest first: it imports the worlds below (which import it back)
from tests.integration.conftest import STACK, Api  # noqa: E402

INTEGRATION_API = Api

from tests.documents.xfs_lab import Lab, _missing  # noqa: E402
from tests.integration.arrays_world import World, control  # noqa: E402
from tests.integration.backups_world import BackupArray, backup_spec, serving_controller  # noqa: E402
from tests.node_profile import ensure_node_profile  # noqa: E402
from vsa_core.waiters import execution_arn, execution_finished  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


DESIGNS = ("signals", "atonce", "runcommand")
# what each design changes in the backup steps' environment (None: removed)
CHANGES: dict[str, dict[str, str | None]] = {
    "signals": {},
    "atonce": {"VSA_FREEZE_LEAD_MILLISECONDS": "0"},
    "runcommand": {"VSA_SIGNALS_BUCKET": None, "VSA_FREEZE_LEAD_MILLISECONDS": "0"},
}


@contextmanager
def design(name: str) -> Iterator[None]:
    """The backup steps' function set up for the design ``name`` for the length of the block."""
    if not CHANGES[name]:
        yield
        return
    lam = boto3.client("lambda")
    function = boto3.client("cloudformation").describe_stack_resource(
        StackName=STACK, LogicalResourceId="TaskBackupFunction"
    )["StackResourceDetail"]["PhysicalResourceId"]
    variables = lam.get_function_configuration(FunctionName=function)["Environment"]["Variables"]
    changed = {k: v for k, v in (variables | CHANGES[name]).items() if v is not None}
    lam.update_function_configuration(FunctionName=function, Environment={"Variables": changed})
    lam.get_waiter("function_updated_v2").wait(FunctionName=function)
    try:
        yield
    finally:
        lam.update_function_configuration(FunctionName=function, Environment={"Variables": variables})
        lam.get_waiter("function_updated_v2").wait(FunctionName=function)


PARTS = ("spread", "lastFrozen", "toCall", "call", "toThaw")
"""Where the first host's window goes (one set): its freeze started → the last host's freeze
started (``spread``) → the last host frozen (``lastFrozen``) → CreateSnapshots called
(``toCall``) → returned (``call``) → the last host thawed (``toThaw``)."""


def breakdown(hosts: list[dict[str, Any]], timing: dict[str, float]) -> dict[str, float]:
    starts = [h["freezeStartedAt"] for h in hosts]
    frozen = max(h["frozeAt"] for h in hosts)
    return {
        "spread": max(starts) - min(starts),
        "lastFrozen": frozen - max(starts),
        "toCall": timing["requestedAt"] - frozen,
        "call": timing["returnedAt"] - timing["requestedAt"],
        "toThaw": max(h["thawedAt"] for h in hosts) - timing["returnedAt"],
    }


def run(
    api: Api, outputs: dict[str, str], world: World, lab: Lab, volumes: int, hosts: int, runs: int
) -> dict[str, Any]:
    array_id = f"bench-{uuid.uuid4().hex[:8]}"
    volume_ids = [world.volume() for _ in range(volumes)]
    host_mounts = {world.host(): [lab.xfs(f"v{volumes}h{h}").mountpoint] for h in range(hosts)}
    spec = backup_spec(array_id, volume_ids, host_mounts, "application", runs + 1, world.controller_profile())
    status, reply = api.call("PUT", f"/arrays/{array_id}", spec)
    if status != 201:
        raise SystemExit(f"PUT /arrays/{array_id}: {status} {reply}")
    serving_controller(outputs["RegistryTableName"], BackupArray(array_id, volume_ids, host_mounts), world)
    sfn = boto3.client("stepfunctions")
    host_windows: list[float] = []
    array_windows: list[float] = []
    calls: list[float] = []
    labels: dict[str, int] = {}
    thawed_by: dict[str, int] = {}
    parts: list[dict[str, float]] = []
    made: list[str] = []
    try:
        for i in range(runs):
            status, answer = api.call("POST", f"/arrays/{array_id}/backups", {"mode": "application"})
            if status != 202:
                raise SystemExit(f"POST backup: {status} {answer}")
            made.append(answer["backupId"])
            arn = execution_arn(outputs["ConsistentBackupStateMachineArn"], answer["backupId"])
            execution_finished(sfn).wait(executionArn=arn, WaiterConfig={"Delay": 1, "MaxAttempts": 300})
            backup = api.call("GET", f"/arrays/{array_id}/backups/{answer['backupId']}")[1]
            labels[f"{backup['state']}/{backup['consistency']}"] = (
                labels.get(f"{backup['state']}/{backup['consistency']}", 0) + 1
            )
            windows = [h["windowSeconds"] for h in backup["hosts"] if h.get("windowSeconds") is not None]
            for h in backup["hosts"]:
                thawed_by[str(h.get("thawedBy"))] = thawed_by.get(str(h.get("thawedBy")), 0) + 1
            host_windows.extend(windows)
            if len(windows) == hosts:
                array_windows.append(
                    max(h["thawedAt"] for h in backup["hosts"])
                    - min(h["freezeStartedAt"] for h in backup["hosts"])
                )
            where = ""
            if backup.get("snapshotTiming"):
                timing = backup["snapshotTiming"]
                calls.append(timing["returnedAt"] - timing["requestedAt"])
                if len(windows) == hosts:
                    parts.append(breakdown(backup["hosts"], timing))
                    where = ", ".join(f"{k} {v:.3f}" for k, v in parts[-1].items())
            print(
                f"  {volumes} vol run {i + 1}/{runs}: {backup['state']} {backup['consistency']} "
                f"longest host window {max(windows, default=float('nan')):.3f} s ({where})",
                file=sys.stderr,
            )
    finally:
        for backup_id in made:
            api.call("DELETE", f"/arrays/{array_id}/backups/{backup_id}")
        api.call("DELETE", f"/arrays/{array_id}")

    def stats(values: list[float]) -> dict[str, float | int]:
        if not values:
            return {"n": 0}
        return {
            "n": len(values),
            "p50": percentile(values, 50),
            "p99": percentile(values, 99),
            "max": max(values),
        }

    return {
        "volumes": volumes,
        "hosts": hosts,
        "runs": runs,
        "labels": labels,
        "parts": {k: percentile([p[k] for p in parts], 50) for k in PARTS} if parts else {},
        "thawedBy": thawed_by,
        "hostWindowSeconds": stats(host_windows),
        "arrayWindowSeconds": stats(array_windows),
        "createSnapshotsSeconds": stats(calls),
    }


def report(results: list[dict[str, Any]], runs: int, hosts: int) -> None:
    """The table, each design's row per volume count, and the ratio of the designs' host windows."""
    print(f"\nfreeze window, {runs} application-consistent backups each, {hosts} hosts (seconds):")
    head = ("design", "volumes", "host p50", "host p99", "host max", "array p50", "array p99")
    print("".join(f"{h:>11}" for h in head) + "  CreateSnapshots p50  thawed by / labels")
    for r in results:
        h, a, c = r["hostWindowSeconds"], r["arrayWindowSeconds"], r["createSnapshotsSeconds"]
        cells = [h.get("p50"), h.get("p99"), h.get("max"), a.get("p50"), a.get("p99")]
        figures = "".join(f"{math.nan if v is None else v:>11.3f}" for v in cells)
        print(
            f"{r['design']:>11}{r['volumes']:>11}{figures}  {c.get('p50', math.nan):>19.3f}"
            f"  {r['thawedBy']} / {r['labels']}"
        )
    print("where the first host's window goes, the median set (seconds): " + ", ".join(PARTS))
    for r in results:
        print(
            f"{r['design']:>11}{r['volumes']:>11}"
            + "".join(f"{r['parts'].get(k, math.nan):>11.3f}" for k in PARTS)
        )
    for volumes in sorted({r["volumes"] for r in results}):
        by_design = {r["design"]: r["hostWindowSeconds"] for r in results if r["volumes"] == volumes}
        new = by_design.get("signals", {})
        for other in ("atonce", "runcommand"):
            old = by_design.get(other, {})
            if new.get("n") and old.get("n"):
                print(
                    f"signals / {other}, {volumes} volumes: host p50 {new['p50'] / old['p50']:.2f}x, "
                    f"host p99 {new['p99'] / old['p99']:.2f}x"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--volumes", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--designs", nargs="+", choices=DESIGNS, default=list(DESIGNS))
    args = parser.parse_args()
    # stopped with SIGTERM: still thaw, unmount and delete what was made (the finally blocks)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint.startswith("http://127.0.0.1"):
        print("runs against the local cloud: make bench-backups PORT=<port>", file=sys.stderr)
        return 2
    if (why := _missing()) is not None:
        print(f"the hosts' mountpoints are real XFS filesystems: {why}", file=sys.stderr)
        return 2
    try:
        stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    except Exception as error:  # noqa: BLE001 - say what to do instead of a traceback
        print(f"the stack is not deployed ({error}): make deploy-local PORT=<port>", file=sys.stderr)
        return 2
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    api = Api(endpoint, outputs["ApiId"])
    control(endpoint, "ebs", "configure", snapshot_seconds=1)
    results = []
    for name in args.designs:
        for volumes in args.volumes:
            # the controllers' instance profile: a controller reads its own keys with it
            world = World(endpoint, ensure_node_profile(boto3.client("iam"), outputs["NodeKeysPolicyArn"]))
            lab_root = Path(f"/tmp/vsa-bench-backups-{uuid.uuid4().hex[:6]}")  # noqa: S108
            lab_root.mkdir()
            lab = Lab(root=lab_root, state_dir=Path("/run/vsa-freeze"))
            try:
                with design(name):
                    figures = run(api, outputs, world, lab, volumes, args.hosts, args.runs)
                results.append({"design": name} | figures)
            finally:
                lab.cleanup()
                world.close()
                shutil.rmtree(lab_root, ignore_errors=True)
    control(endpoint, "ebs", "configure", reset=True)
    report(results, args.runs, args.hosts)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
