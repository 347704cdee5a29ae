"""BootstrapController and DrainController, run by the Step Functions engine with mocked task
answers: the order of the steps, the waits, the undo on failure, the last-serving guard."""

import json
from collections.abc import Callable
from typing import Any

from tests.workflows.conftest import ROOT, entered, lambda_inputs, run_case

LAUNCH = json.loads((ROOT / "events" / "autoscaling" / "launch_lifecycle_action.json").read_text())
TERMINATE = json.loads((ROOT / "events" / "autoscaling" / "terminate_lifecycle_action.json").read_text())
LOST = json.loads((ROOT / "events" / "ec2" / "instance_state_change.json").read_text())


def scheduled(run: dict[str, Any], resource: str) -> list[dict[str, Any]]:
    """The parameters of every scheduled task call of ``resource`` (e.g. ``sendCommand``)."""
    return [
        json.loads(e["taskScheduledEventDetails"]["parameters"])
        for e in run["events"]
        if e["type"] == "TaskScheduled" and e["taskScheduledEventDetails"]["resource"] == resource
    ]


def test_a_controller_is_attached_exported_connected_then_continued(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow("vsa-wf-bootstrap", "bootstrap_controller.asl.json"), "Serves", LAUNCH)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    # every volume attached in one step, waited for (once not yet), before anything is exported
    assert path.count("AttachVolumes") == 1
    assert path.count("CheckAttached") == 2
    assert path.index("CheckAttached") < path.index("ConfigureTarget") < path.index("ConnectPaths")
    # every host's invocation followed in one step per round, until all report live paths
    assert path.count("ConnectPaths") == 1
    assert path.count("PollConnect") == 2
    # ... and, the array having fencing, once serving it starts the handover that gives it its
    # share of the volumes (ReconcileArray's export phase), its answer in the run's output
    assert path[-5:] == ["MarkServing", "Continue", "Fenced?", "StartHandover", "Serving"]
    assert "UndoPaths" not in path
    (handover,) = lambda_inputs(run, "startHandover")
    assert (handover["arrayId"], handover["instanceId"]) == ("wf-a", LAUNCH["detail"]["EC2InstanceId"])
    assert json.loads(run["output"])["handover"]["started"] is True
    (attach,) = lambda_inputs(run, "attach")
    assert [v["VolumeId"] for v in attach["volumes"]] == ["vol-0a1b2c3d4e5f60001", "vol-0a1b2c3d4e5f60002"]
    # configure-target gets the slot, the address and the hosts' NQNs
    commands = scheduled(run, "sendCommand")
    configure = next(c for c in commands if c["DocumentName"] == "vsa-wf-configure-target")
    assert configure["Parameters"]["Slot"] == ["2"]
    assert configure["Parameters"]["ListenAddress"] == ["10.0.1.9"]
    assert configure["Parameters"]["Mode"] == ["apply"]
    # ... and, with dh-hmac-chap, the secret its keys are read from on the controller (never a key)
    assert configure["Parameters"]["Authentication"] == ["dh-hmac-chap"]
    assert configure["Parameters"]["KeysSecretId"] == ["vsa/wf-a/node/i-0a1b2c3d4e5f60009"]
    assert configure["Parameters"]["AwsCommand"] == ["aws"]
    # ... and, with fencing, its reservation key registered and each volume in its owner's group
    assert configure["Parameters"]["Fencing"] == ["reservations"]
    assert configure["Parameters"]["Owners"] == ["1,1"]
    assert configure["Parameters"]["BootIdFile"] == ["/proc/sys/kernel/random/boot_id"]
    assert "DHHC-1" not in json.dumps(run["events"], default=str)
    # connect-path to every host, each with its own NQN (the step adds it to the shared parameters)
    (connect,) = lambda_inputs(run, "connect")
    assert connect["document"] == "vsa-wf-connect-path"
    assert connect["parameters"]["Address"] == ["10.0.1.9"]
    assert "HostNqn" not in connect["parameters"]
    assert sorted((h["instanceId"], h["hostNqn"]) for h in connect["hosts"]) == [
        ("i-0a1b2c3d4e5f60101", "nqn.2014-08.org.nvmexpress:uuid:a"),
        ("i-0a1b2c3d4e5f60102", "nqn.2014-08.org.nvmexpress:uuid:b"),
    ]
    # each host reads its own secret; the shared parameters say how to authenticate
    assert [h["keysSecretId"] for h in connect["hosts"]] == [
        "vsa/wf-a/node/i-0a1b2c3d4e5f60101",
        "vsa/wf-a/node/i-0a1b2c3d4e5f60102",
    ]
    assert connect["parameters"]["Authentication"] == ["dh-hmac-chap"]
    polls = lambda_inputs(run, "commands")
    assert all(p["commands"] == polls[0]["commands"] for p in polls)
    since = "2026-11-22T12:55:00+00:00"  # the connect step's answer, passed on to every poll
    assert {(p["document"], p["since"]) for p in polls} == {("vsa-wf-connect-path", since)}
    assert {c["instanceId"] for c in polls[0]["commands"]} == {"i-0a1b2c3d4e5f60101", "i-0a1b2c3d4e5f60102"}
    # the lifecycle action is completed with CONTINUE, with the event's token
    (done,) = scheduled(run, "completeLifecycleAction")
    assert (done["LifecycleActionResult"], done["LifecycleActionToken"]) == (
        "CONTINUE",
        LAUNCH["detail"]["LifecycleActionToken"],
    )


def test_a_failed_configure_is_undone_abandoned_and_alerted_with_the_scripts_error(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(
        sfn, workflow("vsa-wf-bootstrap", "bootstrap_controller.asl.json"), "ConfigureFails", LAUNCH
    )
    assert run["status"] == "FAILED"
    assert run["error"] == "BootstrapFailed"
    assert run["cause"].startswith(
        "ConfigureTargetFailed: configure-target on i-0a1b2c3d4e5f60003 ended Failed"
    )
    assert "has no device under dev/disk/by-id" in run["cause"]
    path = entered(run)
    assert "ConnectPaths" not in path
    assert "MarkServing" not in path
    undo = ["UndoPaths", "UndoTarget", "Detach", "ReleaseSlot", "Abandon", "Alert"]
    assert [s for s in path if s in undo] == undo
    teardown = [c for c in scheduled(run, "sendCommand") if c["Parameters"].get("Mode") == ["teardown"]]
    assert len(teardown) == 1
    (abandon,) = scheduled(run, "completeLifecycleAction")
    assert abandon["LifecycleActionResult"] == "ABANDON"
    (alert,) = scheduled(run, "publish")
    assert "ConfigureTargetFailed" in alert["Message"]
    assert "i-0a1b2c3d4e5f60003" in alert["Message"]


def test_a_host_that_gets_no_live_path_undoes_the_controller_and_names_the_host(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow("vsa-wf-bootstrap", "bootstrap_controller.asl.json"), "ConnectFails", LAUNCH)
    assert run["status"] == "FAILED"
    assert run["cause"].startswith("ConnectPathFailed: connect-path to 10.0.1.9 did not report a live path")
    assert "i-0a1b2c3d4e5f60102" in run["cause"]
    assert "no live path to 10.0.1.9" in run["cause"]
    path = entered(run)
    assert "MarkServing" not in path
    undo = ["UndoPaths", "UndoTarget", "Detach", "ReleaseSlot", "Abandon", "Alert"]
    assert [s for s in path if s in undo] == undo
    # every host is told to drop the path, the one that connected too
    (undo_paths,) = [
        c for c in scheduled(run, "sendCommand") if c["DocumentName"] == "vsa-wf-disconnect-path"
    ]
    assert undo_paths["InstanceIds"] == ["i-0a1b2c3d4e5f60101", "i-0a1b2c3d4e5f60102"]


def test_a_connect_that_is_never_listed_as_finished_gives_up_and_undoes(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(
        sfn, workflow("vsa-wf-bootstrap", "bootstrap_controller.asl.json"), "ConnectNeverEnds", LAUNCH
    )
    assert run["status"] == "FAILED"
    assert run["cause"].startswith("ConnectPathTimedOut: connect-path to 10.0.1.9 still not finished")
    assert "i-0a1b2c3d4e5f60102" in run["cause"]
    path = entered(run)
    assert path.count("PollConnect") == 1
    assert "MarkServing" not in path
    assert path.index("ConnectTimedOut") < path.index("UndoPaths") < path.index("Abandon")


def test_a_lifecycle_action_that_already_timed_out_is_undone_not_left_half_serving(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(
        sfn, workflow("vsa-wf-bootstrap", "bootstrap_controller.asl.json"), "LifecycleActionExpired", LAUNCH
    )
    assert run["status"] == "FAILED"
    assert "No active Lifecycle Action found" in run["cause"]
    path = entered(run)
    assert path.index("Continue") < path.index("UndoPaths") < path.index("ReleaseSlot") < path.index("Alert")


def test_a_planned_drain_disconnects_hosts_before_removing_the_target(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "Drains", TERMINATE)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    assert path.index("MarkDraining") < path.index("DisconnectPaths") < path.index("TeardownTarget")
    assert path.index("TeardownTarget") < path.index("ReleaseSlot") < path.index("Continue")
    disconnect = next(
        c for c in scheduled(run, "sendCommand") if c["DocumentName"] == "vsa-wf-disconnect-path"
    )
    assert disconnect["Parameters"]["AllowLastPath"] == ["false"]
    assert disconnect["Parameters"]["Address"] == ["10.0.1.9"]
    assert disconnect["InstanceIds"] == ["i-0a1b2c3d4e5f60101"]
    # one batch, disconnected: nothing kept
    assert "DisconnectFailed" not in path
    assert path.index("AllDisconnected?") < path.index("TeardownTarget")


def test_sixty_hosts_are_disconnected_in_batches_of_50_and_one_failing_batch_stops_nothing(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given a controller of an array with 60 hosts (Locate answers them as batches of 50 and 10;
    # SendCommand takes at most 50 InstanceIds) and a host of one batch that refuses
    run = run_case(sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "DrainsSixtyHosts", TERMINATE)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    # Then disconnect-path goes out once per batch, every host in exactly one command
    sent = [c for c in scheduled(run, "sendCommand") if c["DocumentName"] == "vsa-wf-disconnect-path"]
    assert sorted(len(c["InstanceIds"]) for c in sent) == [10, 50]
    assert sorted(i for c in sent for i in c["InstanceIds"]) == [
        f"i-0a1b2c3d4e5f6{n:04d}" for n in range(200, 260)
    ]
    path = entered(run)
    # each batch keeps the lifecycle action alive as it starts and while it waits
    assert path.count("HeartbeatBeforeBatch") == 2
    # the failed batch is reported, the other batch ran to its end, and the drain goes on
    assert path.count("BatchFailed") == 1
    assert path.count("BatchDisconnected") == 1
    assert path.index("DisconnectFailed") < path.index("TeardownTarget") < path.index("Continue")
    (kept,) = [
        json.loads(e["stateExitedEventDetails"]["assignedVariables"]["pathsKept"])
        for e in run["events"]
        if e["type"] == "PassStateExited" and e["stateExitedEventDetails"]["name"] == "DisconnectFailed"
    ]
    assert kept["Error"] == "DisconnectPathFailed"
    assert "Failed on 1 of 10 hosts" in kept["Cause"]


def test_the_last_serving_controller_waits_for_another_before_its_paths_go(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "LastServingWaits", TERMINATE)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    # it waited (with a heartbeat) and looked again before any host lost a path
    assert path.index("WaitForAnother") < path.index("HeartbeatWhileWaiting") < path.index("Relocate")
    assert path.index("Relocate") < path.index("DisconnectPaths")


def test_a_lost_instance_that_is_no_controller_ends_without_touching_anything(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "LostUnknownInstance", LOST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert entered(run) == ["Cause?", "FromInstanceLoss", "Locate", "IsController?", "NotAController"]


def test_a_lost_controller_whose_slot_goes_before_it_is_marked_draining_ends_drained(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given a lost controller located with its slot, whose slot is released before MarkDraining
    # (EC2 announces shutting-down and terminated: two drains of one instance; the first one
    # releases the slot while the second has just located it; or the array was deleted)
    run = run_case(
        sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "LostSlotReleasedMeanwhile", LOST
    )
    # Then there is nothing left to drain: it ends without touching any host, never failed
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    assert path[-3:] == ["MarkDraining", "SlotGone?", "NotAController"], path
    assert "DisconnectPaths" not in path


def test_a_planned_drain_whose_slot_is_gone_still_completes_its_lifecycle_action(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(
        sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "PlannedSlotReleasedMeanwhile", TERMINATE
    )
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    assert path.index("SlotGone?") < path.index("Continue")
    assert "DisconnectPaths" not in path


# --- fencing: the leaving controller's volumes are handed over before any host lets go ---------
def test_a_planned_drain_hands_over_in_two_waves_before_the_hosts_let_go(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(
        sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "HandsOverInTwoWaves", TERMINATE
    )
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    # the givers' wave, followed to its end, then the takers', and only then the hosts let go
    assert path.index("MarkDraining") < path.index("HandOver") < path.index("TakersWave")
    assert path.index("TakersWave") < path.index("DisconnectPaths") < path.index("TeardownTarget")
    steps = lambda_inputs(run, "handover")
    assert [(s["wave"], s["fence"]) for s in steps] == [(1, False), (2, False)]
    leaving = TERMINATE["detail"]["EC2InstanceId"]
    assert {(s["slot"], s["address"], s["instanceId"]) for s in steps} == {(2, "10.0.1.9", leaving)}
    assert steps[0]["node"]["bootIdFile"] == "/proc/sys/kernel/random/boot_id"
    # a heartbeat in every round of the wait (the lifecycle action stays alive)
    assert path.count("HeartbeatWhileHandingOver") == path.count("PollHandOver") == 3
    polls = lambda_inputs(run, "handoverPoll")
    assert [p["started"]["owners"]["wave"] for p in polls] == [1, 1, 2]


def test_a_lost_controller_is_fenced_by_the_takers_in_one_wave_before_the_hosts_let_go(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "LostIsFencedFirst", LOST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    assert path.index("HandOver") < path.index("PollHandOver") < path.index("DisconnectPaths")
    assert "TakersWave" not in path
    assert "HeartbeatWhileHandingOver" not in path  # no lifecycle action to keep alive
    assert [(s["wave"], s["fence"]) for s in lambda_inputs(run, "handover")] == [(1, True)]


def test_a_planned_drain_whose_release_fails_is_handed_over_as_a_loss_fenced_first(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(
        sfn, workflow("vsa-wf-drain", "drain_controller.asl.json"), "PlannedFallsBackToFence", TERMINATE
    )
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    assert path.index("WaveFailed") < path.index("FenceInstead") < path.index("DisconnectPaths")
    assert [(s["wave"], s["fence"]) for s in lambda_inputs(run, "handover")] == [(1, False), (1, True)]
