"""The controller lifecycle end to end on the local cloud: the real template deployed with the
lifecycle on, the real Lambda code, the real SSM documents run by Run Command on the nodes'
sandboxes (configfs as a directory tree, the recording ``nvme`` / ``modprobe`` stand-ins).

Nothing here completes a lifecycle action or runs a document itself: the Auto Scaling group
launches and terminates controllers, EventBridge starts BootstrapController / DrainController,
and the tests look at what those left on the nodes.
"""

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from tests.integration.arrays_world import (
    control,
    create_array,
    exported,
    get_array,
    group_of,
    host_paths,
    node_root,
    settle,
    spec_for,
)
from tests.integration.conftest import (
    executions_of,
    fire_alarm,
    function_logs,
    put_event,
    recent_stamp,
    wait_for_execution,
)
from tests.integration.runs import Progress, log_events
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.nvme import subsystem_nqn

# AWS's timings: volumes and attachments take seconds, SSM agents register tens of seconds after
# boot (the local cloud's realistic latency profile), so the workflows' waits are exercised.
pytestmark = pytest.mark.usefixtures("realistic_timings")

PER_CONTROLLER = 26_000 * 0.7  # what one controller serves at the spec's target utilisation


def serving(array_id: str, stack_outputs: dict[str, str]) -> dict[int, dict[str, str]]:
    """The array's controller slots as the workflows leave them in the registry."""
    return ArrayRegistry(stack_outputs["RegistryTableName"], boto3.client("dynamodb")).slots(array_id)


def attached_to(volume_ids: list[str]) -> dict[str, set[str]]:
    volumes = boto3.client("ec2").describe_volumes(VolumeIds=volume_ids)["Volumes"]
    return {
        v["VolumeId"]: {a["InstanceId"] for a in v.get("Attachments", []) if a["State"] == "attached"}
        for v in volumes
    }


class PathWatch:
    """Samples every host's paths in the background: the fewest live paths any host had to any
    subsystem, and every path seen in another state than live (a target that went away before
    the host disconnected from it: the order a drain must never take)."""

    def __init__(self, roots: dict[str, Any], nqns: list[str]) -> None:
        self.roots, self.nqns = roots, nqns
        self.fewest: tuple[int, str] = (99, "")
        self.samples = 0
        self.not_live: set[tuple[str, str, str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for host, root in self.roots.items():
                paths = host_paths(root)
                for nqn in self.nqns:
                    found = paths.get(nqn, {})
                    live = sum(1 for state in found.values() if state == "live")
                    self.not_live |= {(host, nqn, a, state) for a, state in found.items() if state != "live"}
                    if live < self.fewest[0]:
                        self.fewest = (live, f"{host} {nqn}: {paths.get(nqn)}")
            self.samples += 1
            self._stop.wait(0.2)

    def __enter__(self) -> "PathWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture
def lifecycle_array(stack_outputs, api, world, arrays, scripted_alarms) -> dict[str, Any]:
    """An array of 3 volumes and 2 managed hosts with 2 serving controllers, cooldowns off; the
    tests play its alarms (scripted_alarms)."""
    array_id = arrays()
    scripted_alarms(array_id)
    spec = spec_for(
        array_id,
        world,
        volumes=[{"volumeId": world.volume()}, {"volumeId": world.volume()}, {"volumeId": world.volume()}],
        minControllers=2,
        maxControllers=5,
        scaleOutCooldownSeconds=0,
        scaleInCooldownSeconds=0,
    )
    spec["hosts"] = [{"instanceId": world.host(), "mountpoints": ["/data"]} for _ in range(2)]
    create_array(api, array_id, spec)
    settle(array_id)
    volumes = [v["volumeId"] for v in spec["volumes"]]
    return {
        "arrayId": array_id,
        "volumes": volumes,
        "nqns": [subsystem_nqn(array_id, v) for v in volumes],
        "hosts": {h["instanceId"]: node_root(world.endpoint, h["instanceId"]) for h in spec["hosts"]},
    }


def check_serving(
    stack_outputs: dict[str, str], world: Any, array: dict[str, Any], count: int, packed: bool = True
) -> list[str]:
    """``count`` serving controllers in distinct slots (0..count-1 when ``packed``: a controller
    launched while an abandoned one still held its slot takes the next one), each with every
    volume attached and exporting every volume with the same identities and its own
    controller-id range, and every host with ``count`` live paths to every volume, one per
    controller. The controllers."""
    array_id = array["arrayId"]
    group = group_of(array_id)
    assert group is not None
    in_service = sorted(i["InstanceId"] for i in group["Instances"] if i["LifecycleState"] == "InService")
    assert len(in_service) == count, group["Instances"]
    slots = serving(array_id, stack_outputs)
    assert len(slots) == count, slots
    if packed:
        assert sorted(slots) == list(range(count)), slots
    assert {s["state"] for s in slots.values()} == {"serving"}, slots
    assert sorted(s["instanceId"] for s in slots.values()) == in_service
    assert attached_to(array["volumes"]) == {v: set(in_service) for v in array["volumes"]}
    exports = {i: exported(node_root(world.endpoint, i)) for i in in_service}
    for instance, subsystems in exports.items():
        assert sorted(subsystems) == sorted(array["nqns"]), (instance, subsystems)
    for nqn in array["nqns"]:
        identities = {(e[nqn]["uuid"], e[nqn]["nguid"], e[nqn]["serial"]) for e in exports.values()}
        assert len(identities) == 1, identities  # the host merges the paths into one namespace
        ranges = sorted(tuple(int(x) for x in e[nqn]["cntlid"].split("-")) for e in exports.values())
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)), ranges
    addresses = {s["address"] for s in slots.values()}
    for host, root in array["hosts"].items():
        paths = host_paths(root)
        for nqn in array["nqns"]:
            assert paths.get(nqn) == dict.fromkeys(addresses, "live"), (host, nqn, paths.get(nqn))
    return in_service


def test_scale_out_to_5_and_back_to_3_never_leaves_a_host_without_a_path(
    stack_outputs, api, world, lifecycle_array
):
    array, array_id = lifecycle_array, lifecycle_array["arrayId"]
    scale = stack_outputs["ScaleArrayStateMachineArn"]
    # Given 2 serving controllers, every host with 2 paths to every volume
    first = check_serving(stack_outputs, world, array, 2)
    # When demand needs 5 controllers
    started = time.monotonic()
    demand_scales_out(stack_outputs, array_id, 5)
    settle(array_id, timeout=180)
    print(f"2 -> 5 controllers bootstrapped in {time.monotonic() - started:.1f} s")
    # Then 5 serve, each with every volume, and every host has 5 paths; the first two kept theirs
    five = check_serving(stack_outputs, world, array, 5)
    assert set(first) <= set(five)
    # and the array's status (vsactl get) says so
    shown = get_array(api, array_id)["status"]  # asks again after a 504 (a loaded machine)
    assert sorted(c["slot"] for c in shown["controllers"]) == [0, 1, 2, 3, 4]
    assert {c["slotState"] for c in shown["controllers"]} == {"serving"}
    assert [h["paths"] for h in shown["hosts"]] == [5, 5]  # the fewest live paths each host reports
    slots = serving(array_id, stack_outputs)
    roots = {i: node_root(world.endpoint, i) for i in five}  # the sandboxes outlive the instances
    # When demand falls to what 3 serve, twice (scale-in removes one controller per decision)
    with PathWatch(array["hosts"], array["nqns"]) as watch:
        for step in (4, 3):
            stamp = recent_stamp()
            decision = json.loads(
                wait_for_execution(scale, fire_alarm(array_id, 2 * PER_CONTROLLER, stamp, "low"))["output"]
            )
            assert (decision["action"], decision["desired_controllers"]) == ("scale-in", step), decision
            # the controller in the highest slot leaves
            assert decision["leaver"] == slots[step]["instanceId"], (decision, slots)
            settle(array_id, timeout=120)
    # Then 3 serve, in slots 0..2; the leavers exported nothing and hold no volume any more
    three = check_serving(stack_outputs, world, array, 3)
    gone = set(five) - set(three)
    assert gone == {slots[3]["instanceId"], slots[4]["instanceId"]}
    for instance in gone:
        assert exported(roots[instance]) == {}
    assert all(not (attached & gone) for attached in attached_to(array["volumes"]).values())
    # And while the two drained, no host ever had fewer than 3 live paths to any volume, nor a
    # path whose controller had stopped exporting before the host let go of it
    assert watch.samples > 5
    assert watch.fewest[0] >= 3, watch.fewest
    assert watch.not_live == set()
    # And the leavers' own EC2 state changes (shutting-down, terminated: EC2 announces every
    # one) found them drained already, their slots released: on_controller_event started no
    # DrainController for them (an index entry that lagged would start one that ends at once)
    for instance in gone:
        for state, (how, what) in lost_events(stack_outputs, instance).items():
            if how == "execution":
                assert what["status"] == "SUCCEEDED", (state, what)
                assert "not a controller" in what["output"], (state, what["output"])
        assert dead_letters(stack_outputs, instance) == []


LOST_STATES = ("shutting-down", "terminated")


def lost_events(stack_outputs: dict[str, str], instance_id: str) -> dict[str, tuple[str, Any]]:
    """What became of the instance's ``shutting-down`` and ``terminated`` state changes (EC2
    Instance State-change Notification), once each is accounted for: ``("execution", the
    finished DrainController lost-<instance>-<state>, described)``, or ``("dropped", the log
    line)`` when on_controller_event found no slot for the instance and started nothing. Waits
    while on_controller_event logs or DrainController runs change (``runs.Progress``): on a busy
    machine EventBridge's deliveries to the function queue minutes behind the state change."""
    sfn = boto3.client("stepfunctions")
    machine = stack_outputs["DrainControllerStateMachineArn"]
    group = f"/aws/lambda/{stack_outputs['OnControllerEventFunctionName']}"
    progress = Progress(f"state changes of {instance_id} unaccounted for")
    while True:
        found: dict[str, tuple[str, Any]] = {}
        executions = executions_of(machine)
        for execution in executions:
            for state in LOST_STATES:
                if execution["name"] == f"lost-{instance_id}-{state}" and execution["status"] != "RUNNING":
                    found[state] = (
                        "execution",
                        dict(sfn.describe_execution(executionArn=execution["executionArn"])),
                    )
        events = log_events(group)
        for line in (e["message"] for e in events if instance_id in e["message"]):
            record = json.loads(line) if line.startswith("{") else {}
            if (
                record.get("message") == "not a controller: no workflow started"
                and record.get("state") in LOST_STATES
            ):
                found.setdefault(record["state"], ("dropped", line))
        if len(found) == len(LOST_STATES):
            return found
        progress.check((len(events), [(e["name"], e["status"]) for e in executions]), sorted(found))
        time.sleep(1)


def dead_letters(stack_outputs: dict[str, str], term: str) -> list[str]:
    """Messages in the triggers' dead-letter queue that mention ``term`` (left in the queue)."""
    sqs = boto3.client("sqs")
    url = stack_outputs["TriggerDeadLetterQueueUrl"]
    bodies = [
        m["Body"]
        for m in sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=0
        ).get("Messages", [])
    ]
    return [b for b in bodies if term in b]


# --- failures --------------------------------------------------------------------------------------


def bootstrap_of(state_machine_arn: str, instance_id: str, timeout: float = 600) -> dict[str, Any]:
    """The finished BootstrapController execution of ``instance_id``."""
    sfn = boto3.client("stepfunctions")
    deadline = time.monotonic() + timeout
    while True:
        found = [
            e
            for e in executions_of(state_machine_arn)
            if e["name"].startswith(f"bootstrap-{instance_id}-") and e["status"] != "RUNNING"
        ]
        if found:
            return dict(sfn.describe_execution(executionArn=found[0]["executionArn"]))
        assert time.monotonic() < deadline, f"no finished bootstrap of {instance_id} after {timeout} s"
        time.sleep(1)


def demand_scales_out(
    stack_outputs: dict[str, str], array_id: str, to: int, timeout: float = 240
) -> dict[str, Any]:
    """The array's high alarm at what ``to`` controllers serve, until ScaleArray scales out to
    ``to``: its decision. A run may hold while a controller is still in flight (the planner reads
    the group's lifecycle states, not the slots check_serving reads), or be skipped while another
    run holds the array's scaling lock; either re-arms the alarm, and on AWS the alarm then fires
    again while its metric stays high, which the test plays here by firing it again. (Under load
    a single firing can launch nothing within 60 s, its run having held or been skipped.)"""
    scale = stack_outputs["ScaleArrayStateMachineArn"]
    deadline = time.monotonic() + timeout
    while True:
        name = fire_alarm(array_id, to * PER_CONTROLLER, recent_stamp(), "high")
        run = wait_for_execution(scale, name)
        assert run["status"] == "SUCCEEDED", (name, run["status"], run.get("error"), run.get("cause"))
        decision = json.loads(run["output"])
        if decision.get("action") == "scale-out":
            assert decision["desired_controllers"] == to, decision
            return dict(decision)
        # held until what is in flight lands, or skipped while another run holds the lock
        assert decision.get("action") in ("hold", "skipped"), decision
        assert decision["action"] == "skipped" or "waits" in decision.get("reason", ""), decision
        assert time.monotonic() < deadline, f"no scale-out to {to} in {timeout} s: {decision}"
        time.sleep(5)


class Offline:
    """Keeps the next controller the group launches from ever registering with SSM (as an
    instance without the agent's instance profile), as soon as it appears: its bootstrap waits
    for a node that never comes. (Not set_ping: under the realistic latency profile the agent
    has not registered yet when the instance appears.) It watches for up to ``LAUNCH_WAIT``
    seconds: the alarm's ScaleArray run and the group's launch can take over 60 s on a loaded
    machine (two local clouds, ten test workers on 2 cores), and with a shorter watch the test
    fails with no instance to hold offline."""

    LAUNCH_WAIT = 240

    def __init__(self, endpoint: str, array_id: str, known: list[str]) -> None:
        self.endpoint, self.array_id, self.known = endpoint, array_id, set(known)
        self.instance: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.LAUNCH_WAIT
        while self.instance is None and time.monotonic() < deadline:
            group = group_of(self.array_id) or {"Instances": []}
            fresh = [i["InstanceId"] for i in group["Instances"] if i["InstanceId"] not in self.known]
            if fresh:
                control(self.endpoint, "ssm", "deregister_node", InstanceId=fresh[0])
                self.instance = fresh[0]
            time.sleep(0.1)

    def __enter__(self) -> "Offline":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(timeout=self.LAUNCH_WAIT + 10)


@pytest.fixture
def alerts(stack_outputs) -> Iterator[Callable[[str], list[str]]]:
    """``alerts(term)``: the messages published to the alerts topic that contain ``term`` (other
    arrays' alerts arrive too), through an SQS queue subscribed to the topic; waits up to 60 s
    for the first."""
    sqs, sns = boto3.client("sqs"), boto3.client("sns")
    url = sqs.create_queue(QueueName=f"alerts-{time.monotonic_ns()}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    subscription = sns.subscribe(TopicArn=stack_outputs["AlertsTopicArn"], Protocol="sqs", Endpoint=arn)
    seen: list[str] = []

    def received(term: str) -> list[str]:
        deadline = time.monotonic() + 60
        while not any(term in m for m in seen) and time.monotonic() < deadline:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2).get(
                "Messages", []
            )
            seen.extend(json.loads(m["Body"])["Message"] for m in messages)
        return [m for m in seen if term in m]

    yield received
    sns.unsubscribe(SubscriptionArn=subscription["SubscriptionArn"])
    sqs.delete_queue(QueueUrl=url)


def check_undone(stack_outputs: dict[str, str], array: dict[str, Any], instance: str) -> None:
    slots = serving(array["arrayId"], stack_outputs)
    assert instance not in {s["instanceId"] for s in slots.values()}, slots
    assert all(instance not in attached for attached in attached_to(array["volumes"]).values())


def test_a_controller_whose_node_never_comes_online_is_undone_abandoned_and_replaced(
    stack_outputs, world, lifecycle_array, alerts
):
    array, array_id = lifecycle_array, lifecycle_array["arrayId"]
    first = check_serving(stack_outputs, world, array, 2)
    # Given the next controller launched never comes online in SSM
    with Offline(world.endpoint, array_id, first) as offline:
        # When demand needs a third controller
        demand_scales_out(stack_outputs, array_id, 3)
    assert offline.instance is not None, "no controller was launched"
    # Then its bootstrap gives up after ControllerRegistrationSeconds, undoes and ABANDONs
    execution = bootstrap_of(stack_outputs["BootstrapControllerStateMachineArn"], offline.instance)
    assert (execution["status"], execution["error"]) == ("FAILED", "BootstrapFailed"), execution
    assert execution["cause"].startswith("NodeNotOnline:"), execution["cause"]
    check_undone(stack_outputs, array, offline.instance)
    # and an operator is told why
    messages = alerts(offline.instance)
    assert any("NodeNotOnline" in m for m in messages), messages
    # And the group replaces the abandoned controller with one that bootstraps and serves
    settle(array_id, timeout=120)
    three = check_serving(stack_outputs, world, array, 3, packed=False)
    assert offline.instance not in three


def test_a_lifecycle_action_that_times_out_while_the_bootstrap_waits_ends_it_undone(
    stack_outputs, world, lifecycle_array
):
    array, array_id = lifecycle_array, lifecycle_array["arrayId"]
    first = check_serving(stack_outputs, world, array, 2)
    # Given a launching controller whose bootstrap waits for its node
    with Offline(world.endpoint, array_id, first) as offline:
        demand_scales_out(stack_outputs, array_id, 3)
    assert offline.instance is not None, "no controller was launched"
    # (its lifecycle action exists once the instance runs: AWS starts the hooks after the
    # instance's startup sequence, and the realistic profile holds it pending a while first)
    deadline = time.monotonic() + 60
    while not any(
        i["InstanceId"] == offline.instance and i["LifecycleState"] == "Pending:Wait"
        for i in (group_of(array_id) or {"Instances": []})["Instances"]
    ):
        assert time.monotonic() < deadline, f"{offline.instance} never waited on the launch hook"
        time.sleep(0.5)
    # When its lifecycle action times out (the hook's default result, ABANDON, terminates it)
    # (only this array's group: the tests beside this one keep their own lifecycle clocks)
    control(
        world.endpoint,
        "autoscaling",
        "advance",
        seconds=3600,
        AutoScalingGroupName=f"vsa-{array_id}-controllers",
    )
    # Then the bootstrap stops waiting for an instance that is gone, undoes what it did and fails
    execution = bootstrap_of(stack_outputs["BootstrapControllerStateMachineArn"], offline.instance)
    assert (execution["status"], execution["error"]) == ("FAILED", "BootstrapFailed"), execution
    # (the node check or an attach sees the instance gone, or a heartbeat finds no action: Step
    # Functions names an unmodelled Auto Scaling error AutoScaling.AutoScalingException)
    cause = execution["cause"]
    assert cause.startswith("ControllerGoneError:") or "No active Lifecycle Action found" in cause, cause
    check_undone(stack_outputs, array, offline.instance)
    # And the replacement serves
    settle(array_id, timeout=120)
    check_serving(stack_outputs, world, array, 3, packed=False)


def test_a_redelivered_launch_event_starts_no_second_bootstrap(stack_outputs, world, lifecycle_array):
    array = lifecycle_array
    instance = check_serving(stack_outputs, world, array, 2)[0]
    machine = stack_outputs["BootstrapControllerStateMachineArn"]
    first = bootstrap_of(machine, instance)
    assert first["status"] == "SUCCEEDED"
    # When EventBridge delivers the same launch lifecycle event again (at-least-once)
    put_event(json.loads(first["input"]))
    # Then no second bootstrap runs (the execution name is the event's), the controller serves on
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        mine = [e for e in executions_of(machine) if e["name"].startswith(f"bootstrap-{instance}-")]
        assert [e["executionArn"] for e in mine] == [first["executionArn"]]
        time.sleep(1)
    assert "duplicate controller event" in "".join(
        function_logs(stack_outputs["OnControllerEventFunctionName"], "duplicate controller event")
    )
    check_serving(stack_outputs, world, array, 2)


def test_a_serving_controller_terminated_through_ec2_is_drained_as_lost_and_replaced(
    stack_outputs, world, lifecycle_array
):
    array, array_id = lifecycle_array, lifecycle_array["arrayId"]
    check_serving(stack_outputs, world, array, 2)
    slots = serving(array_id, stack_outputs)
    lost = slots[1]["instanceId"]
    lost_address = slots[1]["address"]
    # When EC2 terminates a serving controller (no lifecycle action: an operator, a failure),
    # with the sampler watching every host's paths from then on
    watch = PathWatch(array["hosts"], array["nqns"]).__enter__()
    started = time.monotonic()
    boto3.client("ec2").terminate_instances(InstanceIds=[lost])
    # Then its state changes (shutting-down, terminated) drain it as a lost controller: the
    # first to arrive starts a DrainController (the second one too while the slot is still held,
    # which then ends "not a controller", or nothing once it is released); every one started
    # succeeds, the hosts let go of its paths and its slot is free
    events = lost_events(stack_outputs, lost)
    drains = [what for how, what in events.values() if how == "execution"]
    assert drains, events
    assert [d["status"] for d in drains] == ["SUCCEEDED"] * len(drains), drains
    assert any("not a controller" not in d.get("output", "") for d in drains), drains  # one drained it
    assert lost not in {s["instanceId"] for s in serving(array_id, stack_outputs).values()}
    assert dead_letters(stack_outputs, lost) == []
    # And the group replaces it with a controller that bootstraps and serves; no host keeps a
    # path to the lost one
    settle(array_id, timeout=180)
    two = check_serving(stack_outputs, world, array, 2, packed=False)
    assert lost not in two
    assert slots[0]["instanceId"] in two  # the other controller served on
    # every host ends with a live path through each serving controller and none to the lost one
    addresses = {s["address"] for s in serving(array_id, stack_outputs).values()}
    deadline = time.monotonic() + 120
    while True:
        seen = {
            (h, n): host_paths(root).get(n, {}) for h, root in array["hosts"].items() for n in array["nqns"]
        }
        if all(found == dict.fromkeys(addresses, "live") for found in seen.values()):
            break
        assert time.monotonic() < deadline, seen
        time.sleep(0.5)
    healed_after = time.monotonic() - started
    watch.__exit__()
    print(
        f"lost controller: every host back to a live path per serving controller {healed_after:.1f} s after"
    )
    for host, root in array["hosts"].items():
        for nqn in array["nqns"]:
            assert lost_address not in host_paths(root).get(nqn, {}), (host, nqn)
    # And the sampler saw no host without a live path to any volume at any moment
    assert watch.samples > 5, watch.samples
    assert watch.fewest[0] >= 1, watch.fewest
