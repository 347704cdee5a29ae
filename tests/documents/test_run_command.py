"""The SSM documents as deployed (content rendered by tools/documents.py), run by the local cloud's
Run Command on managed nodes: 3 controllers (slots 0, 1, 2) with the array's io2 Multi-Attach
volumes attached, and 2 hosts. The nodes' sandboxes are their root file systems: configfs is a
directory tree, the EBS devices are the files the local cloud's EBS puts there on attach, and
``nvme``/``modprobe`` are the stand-ins of tests/fakes.

One world per module; each test leaves it as it found it (every controller configured, every
host connected or not as the test says at its start)."""

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.documents.conftest import (
    CONFIGFS,
    DEVICES,
    FAKE_MODPROBE,
    FAKE_NVME,
    NVME_CONFIG,
    SYSFS,
    calls,
    report_of,
    tree,
)
from tests.documents_tool import documents
from vsa_core import nvme
from vsa_core.arrays.spec import Host

AZ = "us-east-1a"
ARRAY = "docs-array"
OTHER = "docs-other"
TERMINAL = ("Success", "Failed", "TimedOut", "Cancelled")


@dataclass
class Node:
    instance_id: str
    root: Path
    ip: str

    @property
    def nvmet(self) -> Path:
        return self.root / CONFIGFS / "nvmet"


@dataclass
class Invocation:
    status: str
    code: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        return report_of(self.stdout)


@dataclass
class World:
    ssm: Any
    controllers: list[Node]
    hosts: list[Node]
    volumes: list[str]  # the array's, attached to every controller
    other_volume: str  # another array's, attached to controller 0
    loose_volume: str  # attached to nothing
    document_names: dict[str, str] = field(default_factory=dict)

    @property
    def host_nqns(self) -> list[str]:
        return [nvme.host_nqn(Host.model_validate({"instanceId": h.instance_id})) for h in self.hosts]

    def run(self, document: str, nodes: list[Node], params: list[dict[str, str]]) -> list[Invocation]:
        """One command per node (its own parameters), sent together, awaited together."""
        sent = []
        for node, given in zip(nodes, params, strict=True):
            command = self.ssm.send_command(
                InstanceIds=[node.instance_id],
                DocumentName=self.document_names[document],
                Parameters={key: [value] for key, value in given.items()},
            )["Command"]["CommandId"]
            sent.append((command, node))
        results = []
        for command, node in sent:
            deadline = time.monotonic() + 90
            while True:
                reply = self.ssm.get_command_invocation(CommandId=command, InstanceId=node.instance_id)
                if reply["Status"] in TERMINAL:
                    break
                assert time.monotonic() < deadline, (
                    f"{document} on {node.instance_id} still {reply['Status']}"
                )
                time.sleep(0.2)
            results.append(
                Invocation(
                    reply["Status"],
                    reply["ResponseCode"],
                    reply["StandardOutputContent"],
                    reply["StandardErrorContent"],
                )
            )
        return results

    def configure(self, slots: list[int] | None = None, **params: str) -> list[Invocation]:
        slots = [0, 1, 2] if slots is None else slots
        nodes = [self.controllers[slot] for slot in slots]
        return self.run(
            "configure-target",
            nodes,
            [
                {
                    "ArrayId": ARRAY,
                    "Volumes": ",".join(self.volumes),
                    "Slot": str(slot),
                    "HostNqns": ",".join(self.host_nqns),
                    "ListenAddress": node.ip,
                    "ConfigfsRoot": CONFIGFS,
                    "DeviceDir": DEVICES,
                    "ModprobeCommand": FAKE_MODPROBE,
                    **params,
                }
                for slot, node in zip(slots, nodes, strict=True)
            ],
        )

    def connect(self, controller: Node, hosts: list[Node] | None = None, **params: str) -> list[Invocation]:
        hosts = self.hosts if hosts is None else hosts
        return self.run(
            "connect-path",
            hosts,
            [
                {
                    "ArrayId": ARRAY,
                    "Volumes": ",".join(self.volumes),
                    "Address": controller.ip,
                    "HostNqn": self.host_nqns[self.hosts.index(host)],
                    "NvmeCommand": FAKE_NVME,
                    "SysfsRoot": SYSFS,
                    "NvmeConfig": NVME_CONFIG,
                    **params,
                }
                for host in hosts
            ],
        )

    def disconnect(self, controller: Node, host: Node, **params: str) -> Invocation:
        (result,) = self.run(
            "disconnect-path",
            [host],
            [
                {
                    "ArrayId": ARRAY,
                    "Volumes": ",".join(self.volumes),
                    "Address": controller.ip,
                    "NvmeCommand": FAKE_NVME,
                    **params,
                }
            ],
        )
        return result

    def connect_all(self) -> None:
        for controller in self.controllers:
            for result in self.connect(controller):
                assert result.status == "Success", result.stderr


def live_paths(host: Node) -> dict[str, list[str]]:
    """The host's live paths per subsystem NQN: the controller addresses (from the fake's state)."""
    state_file = host.root / ".fakes" / "nvme-state.json"
    paths: dict[str, list[str]] = {}
    if state_file.exists():
        for ctrl in json.loads(state_file.read_text())["controllers"].values():
            if ctrl["state"] == "live":
                paths.setdefault(ctrl["nqn"], []).append(ctrl["traddr"])
    return {nqn: sorted(addresses) for nqn, addresses in paths.items()}


def wait_available(ec2: Any, volume_id: str) -> None:
    deadline = time.monotonic() + 30
    while ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["State"] != "available":
        assert time.monotonic() < deadline, f"{volume_id} stays attached"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def world(aws: Callable[[str], Any], control: Callable[..., dict[str, Any]]) -> Iterator[World]:
    ec2, ssm = aws("ec2"), aws("ssm")
    suffix = uuid.uuid4().hex[:8]
    names = {}
    for name in documents.names():
        names[name] = f"vsa-docs-{suffix}-{name}"
        ssm.create_document(
            Name=names[name],
            DocumentType="Command",
            DocumentFormat="JSON",
            Content=json.dumps(documents.content(documents.load(name))),
        )
    reply = ec2.run_instances(
        ImageId="ami-12345678", MinCount=5, MaxCount=5, Placement={"AvailabilityZone": AZ}
    )
    nodes = []
    for instance in reply["Instances"]:
        root = Path(control("ssm", "register_node", InstanceId=instance["InstanceId"])["Root"])
        nodes.append(Node(instance["InstanceId"], root, instance["PrivateIpAddress"]))
    assert len({n.ip for n in nodes}) == 5, "the local cloud gave two instances one address"

    def volume() -> str:
        return str(
            ec2.create_volume(
                AvailabilityZone=AZ, Size=4, VolumeType="io2", Iops=100, MultiAttachEnabled=True
            )["VolumeId"]
        )

    made = [volume() for _ in range(5)]
    controllers, hosts = nodes[:3], nodes[3:]
    for controller in controllers:
        for letter, volume_id in zip("fgh", made[:3], strict=True):
            ec2.attach_volume(
                VolumeId=volume_id, InstanceId=controller.instance_id, Device=f"/dev/sd{letter}"
            )
    ec2.attach_volume(VolumeId=made[3], InstanceId=controllers[0].instance_id, Device="/dev/sdi")
    world = World(ssm, controllers, hosts, made[:3], made[3], made[4], names)
    try:
        yield world
    finally:
        for node in nodes:
            control("ssm", "deregister_node", InstanceId=node.instance_id)
        ec2.terminate_instances(InstanceIds=[n.instance_id for n in nodes])
        for volume_id in made:
            wait_available(ec2, volume_id)
            ec2.delete_volume(VolumeId=volume_id)
        for name in names.values():
            ssm.delete_document(Name=name)


@pytest.fixture(scope="module")
def configured(world: World) -> World:
    for result in world.configure():
        assert result.status == "Success", result.stderr
    return world


def test_every_controller_exports_the_same_subsystems_with_its_own_ids_and_address(configured: World):
    world = configured
    nqns = sorted(nvme.subsystem_nqn(ARRAY, v) for v in world.volumes)
    for slot, controller in enumerate(world.controllers):
        nvmet = controller.nvmet
        # the same NQNs, namespaces, serial and model on every controller
        assert (
            sorted(p.name for p in (nvmet / "subsystems").iterdir() if p.name.startswith(nqns[0][:40]))
            == nqns
        )
        for volume_id in world.volumes:
            subsystem = nvmet / "subsystems" / nvme.subsystem_nqn(ARRAY, volume_id)
            namespace = subsystem / "namespaces" / "1"
            assert (namespace / "device_uuid").read_text() == nvme.namespace_uuid(volume_id) + "\n"
            assert (namespace / "device_nguid").read_text() == nvme.namespace_nguid(volume_id) + "\n"
            assert (namespace / "device_path").read_text() == (
                f"{controller.root / DEVICES / nvme.device_name(volume_id)}\n"
            )
            assert (namespace / "enable").read_text() == "1\n"
            assert (subsystem / "attr_serial").read_text() == nvme.serial(ARRAY) + "\n"
            assert (subsystem / "attr_model").read_text() == nvme.model(ARRAY) + "\n"
            # the slot's own controller ids
            low, high = nvme.cntlid_range(slot)
            assert (subsystem / "attr_cntlid_min").read_text() == f"{low}\n"
            assert (subsystem / "attr_cntlid_max").read_text() == f"{high}\n"
            assert sorted(p.name for p in (subsystem / "allowed_hosts").iterdir()) == sorted(world.host_nqns)
        # one TCP port bound to this controller's address, every subsystem linked into it
        port = nvmet / "ports" / str(nvme.port_id())
        assert (port / "addr_trtype").read_text() == "tcp\n"
        assert (port / "addr_adrfam").read_text() == "ipv4\n"
        assert (port / "addr_traddr").read_text() == f"{controller.ip}\n"
        assert (port / "addr_trsvcid").read_text() == "4420\n"
        linked = [p for p in (port / "subsystems").iterdir() if p.name.startswith(nqns[0][:40])]
        assert sorted(p.name for p in linked) == nqns
    # disjoint controller-id ranges across the controllers, read back from their trees
    ranges = []
    for controller in world.controllers:
        subsystem = controller.nvmet / "subsystems" / nqns[0]
        ranges.append(
            (
                int((subsystem / "attr_cntlid_min").read_text()),
                int((subsystem / "attr_cntlid_max").read_text()),
            )
        )
    assert all(a[1] < b[0] or b[1] < a[0] for i, a in enumerate(ranges) for b in ranges[i + 1 :])


def test_a_second_run_changes_nothing(configured: World):
    world = configured
    before = [tree(c.root / CONFIGFS) for c in world.controllers]
    results = world.configure()
    assert [r.status for r in results] == ["Success"] * 3
    assert [r.report["changes"] for r in results] == [0, 0, 0]
    assert [tree(c.root / CONFIGFS) for c in world.controllers] == before


def test_a_volume_left_out_is_removed_and_only_that_one(configured: World):
    world = configured
    controller = world.controllers[2]
    gone = nvme.subsystem_nqn(ARRAY, world.volumes[2])
    (result,) = world.run(
        "configure-target",
        [controller],
        [
            {
                "ArrayId": ARRAY,
                "Volumes": ",".join(world.volumes[:2]),
                "Slot": "2",
                "HostNqns": ",".join(world.host_nqns),
                "ListenAddress": controller.ip,
                "ConfigfsRoot": CONFIGFS,
                "DeviceDir": DEVICES,
                "ModprobeCommand": FAKE_MODPROBE,
            }
        ],
    )
    try:
        assert result.status == "Success", result.stderr
        assert result.report["removed"] == [gone]
        assert not (controller.nvmet / "subsystems" / gone).exists()
        assert not (controller.nvmet / "ports/4420/subsystems" / gone).exists()
        for volume_id in world.volumes[:2]:
            assert (controller.nvmet / "subsystems" / nvme.subsystem_nqn(ARRAY, volume_id)).is_dir()
    finally:
        (restored,) = world.configure([2])
        assert restored.status == "Success", restored.stderr


def test_teardown_removes_this_array_only(configured: World):
    world = configured
    controller = world.controllers[0]
    other = nvme.subsystem_nqn(OTHER, world.other_volume)
    # Given another array exported by the same controller on the same port
    (result,) = world.configure([0], ArrayId=OTHER, Volumes=world.other_volume, AllowAnyHost="true")
    assert result.status == "Success", result.stderr
    try:
        # When this array is torn down
        (result,) = world.configure([0], Mode="teardown")
        # Then only the other array's subsystem remains, still on its port
        assert result.status == "Success", result.stderr
        assert sorted(result.report["removed"]) == sorted(nvme.subsystem_nqn(ARRAY, v) for v in world.volumes)
        assert [p.name for p in (controller.nvmet / "subsystems").iterdir()] == [other]
        assert [p.name for p in (controller.nvmet / "ports/4420/subsystems").iterdir()] == [other]
        assert list((controller.nvmet / "hosts").iterdir()) == []
        # When the other array goes too / Then nothing is left, port included
        (result,) = world.configure([0], ArrayId=OTHER, Volumes=world.other_volume, Mode="teardown")
        assert result.status == "Success", result.stderr
        assert tree(controller.nvmet) == {"hosts": ("dir",), "ports": ("dir",), "subsystems": ("dir",)}
    finally:
        (restored,) = world.configure([0])
        assert restored.status == "Success", restored.stderr


def test_a_volume_not_attached_fails_naming_it_and_changes_nothing(configured: World):
    world = configured
    controller = world.controllers[1]
    before = tree(controller.root / CONFIGFS)
    (result,) = world.configure([1], Volumes=",".join([*world.volumes, world.loose_volume]))
    assert result.status == "Failed"
    assert result.code == 1
    assert world.loose_volume in result.stderr
    assert "attach the volume to this instance first" in result.stderr
    assert world.loose_volume in result.report["error"]
    assert tree(controller.root / CONFIGFS) == before


def test_a_parameter_with_shell_syntax_is_refused_by_send_command(world: World):
    for params in (
        {"ArrayId": "docs'; touch /tmp/owned; '"},
        {"Volumes": "vol-0123456789abcdef0;reboot"},
        {"ListenAddress": "10.0.0.1$(reboot)"},
        {"ModprobeCommand": "`reboot`"},
        {"HostNqns": "nqn.2014-08.org.nvmexpress:uuid:x\nreboot"},
    ):
        given = {
            "ArrayId": ARRAY,
            "Volumes": world.volumes[0],
            "Slot": "0",
            "ListenAddress": "10.0.0.1",
            **params,
        }
        with pytest.raises(ClientError) as refused:
            world.ssm.send_command(
                InstanceIds=[world.controllers[0].instance_id],
                DocumentName=world.document_names["configure-target"],
                Parameters={k: [v] for k, v in given.items()},
            )
        assert refused.value.response["Error"]["Code"] == "InvalidParameters"


def test_connect_path_gives_each_host_one_live_path_per_controller_per_subsystem(configured: World):
    world = configured
    for controller in world.controllers:
        results = world.connect(controller)
        assert [r.status for r in results] == ["Success", "Success"], [r.stderr for r in results]
        for result in results:
            assert sorted(result.report["connected"]) == sorted(
                nvme.subsystem_nqn(ARRAY, v) for v in world.volumes
            )
            assert result.report["missing"] == []
    addresses = sorted(c.ip for c in world.controllers)
    for host in world.hosts:
        assert live_paths(host) == {nvme.subsystem_nqn(ARRAY, v): addresses for v in world.volumes}
    # the last report lists, per subsystem, a live path to each controller
    for entry in results[0].report["subsystems"]:
        assert sorted(p["address"] for p in entry["paths"] if p["state"] == "live") == addresses
        assert entry["livePaths"] == 3


def test_connecting_twice_is_harmless(configured: World):
    world = configured
    world.connect_all()
    connects_before = [len([c for c in calls(h.root) if c[0] == "connect"]) for h in world.hosts]
    results = world.connect(world.controllers[0])
    assert [r.status for r in results] == ["Success", "Success"]
    assert [r.report["connected"] for r in results] == [[], []]
    assert [len([c for c in calls(h.root) if c[0] == "connect"]) for h in world.hosts] == connects_before


def test_disconnect_path_removes_exactly_one_path(configured: World):
    world = configured
    world.connect_all()
    host, leaving = world.hosts[0], world.controllers[2]
    result = world.disconnect(leaving, host)
    try:
        assert result.status == "Success", result.stderr
        assert len(result.report["disconnected"]) == len(world.volumes)
        staying = sorted(c.ip for c in world.controllers[:2])
        assert live_paths(host) == {nvme.subsystem_nqn(ARRAY, v): staying for v in world.volumes}
        assert [e["livePaths"] for e in result.report["subsystems"]] == [2] * len(world.volumes)
        everyone = sorted(c.ip for c in world.controllers)
        assert live_paths(world.hosts[1]) == {nvme.subsystem_nqn(ARRAY, v): everyone for v in world.volumes}
        disconnects = [c for c in calls(host.root) if c[0] == "disconnect"]
        assert disconnects
        assert all(c[1] == "-d" for c in disconnects), "only controller devices are disconnected"
    finally:
        world.connect_all()


def test_disconnect_path_refuses_the_last_path_unless_allowed(configured: World):
    world = configured
    world.connect_all()
    host = world.hosts[0]
    try:
        for controller in world.controllers[1:]:
            assert world.disconnect(controller, host).status == "Success"
        last = world.controllers[0]
        # the last path: refused, nothing changed
        refused = world.disconnect(last, host)
        assert refused.status == "Failed"
        assert "would leave no live path" in refused.stderr
        assert "AllowLastPath" in refused.report["error"]
        assert live_paths(host) == {nvme.subsystem_nqn(ARRAY, v): [last.ip] for v in world.volumes}
        # allowed: gone; and again: nothing to do, success
        allowed = world.disconnect(last, host, AllowLastPath="true")
        assert allowed.status == "Success", allowed.stderr
        assert allowed.report["livePaths"] == 0
        assert live_paths(host) == {}
        again = world.disconnect(last, host, AllowLastPath="true")
        assert again.status == "Success"
        assert again.report["disconnected"] == []
        assert all(c[:2] != ["disconnect", "-n"] for h in world.hosts for c in calls(h.root))
    finally:
        world.connect_all()


def test_connect_path_fails_naming_a_subsystem_the_controller_does_not_export(configured: World):
    world = configured
    missing = nvme.subsystem_nqn(ARRAY, world.loose_volume)
    (result,) = world.run(
        "connect-path",
        [world.hosts[0]],
        [
            {
                "ArrayId": ARRAY,
                "Volumes": ",".join([*world.volumes, world.loose_volume]),
                "Address": world.controllers[0].ip,
                "HostNqn": world.host_nqns[0],
                "NvmeCommand": FAKE_NVME,
                "SysfsRoot": SYSFS,
                "NvmeConfig": NVME_CONFIG,
                "WaitSeconds": "2",
            }
        ],
    )
    assert result.status == "Failed"
    assert result.report["missing"] == [missing]
    assert missing in result.stderr
