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
"""

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import urllib3
import yaml
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.documents.xfs_lab import Lab, _missing  # noqa: E402 - the host's filesystem for the backup
from tests.node_profile import ensure_node_profile  # noqa: E402 - what an operator makes once

STACK = "vsa-control-plane"
AZ = "us-east-1a"
AMI = "ami-1e749f67"  # an image the local cloud (moto) knows
console = Console(highlight=False, width=110)
ENDPOINT = os.environ["AWS_ENDPOINT_URL"]
# The figures of the story. A controller (r5b.2xlarge) sustains its EBS-optimized baseline,
# 21,667 IOPS (perControllerIops' default), 15,167 at the 0.7 target; on io2 Multi-Attach the
# array delivers at most its volumes' provisioned IOPS (64,000 here: 4 controllers are not
# volume-bound). DEMAND needs 4 controllers: ceil(52,345 / 15,167) = 4.
EXISTING_GIB, EXISTING_IOPS = 500, 40_000  # io2: at most 1,000 IOPS per GiB, 256,000 a volume
LOGS_GIB, LOGS_IOPS = 200, 24_000
DEMAND = 52_345


def say(step: str, text: str) -> None:
    console.print(f"\n[bold cyan]==> {step}[/] {text}")


def note(text: str) -> None:
    console.print(f"    [dim]{text}[/]")


def control(area: str, action: str, **body: Any) -> dict[str, Any]:
    """The local cloud's control endpoint: stands in for what AWS does by itself (see docs/localcloud.md)."""
    reply = urllib3.PoolManager().request(
        "POST", f"{ENDPOINT}/_localcloud/{area}/{action}", body=json.dumps(body, default=str).encode()
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
        "volumes": [{"volumeId": volume}, {"name": "logs", "sizeGiB": LOGS_GIB, "iops": LOGS_IOPS}],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI, "instanceProfile": profile},
        "minControllers": 2,
        "maxControllers": 8,
        "hosts": [{"instanceId": host, "mountpoints": mountpoints}],
        "backup": {"schedule": "cron(0 3 * * ? *)", "mode": "application", "retention": 7},
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


def controllers_settled(array_id: str, out: dict[str, str], timeout: float = 180) -> list[dict[str, Any]]:
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
    sfn = boto3.client("stepfunctions")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for execution in sfn.list_executions(stateMachineArn=state_machine)["executions"]:
            new = execution["name"].startswith(f"scale-{array_id}-") and execution["name"] not in known
            if new and execution["status"] != "RUNNING":
                return dict(sfn.describe_execution(executionArn=execution["executionArn"]))
        time.sleep(0.5)
    raise SystemExit("no ScaleArray execution finished within 60 s: see `make localcloud-logs`")


def high_threshold(alarm: str) -> float:
    """The high alarm's threshold as ScaleArray left it (n x perControllerIops x target)."""
    found = boto3.client("cloudwatch").describe_alarms(AlarmNames=[alarm])["MetricAlarms"]
    return float(found[0]["Threshold"])


def capacity(array_id: str) -> dict[str, Any]:
    """status.capacity of the array, as ``vsactl get -o json`` shows it."""
    vsactl_bin = str(Path(sys.executable).parent / "vsactl")
    shown = subprocess.run(  # noqa: S603
        [vsactl_bin, "get", array_id, "-o", "json"], capture_output=True, text=True, check=True
    )
    return dict(json.loads(shown.stdout)["status"]["capacity"])


def scale_executions(state_machine: str, array_id: str) -> set[str]:
    executions = boto3.client("stepfunctions").list_executions(stateMachineArn=state_machine)["executions"]
    return {e["name"] for e in executions if e["name"].startswith(f"scale-{array_id}-")}


def main() -> None:
    out = outputs()
    array_id = f"demo-{time.strftime('%H%M%S')}"
    spec_file = Path(os.environ.get("VSA_STATE", ROOT / ".localcloud")) / f"{array_id}.yaml"

    say("4.", "what an operator already has: an io2 Multi-Attach volume and a client host")
    profile = ensure_node_profile(boto3.client("iam"), out["NodeKeysPolicyArn"])
    volume, gp3, host = existing_infrastructure(profile)
    note(f"volume {volume} (io2, {EXISTING_GIB} GiB, {EXISTING_IOPS:,} IOPS, Multi-Attach) in {AZ};")
    note(f"host {host}")
    note("the host runs the SSM agent (here: registered as a local managed node with its own sandbox)")
    note(f"the host and the controllers get instance profile {profile}: its role has the stack's")
    note("NodeKeysPolicy, so each node reads its own DH-HMAC-CHAP keys from Secrets Manager, no other's")
    lab: Lab | None = None
    mountpoints: list[str] = []
    if (why_not := _missing()) is None:
        lab = Lab(root=spec_file.with_name(f"{array_id}-host"), state_dir=Path("/run/vsa-freeze"))
        data = lab.xfs("data").mountpoint
        (data / "orders.db").write_bytes(os.urandom(1 << 20))
        mountpoints = [str(data)]
        note(f"the host's application writes to {data}: a real XFS filesystem (a loop device here)")
    else:
        note(f"no filesystem to freeze on this machine ({why_not}): the backup below is crash-consistent")
    try:
        run(out, array_id, spec_file, volume, gp3, host, mountpoints, profile)
    finally:
        if lab is not None:
            lab.cleanup()


def run(
    out: dict[str, str],
    array_id: str,
    spec_file: Path,
    volume: str,
    gp3: str,
    host: str,
    mountpoints: list[str],
    profile: str,
) -> None:
    say("5.", f"declare array [bold]{array_id}[/] once: {spec_file.name}")
    spec = write_spec(spec_file, array_id, volume, host, mountpoints, profile)
    console.print("    " + spec_file.read_text().replace("\n", "\n    ").rstrip())
    note("vsactl signs the request with SigV4 (IAM auth); the API validates everything against AWS")
    note("first (volumes, host, launch settings), stores the spec, then creates what it declares; the owned")
    note("volume (logs) is created by the ReconcileArray run it starts, so the API answers 202 at once:")
    vsactl("apply", "-f", str(spec_file))

    say("6.", "a spec that cannot work is refused with its reason, and nothing is created")
    bad_file = spec_file.with_name(f"{array_id}-bad.yaml")
    bad = {**spec, "arrayId": f"{array_id}-bad", "volumes": [{"volumeId": gp3}]}
    bad_file.write_text(yaml.safe_dump(bad, sort_keys=False))
    vsactl("apply", "-f", str(bad_file), check=False)

    say("7.", "the group launched minControllers=2 controllers; BootstrapController brings each into service")
    note("per controller: lease a slot (its NVMe controller-id range), attach every volume (Multi-Attach),")
    note("wait for its SSM agent, run configure-target (nvmet over configfs), run connect-path on every")
    note("host and check the new path is live, then CompleteLifecycleAction CONTINUE")
    controllers_settled(array_id, out)
    show_paths(host)
    vsactl("get", array_id)

    cap = capacity(array_id)
    per = cap["perControllerIops"]
    n, bound = cap["controllers"], str(cap["volumeBound"]).lower()
    note(f"status.capacity: {n} controllers x {per:,} IOPS each (r5b.2xlarge's EBS baseline);")
    note(
        f"the volumes provide {cap['volumeIops']:,} IOPS in total, usable by up to "
        f"{cap['volumeControllers']} controllers:"
    )
    note(f"volume-bound {bound}, deliverable now {cap['deliverableIops']:,.0f} IOPS")

    say("8.", f"the hosts push {DEMAND:,} IOPS: EBS metrics trip the array's high IOPS alarm")
    volumes = array_volumes(array_id, volume)
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
    show_paths(host)

    say("9.", "the same demand under the new threshold: the alarm returns to OK, nothing more to do")
    states = control("cloudwatch", "evaluate", AlarmName=high)["States"]
    time.sleep(2)
    count = len(scale_executions(out["ScaleArrayStateMachineArn"], array_id) - known)
    note(
        f"{high} -> {states[high]}; the trigger reacts to ALARM only. ScaleArray runs in this surge: {count}"
    )

    say("10.", "a spec change on the running array: one more volume, on the host through every controller")
    grown = {**spec, "volumes": [*spec["volumes"], {"name": "scratch", "sizeGiB": 100, "iops": 8000}]}
    spec_file.write_text(yaml.safe_dump(grown, sort_keys=False))
    note("first ask what the apply would change, without changing anything (the API's dry run):")
    vsactl("apply", "-f", str(spec_file), "--dry-run")
    note("then apply it: the PUT stores the spec and starts ReconcileArray (202), whose first step")
    note("creates the volume; it then takes the array's lock and runs its phases: settle (the volume")
    note("is available), attach it to every serving controller,")
    note("export it (configure-target adds one subsystem; the others are not touched), connect the host")
    note("through every controller, then verify what the nodes report. Paths in use never blink:")
    vsactl("apply", "-f", str(spec_file), "--wait", "--timeout", "600")
    show_paths(host)

    say("11.", "replace the controller in slot 0, as for an AMI update: drain first, then a new one joins")
    first = min(serving, key=lambda c: c["slot"])
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=first["instanceId"], ShouldDecrementDesiredCapacity=False
    )
    note(f"terminate {first['instanceId']} in its group: the drain hook holds it (Terminating:Wait);")
    note("DrainController marks it draining, runs disconnect-path on every host first (the host stops using")
    note("that path while the others carry the IO), then tears its nvmet down, detaches, releases the slot,")
    note("CONTINUE. The group launches a replacement at once; BootstrapController brings it in (free slot):")
    time.sleep(3)
    show_paths(host)
    serving = controllers_settled(array_id, out)
    show_paths(host)

    say("12.", "rotate the array's DH-HMAC-CHAP keys, with no IO stop: controller by controller")
    note("the API stores new keys beside the current ones and starts ReconcileArray; its rekey phase")
    note("writes them into one controller's nvmet (live connections stay up), then has every host's path")
    note("to it re-authenticate with them, then the next controller; at the end they become the array's")
    note("and no secret keeps an old key (each node reads only its own copy, with its own instance role):")
    vsactl("rotate-keys", array_id, "--wait", "--timeout", "600")
    show_paths(host)

    mode = "application" if mountpoints else "crash"
    say("13.", f"an {mode}-consistent backup of the whole array: one point in time across every volume")
    if mountpoints:
        note("ConsistentBackup: preflight (a serving controller, the host online, freeze-io dry run on every")
        note("host), freeze-io on every host at once (each arms an on-host watchdog that thaws by itself")
        note("after 10 s whatever happens to SSM or the workflow), one CreateSnapshots on a serving")
        note("controller covering exactly the array's volumes, thaw-io at once, then follow the snapshots:")
    else:
        note("ConsistentBackup: preflight, one CreateSnapshots on a serving controller covering exactly")
        note("the array's volumes (not its boot volume), then follow the snapshots:")
    vsactl("backup", "create", array_id, "--mode", mode, "--label", "demo", "--wait", "--timeout", "600")
    note("the label is honest: application-consistent only if every host froze and thawed within the")
    note("window; otherwise crash-consistent with the reason. Retention keeps the policy's 7 sets;")
    note(f"vsactl backup list {array_id} lists them, vsactl restore makes volumes (or a new array) from one.")

    say("14.", "the array's live state, with the decisions, the controllers' slots and the last backups")
    vsactl("get", array_id)
    vsactl("list")

    say("15.", "the array's story so far, oldest first: each decision, bootstrap, drain, reconcile, backup")
    note("from the registry and the workflows' runs; a failure would show its error and cause on its line")
    vsactl("events", array_id)

    say("16.", "the health check: what every host sees, every few minutes (here invoked, twice)")
    note("on its schedule it reads each host's newest report, counts each host's live paths against the")
    note("serving controllers, replaces a controller no host reaches (two runs in a row), starts")
    note("ReconcileArray for a data plane that drifted from the spec, flags an overdue backup, sends the")
    note("read-only report-paths to every host for the next run, and feeds the dashboard and alarms:")
    for _ in range(2):  # the second run reads the report-paths the first one sent
        reply = boto3.client("lambda").invoke(
            FunctionName=out["TaskHealthCheckFunctionName"],
            Payload=json.dumps({"arrayIds": [array_id]}).encode(),
        )
        answer = json.loads(reply["Payload"].read())
        if "FunctionError" in reply:
            raise SystemExit(f"the health check failed: {answer}")
        time.sleep(3)
    (seen,) = answer["arrays"]
    console.print(
        f"    serving controllers {seen['servingControllers']}, hosts reporting {seen['hostsReporting']}, "
        f"fewest live paths {seen['minLivePaths']}, "
        f"hosts short of paths {seen['hostsShortOfPaths'] or 'none'}, "
        f"dead controllers {seen['deadControllers'] or 'none'}, drift {seen['drift'] or 'none'}, "
        f"last backup {seen['backupAgeSeconds'] and round(seen['backupAgeSeconds'])} s ago"
        f"{', OVERDUE' if seen['backupOverdue'] else ''}"
    )
    note(f"the dashboard {out['OperationsDashboardName']} graphs these per array; a dead controller or a")
    note(
        "host short of paths raises <stack>-controller-replaced / -hosts-short-of-paths (docs/operations.md)"
    )
    console.print(f"\n[bold green]done[/]: array {array_id} is declared and running on the local cloud.")
    console.print(f"    look around: .venv/bin/vsactl get {array_id}")
    console.print(f"    remove it:   .venv/bin/vsactl delete {array_id} --delete-volumes")
    console.print("    make localcloud-logs   |   make localcloud-stop")


if __name__ == "__main__":
    main()
