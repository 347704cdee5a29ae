"""Narrated run of the control plane on the local cloud (called by tools/demo.sh after deploy).

What a newcomer sees: the infrastructure an operator already has (an io2 Multi-Attach volume, a
client host), an array declared once with ``vsactl apply`` (validated, then made so: owned
volume, launch template, controller group with its lifecycle hooks, IOPS alarms, backup
schedule), a bad spec refused with its reason, the array's live state, then real IOPS demand
on its volumes tripping the high alarm, whose state-change event runs the ScaleArray workflow;
every controller the group launches brought into service by BootstrapController (volumes
attached, nvmet configured, a live path from every host) and one replaced through
DrainController without the host ever losing its last path; a volume added to the running
array's spec, converged by ReconcileArray onto every controller and the host; last, an application-consistent
backup of the whole array: the host's filesystem (real XFS on a loop device, when run as root)
frozen by freeze-io with its on-host watchdog armed, one multi-volume snapshot, thawed at once.

The array is left running with the host's filesystem mounted, so the commands printed at the end
(get, events, another application-consistent backup, a restore into a new array, the deletes)
work as shown; the same facts go to ``$VSA_STATE/<array>.json`` for tools and tests.
``tools/demo.py --clean [ID...]`` then unmounts and detaches what the demo made for the host.
"""

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import urllib3
import yaml
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.documents.xfs_lab import Fs, Lab, _missing, is_mountpoint  # noqa: E402 - the host's filesystem
from tests.node_profile import ensure_node_profile  # noqa: E402 - what an operator makes once

STACK = "vsa-control-plane"
AZ = "us-east-1a"
AMI = "ami-1e749f67"  # an image the local cloud (moto) knows
# How long the demo waits for controllers to settle, a handover or a scaling decision before it
# stops and says where to look: a stuck workflow, not a slow one (on a busy machine these take
# minutes on the local cloud, whose Lambdas share its cores with everything else)
SETTLE_SECONDS = 600
console = Console(highlight=False, width=110)
FREEZE_STATE = Path("/run/vsa-freeze")  # where freeze-io keeps its watchdogs' pid files on a host
VSACTL = ".venv/bin/vsactl"  # as printed for a newcomer: run from the checkout
# The figures of the story. A controller (r5b.2xlarge) sustains its EBS-optimized baseline,
# 21,667 IOPS (perControllerIops' default), 15,167 at the 0.7 target. With one owner controller
# per volume (fencing: reservations, the default) a volume moves at most its owner's IOPS and at
# most one controller per volume carries IO: four volumes, so four controllers can (86,668 IOPS
# at most: not volume-bound at 4). DEMAND needs 4 controllers: ceil(52,345 / 15,167) = 4.
EXISTING_GIB, EXISTING_IOPS = 500, 40_000  # io2: at most 1,000 IOPS per GiB, 256,000 a volume
OWNED = ("logs", "index", "journal")  # the volumes the control plane creates for the array
OWNED_GIB, OWNED_IOPS = 200, 24_000
DEMAND = 52_345


CURRENT_STEP = ["4.", "reading the deployed stack's outputs"]
"""The step under way, named in the last lines if the demo fails."""


def say(step: str, text: str) -> None:
    CURRENT_STEP[:] = [step, text]
    console.print(f"\n[bold cyan]==> {step}[/] {text}")


def note(text: str) -> None:
    console.print(f"    [dim]{text}[/]")


def control(area: str, action: str, **body: Any) -> dict[str, Any]:
    """The local cloud's control endpoint: stands in for what AWS does by itself (see docs/localcloud.md)."""
    reply = urllib3.PoolManager().request(
        "POST",
        f"{os.environ['AWS_ENDPOINT_URL']}/_localcloud/{area}/{action}",
        body=json.dumps(body, default=str).encode(),
    )
    if reply.status != 200:
        raise SystemExit(f"local cloud control {area}/{action} failed: {reply.data.decode()}")
    return dict(json.loads(reply.data))


def vsactl(*args: str, check: bool = True) -> int:
    console.print(f"    [bold]$ vsactl {' '.join(args)}[/]")
    wide = {**os.environ, "COLUMNS": "120"}  # not a terminal: Rich would wrap at 80
    done = subprocess.run([str(Path(sys.executable).parent / "vsactl"), *args], check=False, env=wide)  # noqa: S603
    if check and done.returncode != 0:
        raise SystemExit(f"vsactl {args[0]} failed (exit {done.returncode})")
    return done.returncode


def outputs() -> dict[str, str]:
    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


def existing_infrastructure(profile: str) -> tuple[str, str, str]:
    ec2 = boto3.client("ec2")
    volume = ec2.create_volume(
        AvailabilityZone=AZ,
        Size=EXISTING_GIB,
        VolumeType="io2",
        Iops=EXISTING_IOPS,
        MultiAttachEnabled=True,
        TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": "Name", "Value": "oltp-data"}]}],
    )["VolumeId"]
    gp3 = ec2.create_volume(AvailabilityZone=AZ, Size=100, VolumeType="gp3")["VolumeId"]
    host = ec2.run_instances(
        ImageId=AMI,
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.2xlarge",
        Placement={"AvailabilityZone": AZ},
        IamInstanceProfile={"Name": profile},
    )["Instances"][0]["InstanceId"]
    control("ssm", "register_node", InstanceId=host)
    return str(volume), str(gp3), str(host)


def write_spec(
    path: Path, array_id: str, volume: str, host: str, mountpoints: list[str], profile: str
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "specVersion": 1,
        "arrayId": array_id,
        "availabilityZone": AZ,
        "volumes": [
            {"volumeId": volume},
            *({"name": name, "sizeGiB": OWNED_GIB, "iops": OWNED_IOPS} for name in OWNED),
        ],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI, "instanceProfile": profile},
        "minControllers": 2,
        "maxControllers": 8,
        "hosts": [{"instanceId": host, "mountpoints": mountpoints}],
        # application mode needs a mountpoint on every host to freeze (the API refuses it otherwise)
        "backup": {
            "schedule": "cron(0 3 * * ? *)",
            "mode": "application" if mountpoints else "crash",
            "retention": 7,
        },
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


def controllers_settled(
    array_id: str, out: dict[str, str], timeout: float = SETTLE_SECONDS
) -> list[dict[str, Any]]:
    """Wait until the BootstrapController / DrainController workflows have let every launching
    controller in and every leaving one go; narrate each bootstrap. The serving controllers."""
    autoscaling, sfn = boto3.client("autoscaling"), boto3.client("stepfunctions")
    deadline = time.monotonic() + timeout
    while True:
        group = autoscaling.describe_auto_scaling_groups(
            AutoScalingGroupNames=[f"vsa-{array_id}-controllers"]
        )["AutoScalingGroups"][0]
        states = [i["LifecycleState"] for i in group["Instances"]]
        if states.count("InService") == len(states) == group["DesiredCapacity"]:
            break
        if time.monotonic() > deadline:
            raise SystemExit(
                f"controllers of {array_id} still {states} after {timeout:.0f} s: make localcloud-logs"
            )
        time.sleep(1)
    serving = []
    for execution in sfn.list_executions(stateMachineArn=out["BootstrapControllerStateMachineArn"])[
        "executions"
    ]:
        if execution["status"] != "SUCCEEDED":
            continue
        result = json.loads(
            sfn.describe_execution(executionArn=execution["executionArn"]).get("output") or "{}"
        )
        if result.get("arrayId") == array_id and result["instanceId"] in [
            i["InstanceId"] for i in group["Instances"]
        ]:
            took = (execution["stopDate"] - execution["startDate"]).total_seconds()
            serving.append({**result, "took": took})
    for c in sorted(serving, key=lambda c: c["slot"]):
        note(f"slot {c['slot']}: {c['instanceId']} at {c['address']} serving (bootstrap {c['took']:.1f} s)")
    return serving


def host_paths(host: str) -> dict[str, list[str]]:
    """The host's multipath view (``nvme list-subsys`` in its sandbox, the recording stand-in)."""
    root = control("ssm", "register_node", InstanceId=host)["Root"]
    listed = subprocess.run(  # noqa: S603
        [str(ROOT / "tests/fakes/nvme"), "list-subsys", "-o", "json"],
        cwd=root,
        env={**os.environ, "VSA_NODE_ROOT": root},
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        s["NQN"]: [p["Address"].split(",")[0].removeprefix("traddr=") + f" {p['State']}" for p in s["Paths"]]
        for h in json.loads(listed.stdout or "[]")
        for s in h.get("Subsystems", [])
    }


def show_paths(host: str) -> None:
    for nqn, paths in host_paths(host).items():
        note(f"host {host}: {nqn.rsplit(':', 1)[-1]} -> {len(paths)} path(s): {', '.join(paths)}")


def array_volumes(array_id: str, existing: str) -> list[str]:
    owned = boto3.client("ec2").describe_volumes(
        Filters=[
            {"Name": "tag:vsa:array", "Values": [array_id]},
            {"Name": "tag:vsa:owned", "Values": ["true"]},
        ]
    )["Volumes"]
    return [existing, *(v["VolumeId"] for v in owned)]


def publish_demand(volumes: list[str], iops: float, minutes: int = 4) -> None:
    """EBS publishing VolumeReadOps/VolumeWriteOps (per minute) for ``iops`` spread over the volumes."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    per_metric = iops * 60 / (2 * len(volumes))
    data = [
        {
            "MetricName": metric,
            "Dimensions": [{"Name": "VolumeId", "Value": volume}],
            "Timestamp": (now - timedelta(minutes=m) + timedelta(seconds=30)).isoformat(),
            "Value": per_metric,
            "Unit": "Count",
        }
        for m in range(minutes)
        for volume in volumes
        for metric in ("VolumeReadOps", "VolumeWriteOps")
    ]
    control("cloudwatch", "publish", Namespace="AWS/EBS", MetricData=data)


def wait_for_scale_execution(state_machine: str, array_id: str, known: set[str]) -> dict[str, Any]:
    """The first new ScaleArray run that decided. One that found the array's lock taken (a
    ReconcileArray run under way) is narrated and skipped: it re-armed the alarm, whose next
    evaluation (a minute on the local cloud, as on AWS) starts the run that decides."""
    sfn = boto3.client("stepfunctions")
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        for execution in sfn.list_executions(stateMachineArn=state_machine)["executions"]:
            new = execution["name"].startswith(f"scale-{array_id}-") and execution["name"] not in known
            if not new or execution["status"] == "RUNNING":
                continue
            described = dict(sfn.describe_execution(executionArn=execution["executionArn"]))
            answer = json.loads(described.get("output") or "{}")
            if answer.get("action") != "skipped":
                return described
            known.add(execution["name"])
            note(f"a ScaleArray run skipped: {answer.get('reason')}")
        time.sleep(0.5)
    raise SystemExit(f"no ScaleArray execution decided within {SETTLE_SECONDS} s: see `make localcloud-logs`")


def handovers_done(state_machine: str, array_id: str, timeout: float = SETTLE_SECONDS) -> None:
    """Wait until no ReconcileArray run of the array is under way: with fencing, each controller
    that enters service starts one, which hands it its share of the volumes."""
    sfn = boto3.client("stepfunctions")
    deadline = time.monotonic() + timeout
    while True:
        running = [
            e["name"]
            for e in sfn.list_executions(stateMachineArn=state_machine, statusFilter="RUNNING")["executions"]
            if e["name"].startswith(f"reconcile-{array_id}-")
        ]
        if not running:
            return
        if time.monotonic() > deadline:
            raise SystemExit(
                f"ReconcileArray still running after {timeout:.0f} s: {running}: make localcloud-logs"
            )
        time.sleep(1)


def high_threshold(alarm: str) -> float:
    """The high alarm's threshold as ScaleArray left it (n x perControllerIops x target)."""
    found = boto3.client("cloudwatch").describe_alarms(AlarmNames=[alarm])["MetricAlarms"]
    return float(found[0]["Threshold"])


def vsactl_json(*args: str) -> Any:
    """What ``vsactl ARGS -o json`` answers (the API's reply)."""
    vsactl_bin = str(Path(sys.executable).parent / "vsactl")
    shown = subprocess.run(  # noqa: S603
        [vsactl_bin, *args, "-o", "json"], capture_output=True, text=True, check=True
    )
    return json.loads(shown.stdout)


def capacity(array_id: str) -> dict[str, Any]:
    """status.capacity of the array, as ``vsactl get -o json`` shows it."""
    return dict(vsactl_json("get", array_id)["status"]["capacity"])


def scale_executions(state_machine: str, array_id: str) -> set[str]:
    executions = boto3.client("stepfunctions").list_executions(stateMachineArn=state_machine)["executions"]
    return {e["name"] for e in executions if e["name"].startswith(f"scale-{array_id}-")}


@dataclass
class Demo:
    """What the steps share: the stack's outputs, the array and what an operator already had."""

    out: dict[str, str]
    array_id: str
    spec_file: Path
    volume: str
    gp3: str
    host: str
    mountpoints: list[str]
    profile: str

    @property
    def backup_mode(self) -> str:
        return "application" if self.mountpoints else "crash"


@dataclass
class Command:
    """One line of the "try next" block: ``name`` says which (for tools); ``heading``, when
    given, is printed above it as a shell comment, so the whole block pastes as is."""

    name: str
    argv: list[str]
    heading: str = ""

    @property
    def line(self) -> str:
        return shlex.join(self.argv)


def state_dir() -> Path:
    return Path(os.environ.get("VSA_STATE", ROOT / ".localcloud")).resolve()


def facts_file(array_id: str) -> Path:
    return state_dir() / f"{array_id}.json"


def record(array_id: str, **facts: Any) -> None:
    """Add ``facts`` to the array's JSON facts file (written whole each time)."""
    path = facts_file(array_id)
    known = json.loads(path.read_text()) if path.exists() else {"arrayId": array_id}
    path.write_text(json.dumps({**known, **facts}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--skip-day2",
        action="store_true",
        help="skip steps 8-12 (scale-out by alarm, a volume added, a controller replaced, keys rotated; "
        "about two minutes): the array is left as usable and the same commands are printed",
    )
    parser.add_argument(
        "--clean",
        nargs="*",
        metavar="ID",
        help="release the host filesystem the demo of array ID made (unmount, detach its loop device), "
        "every demo's recorded in $VSA_STATE without ID; safe to run again",
    )
    args = parser.parse_args(argv)
    if args.clean is not None:
        release_all(args.clean)
    else:
        demo(skip_day2=args.skip_day2)


def demo(skip_day2: bool) -> None:
    out = outputs()
    array_id = f"demo-{time.strftime('%H%M%S')}"
    state_dir().mkdir(parents=True, exist_ok=True)
    spec_file = state_dir() / f"{array_id}.yaml"
    record(array_id, specFile=str(spec_file), finished=False)

    say("4.", "what an operator already has: an io2 Multi-Attach volume and a client host")
    profile = ensure_node_profile(boto3.client("iam"), out["NodeKeysPolicyArn"])
    volume, gp3, host = existing_infrastructure(profile)
    record(array_id, operator={"volumeId": volume, "gp3VolumeId": gp3, "hostInstanceId": host})
    note(f"volume {volume} (io2, {EXISTING_GIB} GiB, {EXISTING_IOPS:,} IOPS, Multi-Attach) in {AZ};")
    note(f"host {host}")
    note("the host runs the SSM agent (here: registered as a local managed node with its own sandbox)")
    note(f"the host and the controllers get instance profile {profile}: its role has the stack's")
    note("NodeKeysPolicy, so each node reads its own DH-HMAC-CHAP keys from Secrets Manager, no other's")
    lab = host_filesystem(array_id)
    mountpoints = [str(fs.mountpoint) for fs in lab.filesystems] if lab else []
    d = Demo(out, array_id, spec_file, volume, gp3, host, mountpoints, profile)
    try:
        backup_id = run(d, skip_day2)
    except BaseException:
        # the array is not what the end promises: its host's filesystem goes with the failure
        if lab is not None:
            lab.cleanup()
        raise
    commands = try_next(d, backup_id)
    record(
        array_id,
        backupId=backup_id,
        restoredArrayId=f"{array_id}-restored",
        env=newcomer_env(),
        commands=[{"name": c.name, "run": c.line} for c in commands],
        finished=True,
    )
    show_try_next(d, commands)


def host_filesystem(array_id: str) -> Lab | None:
    """The host's application data: a real XFS filesystem on a loop device when this machine
    can make one (root), recorded in the facts file so that ``--clean`` finds it later."""
    if (why_not := _missing()) is not None:
        note(f"no filesystem to freeze on this machine ({why_not}): the backup below is crash-consistent")
        return None
    lab = Lab(root=state_dir() / f"{array_id}-host", state_dir=FREEZE_STATE)
    try:
        data = lab.xfs("data")
        (data.mountpoint / "orders.db").write_bytes(os.urandom(1 << 20))
    except BaseException:
        lab.cleanup()
        raise
    finally:  # recorded as soon as the loop device exists, even if mkfs or mount failed after
        record(
            array_id,
            host={
                "root": str(lab.root),
                "filesystems": [
                    {"image": str(fs.image), "device": fs.device, "mountpoint": str(fs.mountpoint)}
                    for fs in lab.filesystems
                ],
            },
        )
    note(f"the host's application writes to {data.mountpoint}: a real XFS filesystem (a loop device here)")
    return lab


def run(d: Demo, skip_day2: bool) -> str:
    """Steps 5 to 16; the id of the backup set step 13 made."""
    spec = declare(d)
    controllers_settled(d.array_id, d.out)
    handovers_done(d.out["ReconcileArrayStateMachineArn"], d.array_id)
    show_paths(d.host)
    vsactl("get", d.array_id)
    cap = show_capacity(d.array_id)
    if skip_day2:
        say("8.-12.", "skipped (--skip-day2): a scale-out by alarm, a volume added, a controller replaced,")
        note(f"keys rotated; the array keeps minControllers=2 controllers and its {1 + len(OWNED)} volumes")
    else:
        day_two(d, spec, cap)
    backup_id = back_up(d)
    look_around(d)
    return backup_id


def declare(d: Demo) -> dict[str, Any]:
    """Steps 5 to 7: the array declared, a bad spec refused; the spec applied."""
    say("5.", f"declare array [bold]{d.array_id}[/] once: {d.spec_file.name}")
    spec = write_spec(d.spec_file, d.array_id, d.volume, d.host, d.mountpoints, d.profile)
    console.print("    " + d.spec_file.read_text().replace("\n", "\n    ").rstrip())
    note("vsactl signs the request with SigV4 (IAM auth); the API validates everything against AWS")
    note("first (volumes, host, launch settings), stores the spec, then creates what it declares; the owned")
    note(f"volumes ({', '.join(OWNED)}) are created by the ReconcileArray run it starts, so the API answers")
    note("202 at once. No fencing in the spec: the default, one owner controller per volume, fenced by")
    note("NVMe reservations when it is lost, before another serves the volume (README: a lost controller):")
    vsactl("apply", "-f", str(d.spec_file))

    say("6.", "a spec that cannot work is refused with its reason, and nothing is created")
    bad_file = d.spec_file.with_name(f"{d.array_id}-bad.yaml")
    bad = {**spec, "arrayId": f"{d.array_id}-bad", "volumes": [{"volumeId": d.gp3}]}
    bad_file.write_text(yaml.safe_dump(bad, sort_keys=False))
    vsactl("apply", "-f", str(bad_file), check=False)

    say("7.", "the group launched minControllers=2 controllers; BootstrapController brings each into service")
    note("per controller: lease a slot (its NVMe controller-id range), attach every volume (Multi-Attach),")
    note("wait for its SSM agent, run configure-target (nvmet over configfs), run connect-path on every")
    note("host and check the new path is live, then CompleteLifecycleAction CONTINUE; with fencing, it first")
    note("registers the controller's reservation key (one per boot) on every volume, and once it serves, a")
    note("ReconcileArray run hands it its share of the volumes (ANA: optimized on the owner, inaccessible on")
    note("the others, so the host queues a lost owner's IO until a survivor has fenced it and serves it)")
    return spec


def show_capacity(array_id: str) -> dict[str, Any]:
    cap = capacity(array_id)
    per = cap["perControllerIops"]
    n, bound = cap["controllers"], str(cap["volumeBound"]).lower()
    note(f"status.capacity: {n} controllers x {per:,} IOPS each (r5b.2xlarge's EBS baseline);")
    note(
        f"the volumes provide {cap['volumeIops']:,} IOPS in total, usable by up to "
        f"{cap['volumeControllers']} controllers:"
    )
    note(f"volume-bound {bound}, deliverable now {cap['deliverableIops']:,.0f} IOPS")
    return cap


def day_two(d: Demo, spec: dict[str, Any], cap: dict[str, Any]) -> None:
    """Steps 8 to 12: a scale-out by alarm, a volume added, a controller replaced, keys rotated."""
    serving = scale_out(d, cap)
    grow(d, spec)
    replace(d, serving)

    say("12.", "rotate the array's DH-HMAC-CHAP keys, with no IO stop: controller by controller")
    note("the API stores new keys beside the current ones and starts ReconcileArray; its rekey phase")
    note("writes them into one controller's nvmet (live connections stay up), then has every host's path")
    note("to it re-authenticate with them, then the next controller; at the end they become the array's")
    note("and no secret keeps an old key (each node reads only its own copy, with its own instance role):")
    vsactl("rotate-keys", d.array_id, "--wait", "--timeout", "600")
    show_paths(d.host)


def scale_out(d: Demo, cap: dict[str, Any]) -> list[dict[str, Any]]:
    """Steps 8 and 9: demand trips the high alarm, ScaleArray scales out (from ``cap``, the
    array's capacity before); the serving controllers after."""
    array_id, out = d.array_id, d.out
    per = cap["perControllerIops"]
    say("8.", f"the hosts push {DEMAND:,} IOPS: EBS metrics trip the array's high IOPS alarm")
    volumes = array_volumes(array_id, d.volume)
    known = scale_executions(out["ScaleArrayStateMachineArn"], array_id)
    high = f"vsa-{array_id}-iops-high"
    before = high_threshold(high)
    publish_demand(volumes, DEMAND)
    states = control("cloudwatch", "evaluate", AlarmName=high)["States"]
    note(f"{high}: sum over {len(volumes)} volumes of (VolumeReadOps + VolumeWriteOps) / period")
    note(
        f"-> {states[high]} (threshold = {cap['controllers']} controllers x {per:,} IOPS x 0.7 target "
        f"= {before:,.0f} IOPS)"
    )
    started = time.monotonic()
    execution = wait_for_scale_execution(out["ScaleArrayStateMachineArn"], array_id, known)
    decision = json.loads(execution["output"])
    console.print(
        "    alarm state change -> EventBridge -> on_iops_alarm -> ScaleArray "
        f"[bold]{execution['status']}[/] in {time.monotonic() - started:.1f} s"
    )
    console.print(
        f"    decision: {decision['action']} {decision['current_controllers']} -> "
        f"{decision['desired_controllers']} ({decision['reason']})"
    )
    after, count = high_threshold(high), decision["desired_controllers"]
    note("ScaleArray took the array's scaling lock, set the group's desired capacity, moved the alarm")
    note(
        f"thresholds to the new count (high: {count} x {after / count:,.0f} = {after:,.0f} IOPS), "
        "recorded the decision, unlocked"
    )
    note("the group launched the new controllers; each is bootstrapped the same way:")
    serving = controllers_settled(array_id, out)
    show_paths(d.host)

    say("9.", "the same demand under the new threshold: the alarm returns to OK, nothing more to do")
    states = control("cloudwatch", "evaluate", AlarmName=high)["States"]
    time.sleep(2)  # narration: a ScaleArray run this would start shows up within a second or two
    count = len(scale_executions(out["ScaleArrayStateMachineArn"], array_id) - known)
    note(
        f"{high} -> {states[high]}; the trigger reacts to ALARM only. ScaleArray runs in this surge: {count}"
    )
    return serving


def grow(d: Demo, spec: dict[str, Any]) -> None:
    """Step 10: one more volume in the running array's spec, converged by ReconcileArray."""
    say("10.", "a spec change on the running array: one more volume, on the host through every controller")
    grown = {**spec, "volumes": [*spec["volumes"], {"name": "scratch", "sizeGiB": 100, "iops": 8000}]}
    d.spec_file.write_text(yaml.safe_dump(grown, sort_keys=False))
    note("first ask what the apply would change, without changing anything (the API's dry run):")
    vsactl("apply", "-f", str(d.spec_file), "--dry-run")
    note("then apply it: the PUT stores the spec and starts ReconcileArray (202), whose first step")
    note("creates the volume; it then takes the array's lock and runs its phases: settle (the volume")
    note("is available), attach it to every serving controller,")
    note("export it (configure-target adds one subsystem; the others are not touched), connect the host")
    note("through every controller, then verify what the nodes report. Paths in use never blink:")
    vsactl("apply", "-f", str(d.spec_file), "--wait", "--timeout", "600")
    show_paths(d.host)


def replace(d: Demo, serving: list[dict[str, Any]]) -> None:
    """Step 11: the controller in slot 0 drained by DrainController, a new one bootstrapped."""
    say("11.", "replace the controller in slot 0, as for an AMI update: drain first, then a new one joins")
    first = min(serving, key=lambda c: c["slot"])
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=first["instanceId"], ShouldDecrementDesiredCapacity=False
    )
    note(f"terminate {first['instanceId']} in its group: the drain hook holds it (Terminating:Wait);")
    note("DrainController marks it draining, hands the volumes it owns over to the others (it releases")
    note("each before a taker serves it), runs disconnect-path on every host (the host stops using that")
    note("path while the others carry the IO), then tears its nvmet down, detaches, releases the slot,")
    note("CONTINUE. The group launches a replacement at once; BootstrapController brings it in (free slot):")
    time.sleep(3)  # narration: the host's paths a moment into the drain
    show_paths(d.host)
    controllers_settled(d.array_id, d.out)
    show_paths(d.host)


def back_up(d: Demo) -> str:
    """Step 13: a backup of the whole array (application-consistent with a filesystem); its id."""
    mode = d.backup_mode
    say("13.", f"an {mode}-consistent backup of the whole array: one point in time across every volume")
    if d.mountpoints:
        note("ConsistentBackup: preflight (a serving controller, the host online, freeze-io dry run on every")
        note("host), freeze-io on every host at once (each arms an on-host watchdog that thaws by itself")
        note("after 10 s whatever happens to SSM or the workflow), one CreateSnapshots on a serving")
        note("controller covering exactly the array's volumes, thaw-io at once, then follow the snapshots:")
    else:
        note("ConsistentBackup: preflight, one CreateSnapshots on a serving controller covering exactly")
        note("the array's volumes (not its boot volume), then follow the snapshots:")
    vsactl("backup", "create", d.array_id, "--mode", mode, "--label", "demo", "--wait", "--timeout", "600")
    note("the label is honest: application-consistent only if every host froze and thawed within the")
    note("window; otherwise crash-consistent with the reason. Retention keeps the policy's 7 sets.")
    backups = vsactl_json("backup", "list", d.array_id)["backups"]  # newest first
    return str(next(b["backupId"] for b in backups if b.get("label") == "demo"))


def look_around(d: Demo) -> None:
    """Steps 14 to 16: the live state, the story so far, the health check."""
    say("14.", "the array's live state, with the decisions, the controllers' slots and the last backups")
    vsactl("get", d.array_id)
    vsactl("list")

    say("15.", "the array's story so far, oldest first: each decision, bootstrap, drain, reconcile, backup")
    note("from the registry and the workflows' runs; a failure would show its error and cause on its line")
    vsactl("events", d.array_id)

    say("16.", "the health check: what every host sees, every few minutes (here invoked, twice)")
    note("on its schedule it reads each host's newest report, counts each host's live paths against the")
    note("serving controllers, replaces a controller no host reaches (two runs in a row), starts")
    note("ReconcileArray for a data plane that drifted from the spec, flags an overdue backup, sends the")
    note("read-only report-paths to every host for the next run, and feeds the dashboard and alarms:")
    for _ in range(2):  # the second run reads the report-paths the first one sent
        reply = boto3.client("lambda").invoke(
            FunctionName=d.out["TaskHealthCheckFunctionName"],
            Payload=json.dumps({"arrayIds": [d.array_id]}).encode(),
        )
        answer = json.loads(reply["Payload"].read())
        if "FunctionError" in reply:
            raise SystemExit(f"the health check failed: {answer}")
        time.sleep(3)  # the hosts run the report-paths it sent before the next run reads them
    (seen,) = answer["arrays"]
    console.print(
        f"    serving controllers {seen['servingControllers']}, hosts reporting {seen['hostsReporting']}, "
        f"fewest live paths {seen['minLivePaths']}, "
        f"hosts short of paths {seen['hostsShortOfPaths'] or 'none'}, "
        f"dead controllers {seen['deadControllers'] or 'none'}, drift {seen['drift'] or 'none'}, "
        f"last backup {seen['backupAgeSeconds'] and round(seen['backupAgeSeconds'])} s ago"
        f"{', OVERDUE' if seen['backupOverdue'] else ''}"
    )
    note(f"the dashboard {d.out['OperationsDashboardName']} graphs these per array; a dead controller or a")
    note(
        "host short of paths raises <stack>-controller-replaced / -hosts-short-of-paths (docs/operations.md)"
    )


def newcomer_env() -> dict[str, str]:
    """What a new shell needs for the printed commands: the local cloud, throw-away credentials,
    and the state directory when it is not the default (``--clean`` reads its facts there)."""
    env = {
        "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    }
    if state_dir() != (ROOT / ".localcloud").resolve():
        env["VSA_STATE"] = str(state_dir())
    return env


def try_next(d: Demo, backup_id: str) -> list[Command]:
    """The commands a newcomer runs next on the array the demo left, in order."""
    a, restored = d.array_id, f"{d.array_id}-restored"
    frozen = "the host frozen, one snapshot set, thawed" if d.mountpoints else "no host filesystem here"
    commands = [
        Command(
            "get",
            [VSACTL, "get", a],
            "look around: the live state, the spec as vsactl apply -f takes it, what was done and by whom",
        ),
        Command("get-yaml", [VSACTL, "get", a, "-o", "yaml"]),
        Command("events", [VSACTL, "events", a]),
        Command(
            "backup-create",
            [VSACTL, "backup", "create", a, "--mode", d.backup_mode, "--wait"],
            f"another {d.backup_mode}-consistent backup ({frozen}), then the array's sets",
        ),
        Command("backup-list", [VSACTL, "backup", "list", a]),
        Command(
            "restore",
            [VSACTL, "restore", a, backup_id, "--new-array", restored, "--wait"],
            "the demo's backup set restored as a new array; then both arrays deleted",
        ),
        Command("delete-restored", [VSACTL, "delete", restored, "--yes", "--wait"]),
        Command("delete", [VSACTL, "delete", a, "--delete-volumes", "--yes", "--wait"]),
    ]
    if d.mountpoints:
        commands.append(
            Command(
                "clean",
                [".venv/bin/python", "tools/demo.py", "--clean", a],
                "last, release the host's filesystem: unmount it, detach its loop device",
            )
        )
    return commands


def show_try_next(d: Demo, commands: list[Command]) -> None:
    console.print(f"\n[bold green]done[/]: array {d.array_id} is declared and running on the local cloud.")
    if d.mountpoints:
        note(f"its host's filesystem stays mounted for the next backups: {d.mountpoints[0]}")
    console.print("\n[bold]try next[/], from this directory (in a new shell, the export line first):")
    lines = ["export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in newcomer_env().items())]
    for c in commands:
        lines += [f"# {c.heading}", c.line] if c.heading else [c.line]
    for line in lines:
        console.print(f"    {line}", markup=False, soft_wrap=True)
    shown = facts_file(d.array_id)
    with contextlib.suppress(ValueError):
        shown = shown.relative_to(ROOT)
    console.print(f"the same, as JSON: {shown}", markup=False, soft_wrap=True)
    console.print("make localcloud-logs   |   make localcloud-stop")


def release_all(array_ids: list[str]) -> None:
    """``--clean``: release the host filesystems of the demos of ``array_ids`` (every recorded
    demo when empty)."""
    if array_ids:
        paths = [facts_file(a) for a in array_ids]
    else:
        paths = sorted(p for p in state_dir().glob("demo-*.json") if "host" in json.loads(p.read_text()))
    for path in paths:
        if not path.exists():
            raise SystemExit(f"no demo recorded as {path}: nothing of it to release")
        release(json.loads(path.read_text()))


def attached_to(device: str) -> str | None:
    """The file the loop ``device`` is attached to, or None when it is free."""
    backing = Path("/sys/block", Path(device).name, "loop", "backing_file")
    try:
        return backing.read_text().strip()
    except OSError:
        return None


def release(facts: dict[str, Any]) -> None:
    """Unmount and detach what the demo of ``facts`` made for its host. Only a loop device still
    attached to the demo's own image is touched: after a release the kernel may hand the same
    device to someone else, so running this again leaves theirs alone."""
    host = facts.get("host")
    if not host:
        print(f"{facts['arrayId']}: the demo made no host filesystem")
        return
    recorded = [Fs(Path(f["image"]), f["device"], Path(f["mountpoint"])) for f in host["filesystems"]]
    ours = [fs for fs in recorded if attached_to(fs.device) == str(fs.image)]
    Lab(root=Path(host["root"]), state_dir=FREEZE_STATE, filesystems=ours).cleanup()
    still = [fs for fs in recorded if is_mountpoint(fs.mountpoint) or attached_to(fs.device) == str(fs.image)]
    if still:
        raise SystemExit(
            f"{facts['arrayId']}: still mounted or attached: {', '.join(fs.device for fs in still)}"
        )
    for fs in recorded:
        fs.image.unlink(missing_ok=True)  # an image left by a run stopped between detach and unlink
        for empty in (fs.mountpoint, fs.mountpoint.parent):
            with contextlib.suppress(OSError):
                empty.rmdir()
    with contextlib.suppress(OSError):
        Path(host["root"]).rmdir()
    done = ", ".join(f"{fs.mountpoint} ({fs.device})" for fs in ours)
    print(f"{facts['arrayId']}: " + (f"released {done}" if done else "nothing left to release"))


def run_main() -> None:
    """main(), and when it fails, the last lines say which step and why (the traceback above)."""
    try:
        main()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # re-raised below (as exit 1), after saying where it stopped
        if isinstance(error, SystemExit) and error.code in (0, None):
            raise
        step, text = CURRENT_STEP
        why = error.code if isinstance(error, SystemExit) else f"{type(error).__name__}: {error}"
        if not isinstance(error, SystemExit):
            console.print_exception(show_locals=False)
        port = os.environ.get("VSA_LOCALCLOUD_PORT", "4566")
        console.print(f"\n[bold red]make demo failed at step {step}[/] {text}", highlight=False)
        console.print(f"    why: {why}", markup=False, highlight=False)
        console.print(f"    the local cloud's log: {state_dir()}/run-{port}/localstack.log", highlight=False)
        raise SystemExit(1) from None


if __name__ == "__main__":
    run_main()
