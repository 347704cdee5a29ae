"""ReconcileArray's pure rules (vsa_core.reconcile.plan): what each phase does given what it
observed, what remains, when an apply starts a run and what it says will be done."""

import json
from pathlib import Path
from typing import Any

from tests.specs import CONTROLLERS
from vsa_core.arrays.dataplane import Report
from vsa_core.arrays.spec import ArraySpec
from vsa_core.nvme import default_host_nqn, subsystem_nqn
from vsa_core.reconcile import plan
from vsa_core.reconcile.plan import Controller, Documents, NodePaths, Observed
from vsa_core.reconcile.steps import Node

V1, V2, V3 = "vol-0a1b2c3d4e5f60001", "vol-0a1b2c3d4e5f60002", "vol-0a1b2c3d4e5f60003"
C1, C2 = "i-0a1b2c3d4e5f60c01", "i-0a1b2c3d4e5f60c02"
H1, H2, H3 = "i-0a1b2c3d4e5f60a01", "i-0a1b2c3d4e5f60a02", "i-0a1b2c3d4e5f60a03"
DOCS = Documents("ct", "cp", "dp")
NODE = NodePaths()


def spec(volumes: tuple[str, ...] = (V1, V2), hosts: tuple[str, ...] = (H1, H2), **more: Any) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "controllers": CONTROLLERS,
            "minControllers": 2,
            "maxControllers": 4,
            "volumes": [{"volumeId": v} for v in volumes] + more.pop("new", []),
            "hosts": [{"instanceId": h} for h in hosts],
            **more,
        }
    )


CONTROLLERS_2 = (Controller(C1, "10.0.0.1", 0), Controller(C2, "10.0.0.2", 1))


def observed(
    the_spec: ArraySpec,
    attachments: dict[str, dict[str, str]],
    removed_hosts: tuple[str, ...] = (),
    states: dict[str, str] | None = None,
) -> Observed:
    ids = the_spec.existing_volume_ids
    return Observed(
        spec=the_spec,
        volume_ids=ids,
        controllers=CONTROLLERS_2,
        volume_states=states or dict.fromkeys([*ids, *attachments], "in-use"),
        attachments=attachments,
        removed_hosts=removed_hosts,
    )


ALL = {C1: "attached", C2: "attached"}


def test_a_new_volume_is_attached_to_every_serving_controller_only_where_missing() -> None:
    # Given V3 was added to the spec; V1, V2 attached everywhere; V3 attaching to C1 already
    seen = observed(spec((V1, V2, V3)), {V1: ALL, V2: ALL, V3: {C1: "attaching"}})
    # Then only C2 lacks it, and the attach phase is not done until both show attached
    assert plan.missing_attachments(seen) == {C2: [V3]}
    assert plan.unattached(seen) == [f"{V3} on {C1}", f"{V3} on {C2}"]
    assert "volume vol-0a1b2c3d4e5f60003 not attached to i-0a1b2c3d4e5f60c02" in plan.remaining(seen)


def test_export_configures_every_controller_with_its_own_slot_and_address_and_all_volumes() -> None:
    seen = observed(spec((V1, V2, V3)), {V1: ALL, V2: ALL, V3: ALL})
    sent = plan.commands("export", seen, DOCS, NODE)
    assert [(i.document, i.instance_id) for i in sent] == [("ct", C1), ("ct", C2)]
    assert [i.parameters["Slot"] for i in sent] == ["0", "1"]
    assert [i.parameters["ListenAddress"] for i in sent] == ["10.0.0.1", "10.0.0.2"]
    assert {i.parameters["Volumes"] for i in sent} == {f"{V1},{V2},{V3}"}
    assert {i.parameters["HostNqns"] for i in sent} == {f"{default_host_nqn(H1)},{default_host_nqn(H2)}"}
    assert {i.parameters["Mode"] for i in sent} == {"apply"}


def test_connect_sends_every_host_to_every_controller_with_its_own_nqn() -> None:
    seen = observed(spec(hosts=(H1, H2, H3)), {V1: ALL, V2: ALL})
    sent = plan.commands("connect", seen, DOCS, NODE)
    pairs = {(i.instance_id, i.parameters["Address"], i.parameters["HostNqn"]) for i in sent}
    assert len(sent) == 6
    assert pairs == {(h, a, default_host_nqn(h)) for h in (H1, H2, H3) for a in ("10.0.0.1", "10.0.0.2")}


def test_a_removed_volume_is_disconnected_by_every_host_from_every_controller_then_detached() -> None:
    # Given V2 left the spec but is still attached to both controllers
    seen = observed(spec((V1,)), {V1: ALL, V2: ALL})
    assert plan.removed_volumes(seen) == {V2: [C1, C2]}
    sent = plan.commands("disconnect", seen, DOCS, NODE)
    # Then each controller's path to V2 (and only V2) goes on every host, the last one too
    assert [(i.document, i.instance_id, i.parameters["Address"]) for i in sent] == [
        ("dp", H1, "10.0.0.1"),
        ("dp", H2, "10.0.0.1"),
        ("dp", H1, "10.0.0.2"),
        ("dp", H2, "10.0.0.2"),
    ]
    assert {i.parameters["Volumes"] for i in sent} == {V2}
    assert {i.parameters["AllowLastPath"] for i in sent} == {"true"}
    # export then no longer lists it (configure-target removes its subsystem), detach waits for it
    assert {i.parameters["Volumes"] for i in plan.commands("export", seen, DOCS, NODE)} == {V1}
    assert plan.detaching(seen) == [f"{V2} on {C1}, {C2}"]
    # and once detached nothing remains
    assert plan.remaining(observed(spec((V1,)), {V1: ALL, V2: {}})) == []


def test_a_removed_volume_is_waited_for_until_ebs_has_ended_every_attachment() -> None:
    # Given DetachVolume was sent for V2 to both controllers: EBS shows one attachment
    # detaching (DetachVolume answers at once; the attachment ends later), the other gone
    seen = observed(spec((V1,)), {V1: ALL, V2: {C1: "detaching"}})
    # Then nothing is left to detach, but the phase waits, and the run is not converged
    assert plan.removed_volumes(seen) == {}
    assert plan.detaching(seen) == [f"{V2} detaching from {C1}"]
    assert plan.remaining(seen) == [f"volume {V2} (no longer in the spec) still detaching from {C1}"]
    # and an instance that is not the array's (the volume attached elsewhere since) is not waited for
    assert plan.detaching(observed(spec((V1,)), {V1: ALL, V2: {"i-0a1b2c3d4e5f60fff": "detaching"}})) == []
    # Once EBS has ended it, nothing remains
    assert plan.detaching(observed(spec((V1,)), {V1: ALL, V2: {}})) == []


def test_a_removed_host_disconnects_every_volume_from_every_controller_and_is_no_longer_allowed() -> None:
    seen = observed(spec(hosts=(H1,)), {V1: ALL, V2: ALL}, removed_hosts=(H2,))
    sent = plan.commands("disconnect", seen, DOCS, NODE)
    assert [(i.instance_id, i.parameters["Address"], i.parameters["Volumes"]) for i in sent] == [
        (H2, "10.0.0.1", f"{V1},{V2}"),
        (H2, "10.0.0.2", f"{V1},{V2}"),
    ]
    assert {i.parameters["HostNqns"] for i in plan.commands("export", seen, DOCS, NODE)} == {
        default_host_nqn(H1)
    }
    assert [i.instance_id for i in plan.commands("connect", seen, DOCS, NODE)] == [H1, H1]


def test_nothing_to_do_when_converged() -> None:
    seen = observed(spec(), {V1: ALL, V2: ALL})
    assert plan.commands("disconnect", seen, DOCS, NODE) == []
    assert plan.missing_attachments(seen) == {}
    assert plan.remaining(seen) == []


def test_settle_waits_for_volumes_not_yet_created_or_available() -> None:
    seen = Observed(
        spec=spec((V1,), new=[{"name": "scratch", "sizeGiB": 10, "iops": 3000}]),
        volume_ids=(V1,),
        controllers=CONTROLLERS_2,
        volume_states={V1: "creating"},
        attachments={},
        missing_volumes=("scratch",),
    )
    assert plan.unready_volumes(seen) == ["volume scratch not created yet", f"volume {V1} is creating"]


def test_controllers_in_flight_and_serving_from_slots() -> None:
    slots = {
        0: {"instanceId": C1, "state": "serving", "address": "10.0.0.1"},
        1: {"instanceId": C2, "state": "bootstrapping", "address": "10.0.0.2"},
        2: {"instanceId": "i-0a1b2c3d4e5f60c03", "state": "draining", "address": "10.0.0.3"},
    }
    assert plan.controllers_of(slots) == (Controller(C1, "10.0.0.1", 0),)
    assert plan.in_flight(slots) == [
        f"controller {C2} (slot 1) is bootstrapping",
        "controller i-0a1b2c3d4e5f60c03 (slot 2) is draining",
    ]


def test_an_apply_starts_a_run_when_the_data_plane_changes_or_the_last_run_failed() -> None:
    base = spec()
    assert not plan.needs_reconcile(None, base, None)  # a new array: the bootstraps do it all
    assert not plan.needs_reconcile(base, base, "converged")
    assert plan.needs_reconcile(base, base, "failed")  # re-applying resumes
    assert plan.needs_reconcile(base, spec((V1, V2, V3)), "converged")
    assert plan.needs_reconcile(base, spec(hosts=(H1,)), None)
    assert plan.needs_reconcile(base, spec(allowAnyHost=True, authentication="none"), None)
    # a change outside the data plane (scaling settings) starts none
    assert not plan.needs_reconcile(base, spec(maxControllers=8), "converged")
    # new launch settings for the controllers start one (its roll phase replaces them), and say so
    rolled = spec(controllers={**CONTROLLERS, "imageId": "ami-0123456789abcdef0"})
    assert plan.needs_reconcile(base, rolled, "converged")
    assert plan.pending_work(base, rolled) == [
        "controllers: new launch settings; every controller running another AMI or instance type "
        "is replaced, one at a time, the new one serving before the old one drains"
    ]


def test_the_answer_says_what_remains_per_volume_and_host() -> None:
    before = spec((V1, V2), hosts=(H1, H2))
    after = spec((V1, V3), hosts=(H1, H3))
    assert plan.pending_work(before, after) == [
        f"volume {V3}: attach to every serving controller, export, connect every host",
        f"volume {V2}: every host disconnects it, unexport, detach (kept: the array did not create it)",
        f"host {H3}: allow on every controller, then connect through every controller",
        f"host {H2}: disconnect from every controller, then disallow",
    ]
    assert plan.left_hosts(before, after) == (H2,)
    assert plan.left_hosts(None, after) == ()


def _node_settings_sent(states: dict[str, Any], found: dict[str, set[str]]) -> dict[str, set[str]]:
    """{document placeholder: the parameters a workflow fills from a Node* deploy setting}."""
    for state in states.values():
        params = state.get("Parameters") or {}
        document = params.get("DocumentName") or params.get("document")
        sent = params.get("Parameters") or params.get("parameters") or {}
        if document:
            node = {k for k, v in sent.items() if "${Node" in json.dumps(v)}
            found.setdefault(document, set()).update(node)
        for branch in state.get("Branches", []):
            _node_settings_sent(branch["States"], found)
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                _node_settings_sent(state[key]["States"], found)
    return found


def test_reconcile_sends_each_document_every_node_setting_the_other_workflows_send() -> None:
    # A deploy's Node* settings say where things are on the nodes; connect-path without the
    # NvmeConfig BootstrapController sends wrote to the real /etc/nvme/config.json and failed
    # in the local cloud's sandbox. Every setting reconcile's node block carries reaches its
    # commands, and reconcile sends each document every Node* setting any workflow sends it.
    root = Path(__file__).resolve().parents[2] / "statemachines"
    expected: dict[str, set[str]] = {}
    for path in root.glob("*.asl.json"):
        if path.name != "reconcile_array.asl.json":
            _node_settings_sent(json.loads(path.read_text())["States"], expected)
    reconcile = json.loads((root / "reconcile_array.asl.json").read_text())
    node_block = reconcile["States"]["Init"]["Assign"]["node"]
    node = NodePaths(**Node.model_validate(node_block).model_dump())
    assert all(isinstance(v, str) and v.startswith("${Node") for v in node_block.values()), node_block
    docs = Documents("${ConfigureTargetDocument}", "${ConnectPathDocument}", "${DisconnectPathDocument}")
    seen = observed(spec(), {V1: ALL, V2: ALL}, removed_hosts=(H3,))
    sent: dict[str, set[str]] = {}
    # with fencing (the settings configure-target needs for it: the nvme-cli, the boot id)
    with_fencing = fenced(CONTROLLERS_2, (V1, V2))
    wave = plan.export_wave(with_fencing, {}, None, {})
    runs = [(phase, seen, None) for phase in ("disconnect", "export", "connect")]
    for phase, seen_as, export_wave in [*runs, ("export", with_fencing, wave)]:
        for invocation in plan.commands(phase, seen_as, docs, node, export_wave):
            placeholders = {k for k, v in invocation.parameters.items() if v.startswith("${Node")}
            sent.setdefault(invocation.document, set()).update(placeholders)
    assert set(sent) == {docs.configure_target, docs.connect_path, docs.disconnect_path}
    for document, settings in sent.items():
        missing = expected[document] - settings
        assert not missing, f"{document}: reconcile does not send {missing}"


OWNED = [{"name": "data", "sizeGiB": 16, "iops": 3000}]


def test_a_grown_volume_is_one_line_of_work_and_starts_a_run() -> None:
    # Given an owned volume grown from 16 to 32 GiB, and another whose IOPS alone changed
    before = spec(new=[*OWNED, {"name": "logs", "sizeGiB": 8, "iops": 3000}])
    after = spec(new=[{**OWNED[0], "sizeGiB": 32}, {"name": "logs", "sizeGiB": 8, "iops": 4000}])
    # Then the apply starts ReconcileArray and says what it will do for each
    assert plan.needs_reconcile(before, after, "converged")
    assert plan.pending_work(before, after) == [
        "volume data: grow to 32 GiB (from 16 GiB), re-read the size on every controller, "
        "verify on every host",
        "volume logs: modified by EBS (3000 -> 4000 IOPS); nothing changes on the controllers or hosts",
    ]


def _grown(modification: str | None) -> Observed:
    return Observed(
        spec=spec((V1, V2)),
        volume_ids=(V1, V2),
        controllers=CONTROLLERS_2,
        volume_states={V1: "in-use", V2: "in-use"},
        attachments={V1: ALL, V2: ALL},
        sizes={V1: 8, V2: 32},
        modifications={V2: modification} if modification else {},
    )


def test_settle_waits_while_a_grown_volumes_modification_is_modifying_only() -> None:
    # EBS: "Size increases take effect once the volume modification reaches the optimizing state"
    assert plan.unready_volumes(_grown("modifying")) == [
        f"volume {V2} is being modified (modifying): its new size is usable once the modification "
        "is optimizing"
    ]
    assert "modifying" in " ".join(plan.remaining(_grown("modifying")))
    for state in ("optimizing", "completed", "failed", None):
        assert plan.unready_volumes(_grown(state)) == [], state


def _controller_report(instance_id: str, sizes: dict[str, int]) -> Report:
    exports = [
        {
            "nqn": subsystem_nqn("demo", v),
            "namespaces": [{"nsid": 1, "enabled": True, "sizeBytes": gib * 2**30}],
            "ports": [{"id": "4420", "traddr": "10.0.0.1", "trsvcid": "4420"}],
            "allowedHosts": sorted(default_host_nqn(h) for h in (H1, H2)),
        }
        for v, gib in sizes.items()
    ]
    body = {"document": "configure-target", "arrayId": "demo", "exports": exports}
    return Report("configure-target", f"c-{instance_id}", None, "Success", body)


def _host_report(instance_id: str, sizes: dict[str, int]) -> Report:
    subsystems = [
        {
            "nqn": subsystem_nqn("demo", v),
            "paths": [{"address": "10.0.0.1", "state": "live"}, {"address": "10.0.0.2", "state": "live"}],
            "ioPolicy": "round-robin",
            "sizeBytes": gib * 2**30,
        }
        for v, gib in sizes.items()
    ]
    body = {"document": "connect-path", "arrayId": "demo", "subsystems": subsystems}
    return Report("connect-path", f"h-{instance_id}", None, "Success", body)


def test_verify_names_every_node_that_does_not_show_a_grown_volume_at_its_ebs_size() -> None:
    # Given V2 grown to 32 GiB on EBS; C2 has not re-read it, H2 still sees 16 GiB
    seen = _grown("optimizing")
    controllers = {C1: _controller_report(C1, {V1: 8, V2: 32}), C2: _controller_report(C2, {V1: 8, V2: 16})}
    hosts = {H1: _host_report(H1, {V1: 8, V2: 32}), H2: _host_report(H2, {V1: 8, V2: 16})}
    # Then only the sizes are named (the verify of a run judges sizes, the rest is AWS's)
    assert plan.size_differences(seen, controllers, hosts) == [
        f"controller {C2} (slot 1, 10.0.0.2) exports volume {V2} at 16 GiB, EBS says 32 GiB",
        f"host {H2} sees volume {V2} at 16 GiB, EBS says 32 GiB",
    ]
    # and once every node shows 32 GiB, nothing; a node without a report is no size difference
    grown = {C1: _controller_report(C1, {V1: 8, V2: 32}), C2: None}
    assert plan.size_differences(seen, grown, {H1: _host_report(H1, {V1: 8, V2: 32}), H2: None}) == []


# --- fencing: the export phase hands ownership over in waves ----------------------------------
C3 = "i-0a1b2c3d4e5f60c03"


def fenced(controllers: tuple[Controller, ...], volumes: tuple[str, ...] = (V1, V2, V3)) -> Observed:
    the_spec = spec(volumes, fencing="reservations")
    return Observed(
        spec=the_spec,
        volume_ids=the_spec.existing_volume_ids,
        controllers=controllers,
        volume_states=dict.fromkeys(volumes, "in-use"),
        attachments={v: {c.instance_id: "attached" for c in controllers} for v in volumes},
    )


def test_without_fencing_the_export_phase_has_no_wave_and_sends_no_owner() -> None:
    seen = observed(spec((V1, V2), fencing="none"), {V1: ALL, V2: ALL})
    assert plan.export_wave(seen, {}, None, {}) is None
    assert all("Owners" not in i.parameters for i in plan.commands("export", seen, DOCS, NODE))


def test_with_fencing_and_no_controller_serving_yet_the_export_phase_has_no_wave_and_sends_nothing() -> None:
    # a new or restored array's first run: its controllers still launching, owners recorded or not
    seen = fenced(())
    assert plan.export_wave(seen, {}, None, {}) is None
    assert plan.export_wave(seen, {V1: 0, V2: 1, V3: 0}, None, {0: "key-0"}) is None
    assert plan.commands("export", seen, DOCS, NODE) == []


def test_first_owners_go_to_every_controller_in_one_wave_with_its_key_registered() -> None:
    seen = fenced(CONTROLLERS_2)
    wave = plan.export_wave(seen, {}, None, {})
    assert wave is not None
    assert (wave.wave, wave.last, wave.moving) == (1, True, True)
    sent = plan.commands("export", seen, DOCS, NODE, wave)
    assert [i.instance_id for i in sent] == [C1, C2]
    owners = [wave.after[v] for v in (V1, V2, V3)]
    assert {i.parameters["Owners"] for i in sent} == {",".join(map(str, owners))}
    assert sorted(owners).count(0) in (1, 2)  # an even split of 3 over 2
    assert {i.parameters["Fencing"] for i in sent} == {"reservations"}
    assert {i.parameters["FenceKeys"] for i in sent} == {""}
    assert {i.parameters["BootIdFile"] for i in sent} == {NODE.boot_id_file}


def test_a_new_controller_takes_its_share_only_after_the_givers_released_it() -> None:
    # Given two controllers own the three volumes and a third started serving
    before = plan.export_wave(fenced(CONTROLLERS_2), {}, None, {})
    assert before is not None
    three = (*CONTROLLERS_2, Controller(C3, "10.0.0.3", 2))
    seen = fenced(three)
    # When the export phase runs: wave 1 on the two givers, the newcomer not yet
    first = plan.export_wave(seen, before.after, None, {})
    assert first is not None
    assert (first.wave, first.last) == (1, False)
    assert [i.instance_id for i in plan.commands("export", seen, DOCS, NODE, first)] == [C1, C2]
    assert list(first.after.values()).count(2) == 1
    # Then, with that wave recorded done, wave 2 runs on the newcomer alone, the same owners
    second = plan.export_wave(seen, before.after, {"after": first.after, "wave": 2}, {})
    assert second is not None
    assert (second.wave, second.last, second.after) == (2, True, first.after)
    assert [i.instance_id for i in plan.commands("export", seen, DOCS, NODE, second)] == [C3]


def test_an_owner_that_no_longer_serves_is_fenced_by_every_taker_of_its_volumes() -> None:
    before = plan.export_wave(fenced(CONTROLLERS_2), {}, None, {})
    assert before is not None
    seen = fenced(CONTROLLERS_2[:1])  # C2 (slot 1) is gone
    wave = plan.export_wave(seen, before.after, None, {1: "0x5eed"})
    assert wave is not None
    assert set(wave.after.values()) == {0}
    (sent,) = plan.commands("export", seen, DOCS, NODE, wave)
    assert sent.parameters["FenceKeys"] == "0x5eed"


def test_a_handover_recorded_for_other_volumes_is_planned_anew() -> None:
    seen = fenced(CONTROLLERS_2)
    stale = {"after": {V1: 0, V2: 1}, "wave": 2}  # before V3 joined the spec
    wave = plan.export_wave(seen, {V1: 0, V2: 1}, stale, {})
    assert wave is not None
    assert wave.wave == 1
    assert set(wave.after) == {V1, V2, V3}
