"""What integration tests of arrays share: the operator's existing infrastructure (``World``),
array ids that are deleted afterwards (``arrays``), specs, waiting for the controller lifecycle
workflows (``settle``) and looking into the nodes they configure (``node_root``, ``host_paths``,
``exported``). Fixtures are re-exported by conftest.py."""

import contextlib
import importlib.machinery
import importlib.util
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3

from tests.integration.conftest import STACK, Api
from tests.integration.runs import succeeded
from tests.node_profile import ensure_node_profile

AZ, OTHER_AZ = "us-east-1a", "us-east-1b"
AMI = "ami-1e749f67"  # one of the local cloud's (moto's) registered images
Spec = dict[str, Any]
WAIT = {"Delay": 1, "MaxAttempts": 120}  # boto3 waiters polling the local cloud every second


def control(endpoint: str, area: str, action: str, **body: Any) -> dict[str, Any]:
    reply = urllib3.PoolManager().request(
        "POST", f"{endpoint}/_localcloud/{area}/{action}", body=json.dumps(body).encode()
    )
    assert reply.status == 200, reply.data
    return dict(json.loads(reply.data))


class World:
    """What an operator already has before declaring an array: volumes and client hosts."""

    def __init__(self, endpoint: str, profile: str | None = None) -> None:
        self.ec2 = boto3.client("ec2")
        self.endpoint = endpoint
        self.profile = profile
        """The nodes' instance profile (tests/node_profile.py): hosts launch with it, and the
        specs give it to the controllers, so each reads its own keys with its instance role."""
        self.volumes: list[str] = []
        self.instances: list[str] = []

    def volume(self, az: str = AZ, kind: str = "io2", multi_attach: bool = True) -> str:
        kwargs: dict[str, Any] = {"AvailabilityZone": az, "Size": 100, "VolumeType": kind}
        if kind in ("io1", "io2"):
            # io2 (Block Express): up to 1,000 IOPS per GiB. Enough that the tests' demand is not
            # volume-bound: the planner adds no controller past what the volumes' IOPS can use
            kwargs["Iops"] = 100_000 if kind == "io2" else 3000
            kwargs["MultiAttachEnabled"] = multi_attach
        volume_id = str(self.ec2.create_volume(**kwargs)["VolumeId"])
        self.volumes.append(volume_id)
        # an operator's volume exists before the array is declared: wait until it is available
        # (under the realistic latency profile a new volume is ``creating`` for a few seconds)
        self.ec2.get_waiter("volume_available").wait(VolumeIds=[volume_id], WaiterConfig=WAIT)
        return volume_id

    def host(self, managed: bool = True) -> str:
        profile = {"IamInstanceProfile": {"Name": self.profile}} if self.profile else {}
        instance = self.ec2.run_instances(
            ImageId=AMI,
            MinCount=1,
            MaxCount=1,
            InstanceType="m5.large",
            Placement={"AvailabilityZone": AZ},
            **profile,
        )["Instances"][0]["InstanceId"]
        self.instances.append(instance)
        self.ec2.get_waiter("instance_running").wait(InstanceIds=[instance], WaiterConfig=WAIT)
        # registered explicitly; an unmanaged one is deregistered so that auto_register (on for
        # the controllers) leaves it alone, as an instance without an SSM agent
        control(self.endpoint, "ssm", "register_node" if managed else "deregister_node", InstanceId=instance)
        return str(instance)

    def controller_profile(self) -> dict[str, str]:
        """The spec's ``controllers.instanceProfile`` (none without a profile)."""
        return {"instanceProfile": self.profile} if self.profile else {}

    def close(self) -> None:
        for instance in self.instances:
            with contextlib.suppress(AssertionError):
                control(self.endpoint, "ssm", "deregister_node", InstanceId=instance)
        if self.instances:
            self.ec2.terminate_instances(InstanceIds=self.instances)
        for volume in self.volumes:
            # deleted by the test already (or still attached: the local cloud is thrown away)
            with contextlib.suppress(self.ec2.exceptions.ClientError):
                self.ec2.delete_volume(VolumeId=volume)


@pytest.fixture(scope="session")
def node_profile(stack_outputs: dict[str, str]) -> str:
    return ensure_node_profile(boto3.client("iam"), stack_outputs["NodeKeysPolicyArn"])


@pytest.fixture
def world(local_env: dict[str, str], node_profile: str) -> Iterator[World]:
    w = World(local_env["AWS_ENDPOINT_URL"], node_profile)
    yield w
    w.close()


SETTLE_CAP = 900
"""How long ``settle`` waits at most while the lifecycle workflows run: it only catches a hang
(each workflow is bounded by its own timeouts and its hook's heartbeat timeout)."""


def _lifecycle_running(instance_ids: list[str]) -> bool:
    """Whether a BootstrapController or DrainController execution of one of these instances
    runs (each execution's name carries its instance's id)."""
    outputs = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]
    arns = [
        o["OutputValue"]
        for o in outputs
        if o["OutputKey"] in ("BootstrapControllerStateMachineArn", "DrainControllerStateMachineArn")
    ]
    sfn = boto3.client("stepfunctions")
    for arn in arns:
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=arn, statusFilter="RUNNING"
        ):
            if any(i in e["name"] for e in page["executions"] for i in instance_ids):
                return True
    return False


def settle(array_id: str, timeout: float = 120) -> None:
    """Wait until the array's controllers have settled: the BootstrapController workflows let
    every launching controller in (or abandoned it) and the DrainController workflows let every
    leaving one go, so the group has ``DesiredCapacity`` controllers, all InService.

    It waits on that condition, not on the clock: ``timeout`` bounds only a stretch in which the
    group is unsettled, its states do not change and no lifecycle workflow of its instances runs
    (an event's delivery, a workflow's start, the group's next launch). While one runs the wait
    goes on, however long a busy machine makes it, up to ``SETTLE_CAP``."""
    started = time.monotonic()
    quiet_since, last = started, None
    while True:
        group = group_of(array_id)
        if group is None:
            return
        states = [i["LifecycleState"] for i in group["Instances"]]
        if states.count("InService") == len(states) == group["DesiredCapacity"]:
            return
        now = time.monotonic()
        if states != last or _lifecycle_running([i["InstanceId"] for i in group["Instances"]]):
            quiet_since, last = now, states
        assert now - quiet_since < timeout, (
            f"array {array_id}: controllers still {states}, no lifecycle workflow running for {timeout} s"
        )
        assert now - started < SETTLE_CAP, (
            f"array {array_id}: controllers still {states} after {SETTLE_CAP} s"
        )
        time.sleep(1)


@pytest.fixture
def scripted_alarms(world: "World") -> Iterator[Callable[[str], None]]:
    """``scripted_alarms(array_id)``: the test plays the array's IOPS alarms itself (fire_alarm).
    Its synthetic array carries no workload, so the real alarms, evaluated every minute as on
    AWS, see no IO: the low alarm would fire on its own a few minutes in (missing data counts as
    low) and scale in under the test's script whenever the machine is slow. Held alarms are left
    out of the local cloud's periodic evaluation until the test ends (control cloudwatch/hold)."""
    held: list[str] = []

    def hold(array_id: str) -> None:
        held.append(f"vsa-{array_id}-")
        control(world.endpoint, "cloudwatch", "hold", AlarmNamePrefix=held[-1])

    yield hold
    for prefix in held:
        control(world.endpoint, "cloudwatch", "release", AlarmNamePrefix=prefix)


@pytest.fixture
def arrays(api: Api) -> Iterator[Callable[[], str]]:
    """New array ids; each is deleted (with its owned volumes) after the test."""
    made: list[str] = []

    def new() -> str:
        made.append(f"it-{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield new
    # DELETE is refused (409) while a controller bootstraps or drains, which a test that scaled
    # often leaves behind: ask again until it is accepted, then wait for each DeleteArray to
    # finish. An array left behind keeps launching and bootstrapping controllers under the next
    # tests (the old teardown took the 409 silently and waited out 120 s for nothing). A test
    # that scaled to 16 leaves 16 bootstraps to end first: minutes on a busy machine.
    deadline = time.monotonic() + 600
    pending = list(made)
    while pending:
        for array_id in list(pending):
            status, answer = api.call("DELETE", f"/arrays/{array_id}?deleteVolumes=true")
            if status in (200, 202, 404):
                pending.remove(array_id)
            else:
                # 504: API Gateway gave up at 29 s on a function still starting on a busy machine;
                # a second DELETE answers the deletion the first may have started (vsactl does
                # the same, vsactl.client.READ_ATTEMPTS)
                assert status in (409, 504), (array_id, status, answer)
        if pending:
            assert time.monotonic() < deadline, f"arrays {pending} still refuse deletion after 600 s"
            time.sleep(2)
    for array_id in made:
        wait_until_gone(api, array_id, timeout=300)


ENDED_AFTER_504 = 15
"""Seconds after API Gateway's 504 by which the PUT's function has surely ended: it times out
within the integration's 29 s (tests/infra/test_api_timeouts.py), and the 504 comes 29 s after
the request; the margin covers the local cloud's slow answers on a loaded machine."""


def after_504(
    api: Api, array_id: str, spec: Spec, query: str, done: Callable[[int, Any], Any], timeout: float
) -> Any:
    """What a caller does after a 504 on PUT (docs/operations.md): GET until the apply is
    seen finished (``done(code, answer)`` answers what to return, else None); once the
    function has surely ended with the stored version's apply unfinished (GET shows
    ``applying``: it stopped part way), PUT the same spec again, which finishes it."""
    deadline = time.monotonic() + timeout
    gave_up = time.monotonic()
    while True:
        code, answer = api.call("GET", f"/arrays/{array_id}")
        assert code in (200, 404, 504), (code, answer)
        if (found := done(code, answer)) is not None:
            return found
        ended = time.monotonic() - gave_up > ENDED_AFTER_504
        stopped = code == 404 or (code == 200 and answer.get("applying") is not None)
        if ended and stopped:
            again, reply = api.call("PUT", f"/arrays/{array_id}{query}", spec)
            # 409: the first PUT's function was still writing after all (its cold start's init
            # does not count against its timeout): ask again later
            assert again in (200, 201, 202, 409, 504), (again, reply)
            gave_up = time.monotonic()
        assert time.monotonic() < deadline, (
            f"array {array_id} not made {timeout} s after a 504 on PUT: {code} {answer}"
        )
        time.sleep(2)


def create_array(api: Api, array_id: str, spec: Spec, timeout: float = 240) -> tuple[int, Any]:
    """PUT a new array for a test's setup: 201 and the answer, as vsactl gets it. A 504 is API
    Gateway giving up at its 29 s on an apply slowed by the loaded local cloud (the two clouds and
    eleven test workers of the test command on 2 cores; the same apply answers in 3-5 s alone);
    setup then does what a caller does (``after_504``) until the array is there with its spec
    stored, its apply finished and its group made, and goes on with that answer. Only setup
    uses this: a test of PUT's own answer calls the API itself."""
    code, reply = api.call("PUT", f"/arrays/{array_id}", spec)
    if code != 504:
        assert code == 201, reply
        return code, reply

    def made(got: int, answer: Any) -> tuple[int, Any] | None:
        finished = got == 200 and answer.get("spec") and answer.get("applying") is None
        return (201, answer) if finished and group_of(array_id) is not None else None

    return tuple(after_504(api, array_id, spec, "", made, timeout))  # type: ignore[return-value]


def put_spec(api: Api, spec: Spec, query: str = "", timeout: float = 240) -> tuple[int, dict[str, Any]]:
    """PUT ``spec`` as a test's step: the status and answer, or, after API Gateway's 504 (its 29 s
    past on an apply slowed by the loaded machine: the test command's two clouds and eleven workers
    on 2 cores),
    what a caller learns by doing what docs/operations.md says (``after_504``): GET until the next
    version is stored and its apply finished and, if that started a ReconcileArray run, the run
    is recorded; the answer is then built from GET with the fields the tests read (``version``,
    ``reconcile`` with ``executionName`` and ``executionArn``, ``creating``: the owned volumes
    still missing), the status the PUT would have had (201 new, 202 creating, 200), and
    ``afterGatewayTimeout`` (the PUT's own lines, such as ``reconcile.remaining``, are lost)."""
    array_id = spec["arrayId"]
    # the version stored before, which tells after a 504 which answer the PUT would have had; the
    # GET itself can answer 504 on a loaded machine, which must not be taken for "no array" (a
    # second PUT after a 504 would then be reported as 202, creating)
    code, before = read_array(api, array_id)
    assert code in (200, 404), (code, before)
    known = int(before["version"]) if code == 200 else 0
    code, reply = api.call("PUT", f"/arrays/{array_id}{query}", spec)
    if code != 504:
        return code, dict(reply)
    machine = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in machine["Outputs"]}
    owned = [v["name"] for v in spec["volumes"] if "name" in v]

    def applied(got: int, answer: Any) -> tuple[int, dict[str, Any]] | None:
        if got != 200 or answer.get("applying") is not None or int(answer["version"]) <= known:
            return None
        if group_of(array_id) is None:
            return None
        run = answer.get("reconcile") or {}
        if run.get("version") == int(answer["version"]) and run.get("execution"):
            name = str(run["execution"])
            arn = (
                outputs["ReconcileArrayStateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
            )
            creating = owned if known == 0 else []
            reconcile = {"state": "converging", "executionName": name, "executionArn": arn, "remaining": []}
            status = 202 if creating else 201 if known == 0 else 200
            return status, {
                **answer,
                "reconcile": reconcile,
                "creating": creating,
                "afterGatewayTimeout": True,
            }
        if known == 0 and not owned:
            return 201, {**answer, "reconcile": None, "creating": [], "afterGatewayTimeout": True}
        return None

    return tuple(after_504(api, array_id, spec, query, applied, timeout))  # type: ignore[return-value]


READ_PATIENCE = 240
"""Seconds a test's GET keeps asking after API Gateway's 504s: a bound for a hang, not a wait
(each 504 is itself 29 s of the API's)."""


def read_array(api: Api, array_id: str, patience: float = READ_PATIENCE) -> tuple[int, Any]:
    """GET the array: the status and answer. API Gateway's 504 (a status read past its 29 s) is
    asked again, as a caller does (vsactl too), until the API answers or ``patience`` seconds
    have passed: under the test command's load (two local clouds and nine test workers on two
    cores) a GET that takes 0.2 s on a quiet machine has met three 504s in a row, each retry
    landing on a function still starting or still busy with the previous read."""
    deadline = time.monotonic() + patience
    while (answer := api.call("GET", f"/arrays/{array_id}"))[0] == 504 and time.monotonic() < deadline:
        time.sleep(1)
    return answer


def get_array(api: Api, array_id: str) -> dict[str, Any]:
    """GET the array (200), asking again after a 504 (``read_array``)."""
    code, answer = read_array(api, array_id)
    assert code == 200, (code, answer)
    return dict(answer)


def wait_until_gone(api: Api, array_id: str, timeout: float = 120) -> None:
    """DELETE answers 202; the DeleteArray workflow forgets the array when it has finished."""
    deadline = time.monotonic() + timeout
    # A 504 is API Gateway giving up on a status that took over 29 s (seen for a 16-controller
    # array being deleted on a loaded machine): a caller asks again, as this does
    while (answer := api.call("GET", f"/arrays/{array_id}"))[0] in (200, 504):
        assert time.monotonic() < deadline, f"array {array_id} still there after {timeout} s: {answer}"
        assert answer[0] == 504 or answer[1].get("deleteFailure") is None, answer
        time.sleep(1)
    assert answer[0] == 404, answer


def spec_for(array_id: str, world: World, **overrides: Any) -> Spec:
    spec: Spec = {
        "specVersion": 1,
        "arrayId": array_id,
        "availabilityZone": AZ,
        "volumes": [{"volumeId": world.volume()}, {"name": "scratch", "sizeGiB": 50, "iops": 50_000}],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI, **world.controller_profile()},
        # the figures the tests use (r5b.2xlarge sustains 21,667): 18,200 IOPS a controller at the
        # 0.7 target; the volumes' 150,000 provisioned IOPS are used by up to 9 controllers
        "perControllerIops": 26_000,
        "minControllers": 1,
        "maxControllers": 4,
        "hosts": [{"instanceId": world.host(), "mountpoints": ["/data"]}],
        "backup": {"schedule": "cron(0 3 * * ? *)", "mode": "application", "retention": 7},
        # round-robin, said: these tests scale past their two volumes, which one owner per volume
        # (the default, reservations) would bound; the default's own flows (the owners' split, a
        # loss fenced, a scale-out's handover, a planned drain) are test_fencing.py's, and the
        # backup and copy tests run their arrays under it
        "fencing": "none",
    }
    spec.update(overrides)
    return spec


def group_of(array_id: str) -> dict[str, Any] | None:
    groups = boto3.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[f"vsa-{array_id}-controllers"]
    )["AutoScalingGroups"]
    return groups[0] if groups else None


def alarms_of(array_id: str) -> dict[str, dict[str, Any]]:
    found = boto3.client("cloudwatch").describe_alarms(AlarmNamePrefix=f"vsa-{array_id}-")["MetricAlarms"]
    return {a["AlarmName"]: a for a in found}


def schedule_of(array_id: str) -> dict[str, Any] | None:
    scheduler = boto3.client("scheduler")
    try:
        return dict(scheduler.get_schedule(Name=f"vsa-{array_id}-backup"))
    except scheduler.exceptions.ResourceNotFoundException:
        return None


def owned_volumes(array_id: str) -> list[dict[str, Any]]:
    return list(
        boto3.client("ec2").describe_volumes(
            Filters=[
                {"Name": "tag:vsa:array", "Values": [array_id]},
                {"Name": "tag:vsa:owned", "Values": ["true"]},
            ]
        )["Volumes"]
    )


def no_trace(array_id: str) -> None:
    assert group_of(array_id) is None, f"array {array_id}: its group outlived it"
    assert alarms_of(array_id) == {}, f"array {array_id}: alarms outlived it: {sorted(alarms_of(array_id))}"
    assert schedule_of(array_id) is None, f"array {array_id}: its backup schedule outlived it"
    assert owned_volumes(array_id) == [], f"array {array_id}: owned volumes outlived it"


# --- the nodes the lifecycle workflows configure -------------------------------------------------

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def node_root(endpoint: str, instance_id: str) -> Path:
    """A managed node's sandbox (its root file system on the local cloud)."""
    return Path(control(endpoint, "ssm", "register_node", InstanceId=instance_id)["Root"])


def _load_fake_nvme() -> Any:
    loader = importlib.machinery.SourceFileLoader("vsa_fake_nvme", str(FAKES / "nvme"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


_FAKE_NVME = _load_fake_nvme()
_FAKE_NVME_LOCK = threading.Lock()  # the fake's node is a module global: one call at a time here


def host_paths(root: Path) -> dict[str, dict[str, str]]:
    """What ``nvme list-subsys`` shows on a host: subsystem NQN -> {controller address: state}.
    The host's own stand-in, called in this process (its ``run``), not started as a program: the
    path samplers call it five times a second per host for minutes, where an interpreter's start
    per call was a large share of the CPU the whole tier used."""
    with _FAKE_NVME_LOCK:
        code, stdout, stderr = _FAKE_NVME.run(["list-subsys", "-o", "json"], root)
    assert code == 0, f"nvme list-subsys on {root} failed: {stderr}"
    paths: dict[str, dict[str, str]] = {}
    for host in json.loads(stdout or "[]"):
        for subsystem in host.get("Subsystems", []):
            found = paths.setdefault(subsystem["NQN"], {})
            for path in subsystem.get("Paths", []):
                address = dict(kv.split("=", 1) for kv in path["Address"].split(","))["traddr"]
                found[address] = path["State"]
    return paths


def exported(root: Path) -> dict[str, dict[str, str]]:
    """What a controller's nvmet exports (its configfs tree): subsystem NQN -> namespace 1's
    device_uuid, device_nguid, the serial and the controller-id range."""
    subsystems = root / "sys/kernel/config/nvmet/subsystems"
    out: dict[str, dict[str, str]] = {}
    for subsystem in sorted(subsystems.iterdir()) if subsystems.is_dir() else []:
        namespace = subsystem / "namespaces/1"

        def read(path: Path) -> str:
            return path.read_text().strip() if path.exists() else ""

        out[subsystem.name] = {
            "uuid": read(namespace / "device_uuid"),
            "nguid": read(namespace / "device_nguid"),
            "serial": read(subsystem / "attr_serial"),
            "cntlid": f"{read(subsystem / 'attr_cntlid_min')}-{read(subsystem / 'attr_cntlid_max')}",
        }
    return out


def write_mounts(root: Any, nqn: str | None, mountpoint: str) -> None:
    """Write the host's mount table (``proc/self/mounts`` in its sandbox, what report-paths
    reads there): ``nqn``'s multipath head mounted at ``mountpoint``, or nothing of the array."""
    lines = ["proc /proc proc rw 0 0"]
    for folder in (root / "sys/class/nvme-subsystem").iterdir():
        if nqn is not None and (folder / "subsysnqn").read_text().strip() == nqn:
            (head,) = [h.name for h in folder.iterdir() if re.fullmatch(r"nvme\d+n\d+", h.name)]
            lines.append(f"/dev/{head} {mountpoint} xfs rw,relatime 0 0")
    assert nqn is None or len(lines) == 2, lines
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/mounts").write_text("\n".join(lines) + "\n")


def put_new(api: Api, spec: Spec, follow: bool = True) -> dict[str, Any]:
    """PUT a new array: 201, or 202 while owned volumes remain to be created by the ReconcileArray
    run the answer names, followed here to its end unless not ``follow`` (it creates them, waits
    for the bootstraps, then attaches, exports and connects what they missed). The answer."""
    status, reply = put_spec(api, spec)
    owned = [v["name"] for v in spec["volumes"] if "name" in v]
    assert status == (202 if owned else 201), reply
    if owned:
        assert reply["creating"] == owned, reply
        if follow:
            follow_run(reply)
    return dict(reply)


def follow_run(reply: dict[str, Any]) -> None:
    """Wait for the ReconcileArray run an apply's answer names; it must succeed."""
    if not reply.get("reconcile"):
        return
    succeeded(reply["reconcile"]["executionArn"])
