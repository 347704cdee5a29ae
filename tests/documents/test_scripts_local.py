"""The rendered documents run by bash on sandbox directories (no local cloud): the names they
derive are vsa_core.nvme's, they respect the kernel's configfs rules, and the fakes behave as the
kernel and nvme-cli do where the documents depend on it."""

import base64
import json
import os
import re
import signal
import subprocess
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.documents.conftest import (
    CONFIGFS,
    DEVICES,
    FAKE_DMESG,
    FAKE_MODPROBE,
    FAKE_NVME,
    NVME_CONFIG,
    SYSFS,
    LocalNode,
    Result,
    calls,
    fence_watches,
    tree,
)
from tests.documents_tool import documents
from vsa_core import nvme
from vsa_core.naming import ARRAY_ID_PATTERN

ARRAY = "demo"
VOLUMES = ["vol-0123456789abcdef0", "vol-0fedcba9876543210"]
HOST = "nqn.2014-08.org.nvmexpress:uuid:0b9a4c7e-2f1d-8a3b-9c4d-5e6f7a8b9c0d"
OTHER_HOST = "nqn.2014-08.org.nvmexpress:uuid:7c6b5a49-3827-8165-a4b3-c2d1e0f9a8b7"

Nodes = Callable[[str], LocalNode]


def configure(target: LocalNode, address: str, **params: str):
    given = {
        "ArrayId": ARRAY,
        "Volumes": ",".join(VOLUMES),
        "Slot": "0",
        "HostNqns": HOST,
        "ListenAddress": address,
        "ConfigfsRoot": CONFIGFS,
        "DeviceDir": DEVICES,
        "ModprobeCommand": FAKE_MODPROBE,
        **params,
    }
    return target.run("configure-target", **given)


def connect(host: LocalNode, address: str, **params: str):
    given = {
        "ArrayId": ARRAY,
        "Volumes": ",".join(VOLUMES),
        "Address": address,
        "HostNqn": HOST,
        "NvmeCommand": FAKE_NVME,
        "SysfsRoot": SYSFS,
        "NvmeConfig": NVME_CONFIG,
        "WaitSeconds": "2",
        **params,
    }
    return host.run("connect-path", **given)


def fake(node: LocalNode, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A fake run directly on a node, as a document would run it."""
    return subprocess.run(
        [tool, *args],
        cwd=node.root,
        env={"VSA_NODE_ROOT": str(node.root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


def writes(stderr: str) -> list[tuple[str, str]]:
    """The attribute writes a configure-target run logged, in order: (path, value)."""
    return re.findall(r"^configure-target: set (\S+) = (.*)$", stderr, flags=re.MULTILINE)


# --- derived names --------------------------------------------------------------------------
ids = st.tuples(
    st.from_regex(ARRAY_ID_PATTERN, fullmatch=True),
    st.from_regex(r"vol-[0-9a-f]{8,17}", fullmatch=True),
    st.integers(min_value=0, max_value=15),
    st.from_regex(r"i-[0-9a-f]{8,17}", fullmatch=True),
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases=st.lists(ids, min_size=1, max_size=12))
def test_the_shell_derives_exactly_the_names_of_nvme_py(cases: list[tuple[str, str, int, str]]):
    # Given arrays, volumes, slots and instances (the longest and shortest ids included below)
    cases = [
        *cases,
        ("a" * 32, "vol-" + "f" * 17, 15, "i-" + "0" * 17),
        ("abc", "vol-00000000", 0, "i-00000000"),
    ]
    # When the documents' shared library derives every name in one bash run
    program = ["DOCUMENT=test", *documents.expand("# vsa:include lib/common.sh").splitlines()]
    for array_id, volume_id, slot, instance_id in cases:
        program.append(
            "printf '%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s\\n' "
            f'"$(subsystem_nqn {array_id} {volume_id})" "$(subsystem_prefix {array_id})" '
            f'"$(namespace_uuid {volume_id})" "$(namespace_nguid {volume_id})" '
            f'"$(serial {array_id})" "$(model {array_id})" "$(cntlid_min {slot})" "$(cntlid_max {slot})" '
            f'"$(port_id 4420)" "$(device_name {volume_id})" "$(default_host_nqn {instance_id})" '
            f'"$(host_id "$(default_host_nqn {instance_id})")"'
        )
    done = subprocess.run(["bash", "-c", "\n".join(program)], capture_output=True, text=True, check=True)
    # Then each value is vsa_core.nvme's
    for line, (array_id, volume_id, slot, instance_id) in zip(done.stdout.splitlines(), cases, strict=True):
        host_nqn = nvme.default_host_nqn(instance_id)
        assert line.split("|") == [
            nvme.subsystem_nqn(array_id, volume_id),
            nvme.subsystem_nqn_prefix(array_id),
            nvme.namespace_uuid(volume_id),
            nvme.namespace_nguid(volume_id),
            nvme.serial(array_id),
            nvme.model(array_id),
            *map(str, nvme.cntlid_range(slot)),
            str(nvme.port_id(4420)),
            nvme.device_name(volume_id),
            host_nqn,
            nvme.host_id(host_nqn),
        ]


def test_configure_target_writes_nvme_pys_identities_into_configfs(node: Nodes):
    # Given a controller in slot 15 with the array's volumes attached, for the longest array id
    array_id = "a" * 32
    target = node("c0")
    target.attach(*VOLUMES)
    # When configure-target applies
    result = configure(target, "10.0.0.5", ArrayId=array_id, Slot="15")
    # Then every attribute is vsa_core.nvme's, and the report says so
    assert result.code == 0, result.stderr
    report = result.report
    low, high = nvme.cntlid_range(15)
    assert report["cntlid"] == {"min": low, "max": high}
    assert report["serial"] == nvme.serial(array_id)
    assert report["port"] == {
        "id": 4420,
        "trtype": "tcp",
        "adrfam": "ipv4",
        "traddr": "10.0.0.5",
        "trsvcid": "4420",
    }
    for volume_id, entry in zip(VOLUMES, report["subsystems"], strict=True):
        nqn = nvme.subsystem_nqn(array_id, volume_id)
        device = str(target.root / DEVICES / nvme.device_name(volume_id))
        assert entry == {
            "nqn": nqn,
            "volume": volume_id,
            "device": device,
            "uuid": nvme.namespace_uuid(volume_id),
            "nguid": nvme.namespace_nguid(volume_id),
        }
        subsystem = target.nvmet / "subsystems" / nqn
        assert (subsystem / "attr_serial").read_text() == nvme.serial(array_id) + "\n"
        assert (subsystem / "attr_model").read_text() == nvme.model(array_id) + "\n"
        assert (subsystem / "attr_cntlid_min").read_text() == f"{low}\n"
        assert (subsystem / "attr_cntlid_max").read_text() == f"{high}\n"
        assert (subsystem / "namespaces/1/device_path").read_text() == device + "\n"
        assert (subsystem / "namespaces/1/enable").read_text() == "1\n"
    assert calls(target.root, "modprobe") == [["nvmet"], ["nvmet-tcp"]]


def test_a_slot_change_keeps_cntlid_min_at_most_max_at_every_write(node: Nodes):
    # Given a subsystem configured for slot 0 (1..4000)
    target = node("c0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5", Slot="0").code == 0
    bounds = {"min": 1, "max": 4000}
    for slot in ("15", "0", "7"):
        # When the slot moves up or down
        result = configure(target, "10.0.0.5", Slot=slot)
        assert result.code == 0, result.stderr
        # Then replaying the writes in their order, min never exceeds max (the kernel's EINVAL)
        for path, value in writes(result.stderr):
            if path.startswith(f"subsystems/{nvme.subsystem_nqn(ARRAY, VOLUMES[0])}/attr_cntlid_"):
                bounds[path.rsplit("_", 1)[1]] = int(value)
                assert bounds["min"] <= bounds["max"], f"slot {slot}: {path} = {value}"
        assert (bounds["min"], bounds["max"]) == nvme.cntlid_range(int(slot))


def test_namespace_attributes_change_only_while_it_is_disabled(node: Nodes):
    # Given an enabled namespace whose kernel exposes buffered_io, found set to 1 (cached IO)
    target = node("c0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    namespace = target.nvmet / "subsystems" / nvme.subsystem_nqn(ARRAY, VOLUMES[0]) / "namespaces/1"
    (namespace / "buffered_io").write_text("1\n")
    # When configure-target runs again
    result = configure(target, "10.0.0.5")
    # Then it disabled the namespace, turned buffered IO off, and enabled it again
    assert result.code == 0, result.stderr
    ns_writes = [
        (p.rsplit("/", 1)[1], v)
        for p, v in writes(result.stderr)
        if "/namespaces/1/" in p and VOLUMES[0] in p
    ]
    assert ns_writes == [("enable", "0"), ("buffered_io", "0"), ("enable", "1")]
    # And a device moved to another directory goes through the same disable, change, enable
    moved = target.root / "dev/other"
    moved.mkdir()
    for volume_id in VOLUMES:
        (moved / nvme.device_name(volume_id)).write_text(volume_id)
    result = configure(target, "10.0.0.5", DeviceDir="dev/other")
    assert result.code == 0, result.stderr
    ns_writes = [
        (p.rsplit("/", 1)[1], v)
        for p, v in writes(result.stderr)
        if "/namespaces/1/" in p and VOLUMES[0] in p
    ]
    assert ns_writes == [
        ("enable", "0"),
        ("device_path", str(moved / nvme.device_name(VOLUMES[0]))),
        ("enable", "1"),
    ]


def test_a_new_listen_address_unlinks_every_subsystem_first_and_relinks_them(node: Nodes):
    # Given a controller exporting this array and another one on port 4420
    target = node("c0")
    target.attach(*VOLUMES, "vol-0aaaaaaaaaaaaaaa1")
    assert configure(target, "10.0.0.5").code == 0
    assert configure(target, "10.0.0.5", ArrayId="other", Volumes="vol-0aaaaaaaaaaaaaaa1").code == 0
    port = target.nvmet / "ports/4420"
    before = sorted(p.name for p in (port / "subsystems").iterdir())
    # When this array is applied with a new address
    result = configure(target, "10.0.0.6")
    # Then nothing was linked while the address changed, and every link (the other array's too) is back
    assert result.code == 0, result.stderr
    log = result.stderr.splitlines()
    address_write = next(i for i, line in enumerate(log) if "addr_traddr = 10.0.0.6" in line)
    unlinks = [i for i, line in enumerate(log) if "unlinked ports/4420/subsystems/" in line]
    relinks = [
        i for i, line in enumerate(log) if "linked ports/4420/subsystems/" in line and "unlinked" not in line
    ]
    assert len(unlinks) == len(before) == 3
    assert max(unlinks) < address_write < min(relinks)
    assert sorted(p.name for p in (port / "subsystems").iterdir()) == before
    assert (port / "addr_traddr").read_text() == "10.0.0.6\n"


def test_allowed_hosts_and_allow_any_host_never_coexist(node: Nodes):
    target = node("c0")
    target.attach(*VOLUMES)
    subsystem = target.nvmet / "subsystems" / nvme.subsystem_nqn(ARRAY, VOLUMES[0])
    assert configure(target, "10.0.0.5", HostNqns=f"{HOST},{OTHER_HOST}").code == 0
    assert sorted(p.name for p in (subsystem / "allowed_hosts").iterdir()) == sorted([HOST, OTHER_HOST])
    # a host no longer listed loses its link, and its host entry once no subsystem uses it
    assert configure(target, "10.0.0.5", HostNqns=HOST).code == 0
    assert [p.name for p in (subsystem / "allowed_hosts").iterdir()] == [HOST]
    assert sorted(p.name for p in (target.nvmet / "hosts").iterdir()) == [HOST]
    # any host: the links go before attr_allow_any_host is set (the kernel refuses it otherwise)
    result = configure(target, "10.0.0.5", AllowAnyHost="true")
    log = result.stderr.splitlines()
    assert result.code == 0, result.stderr
    unlink = next(i for i, line in enumerate(log) if "unlinked" in line and "allowed_hosts" in line)
    allow = next(i for i, line in enumerate(log) if "attr_allow_any_host = 1" in line)
    assert unlink < allow
    assert list((subsystem / "allowed_hosts").iterdir()) == []
    assert list((target.nvmet / "hosts").iterdir()) == []
    assert result.report["allowAnyHost"] is True
    assert result.report["hosts"] == []
    # and back: attr_allow_any_host is 0 before a host is linked
    result = configure(target, "10.0.0.5")
    log = result.stderr.splitlines()
    deny = next(i for i, line in enumerate(log) if "attr_allow_any_host = 0" in line)
    link = next(i for i, line in enumerate(log) if "linked" in line and "allowed_hosts" in line)
    assert deny < link


def test_a_new_port_takes_the_arrays_subsystems_and_the_old_port_goes(node: Nodes):
    target = node("c0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    result = configure(target, "10.0.0.5", Port="4421")
    assert result.code == 0, result.stderr
    assert not (target.nvmet / "ports/4420").exists()
    assert len(list((target.nvmet / "ports/4421/subsystems").iterdir())) == 2
    assert result.report["port"]["id"] == 4421


def test_a_missing_device_fails_naming_it_and_changes_nothing(node: Nodes):
    target = node("c0")
    target.attach(VOLUMES[0])  # the second volume is not attached
    result = configure(target, "10.0.0.5")
    assert result.code == 1
    assert VOLUMES[1] in result.stderr
    assert "attach the volume" in result.stderr
    assert result.report["error"]
    assert tree(target.root / CONFIGFS) == {}  # not even the modules were loaded


def test_teardown_leaves_other_arrays_and_a_shared_port(node: Nodes):
    target = node("c0")
    target.attach(*VOLUMES, "vol-0aaaaaaaaaaaaaaa1")
    assert configure(target, "10.0.0.5").code == 0
    assert (
        configure(
            target, "10.0.0.5", ArrayId="other", Volumes="vol-0aaaaaaaaaaaaaaa1", HostNqns=OTHER_HOST
        ).code
        == 0
    )
    result = configure(target, "10.0.0.5", Mode="teardown")
    assert result.code == 0, result.stderr
    assert sorted(result.report["removed"]) == sorted(nvme.subsystem_nqn(ARRAY, v) for v in VOLUMES)
    other = nvme.subsystem_nqn("other", "vol-0aaaaaaaaaaaaaaa1")
    assert [p.name for p in (target.nvmet / "subsystems").iterdir()] == [other]
    assert [p.name for p in (target.nvmet / "ports/4420/subsystems").iterdir()] == [other]
    assert [p.name for p in (target.nvmet / "hosts").iterdir()] == [OTHER_HOST]
    # the last array's teardown takes the port too; a second teardown has nothing to do
    assert configure(target, "10.0.0.5", ArrayId="other", Mode="teardown").code == 0
    assert list((target.nvmet / "ports").iterdir()) == []
    again = configure(target, "10.0.0.5", ArrayId="other", Mode="teardown")
    assert again.code == 0
    assert again.report["changes"] == 0


# --- the fakes -------------------------------------------------------------------------------
def test_a_second_path_from_an_overlapping_cntlid_range_is_rejected_as_a_duplicate(node: Nodes):
    # Given two controllers configured with the same slot (so the same controller ids)
    first, second, host = node("c0"), node("c1"), node("h0")
    for target, address in ((first, "10.0.0.5"), (second, "10.0.0.6")):
        target.attach(*VOLUMES)
        assert configure(target, address, Slot="3").code == 0
    assert connect(host, "10.0.0.5").code == 0
    # When the host connects to the second one / Then the kernel's duplicate check refuses it
    result = connect(host, "10.0.0.6")
    assert result.code == 1
    assert "Duplicate cntlid 12001" in result.stderr
    assert result.report["missing"] == [nvme.subsystem_nqn(ARRAY, v) for v in VOLUMES]
    # And with the slot fixed the path comes up
    assert configure(second, "10.0.0.6", Slot="4").code == 0
    assert connect(host, "10.0.0.6").code == 0


def test_a_path_is_live_only_while_its_target_exports_it_and_goes_after_ctrl_loss_tmo(node: Nodes):
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    assert connect(host, "10.0.0.5", CtrlLossTmo="1", ReconnectDelay="1").code == 0
    # the target stops exporting: the paths reconnect ("connecting"), then are deleted
    assert configure(target, "10.0.0.5", Mode="teardown").code == 0
    listing = json.loads(fake(host, FAKE_NVME, "list-subsys", "-o", "json").stdout)
    states = [p["State"] for h in listing for s in h["Subsystems"] for p in s["Paths"]]
    assert states == ["connecting", "connecting"]
    time.sleep(2.2)
    result = host.run(
        "disconnect-path", ArrayId=ARRAY, Volumes=",".join(VOLUMES), Address="10.0.0.5", NvmeCommand=FAKE_NVME
    )
    assert result.code == 0, result.stderr
    assert result.report["disconnected"] == []  # the kernel gave up on them already
    assert result.report["livePaths"] == 0


def fake_controllers(host: LocalNode) -> dict[str, dict[str, object]]:
    """The fake kernel's controllers of the host (what each got at connect)."""
    state: dict[str, dict[str, dict[str, object]]] = json.loads(
        (host.root / ".fakes/nvme-state.json").read_text()
    )
    return state["controllers"]


def test_connect_keeps_the_failover_settings_in_nvme_clis_config_across_a_reboot(node: Nodes):
    # Given a host whose nvme-cli config already has another host NQN's entry and another
    # array's subsystem on the same address (an operator's, or another array's connect-path)
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    config = host.root / NVME_CONFIG
    config.parent.mkdir(parents=True)
    foreign_port = {"transport": "tcp", "traddr": "10.0.0.5", "trsvcid": "4420", "keep_alive_tmo": 15}
    foreign = [
        {"hostnqn": OTHER_HOST, "subsystems": [{"nqn": "nqn.x:other", "ports": [foreign_port]}]},
        {"hostnqn": HOST, "subsystems": [{"nqn": "nqn.x:other-array", "ports": [foreign_port]}]},
    ]
    config.write_text(json.dumps(foreign))

    # When connect-path runs with its defaults
    result = connect(host, "10.0.0.5")
    assert result.code == 0, result.stderr
    defaults = {name: spec.get("default") for name, spec in documents.load("connect-path").parameters.items()}
    kato, loss, delay = (int(defaults[k] or 0) for k in ("KeepAliveTmo", "CtrlLossTmo", "ReconnectDelay"))

    # Then nvme connect got them on its command line, and each controller has them
    connects = [argv for argv in calls(host.root) if argv[:1] == ["connect"]]
    assert len(connects) == len(VOLUMES)
    for argv in connects:
        options = dict(zip(argv[1::2], argv[2::2], strict=False))
        assert options["--keep-alive-tmo"] == str(kato)
        assert options["--ctrl-loss-tmo"] == str(loss)
        assert options["--reconnect-delay"] == str(delay)
        assert options["--config"] == str(config)
    assert {(c["keep_alive_tmo"], c["ctrl_loss_tmo"]) for c in fake_controllers(host).values()} == {
        (kato, loss)
    }
    # And nvme-cli's config has them for each subsystem's port, the other entries untouched
    hosts = json.loads(config.read_text())
    assert hosts[0] == foreign[0]
    (ours,) = [h for h in hosts if h["hostnqn"] == HOST]
    assert ours["subsystems"][0] == foreign[1]["subsystems"][0]
    ports = {s["nqn"]: s["ports"] for s in ours["subsystems"][1:]}
    expected = {"transport": "tcp", "traddr": "10.0.0.5", "trsvcid": "4420"}
    expected |= {"keep_alive_tmo": kato, "ctrl_loss_tmo": loss, "reconnect_delay": delay}
    assert ports == {nvme.subsystem_nqn(ARRAY, v): [expected] for v in VOLUMES}
    assert result.report["failover"]["config"] == str(config)

    # When the host reboots (its controllers are gone, the file stays) and anybody connects
    # with nvme-cli and no options (an operator, or a later connect-path with other values)
    (host.root / ".fakes/nvme-state.json").unlink()
    nqn = nvme.subsystem_nqn(ARRAY, VOLUMES[0])
    plain = ["connect", "-t", "tcp", "-a", "10.0.0.5", "-s", "4420", "-n", nqn, "--hostnqn", HOST]
    assert fake(host, FAKE_NVME, *plain).returncode == 0
    # Then the controller gets the keep-alive timeout from the config, not the kernel's 5 s
    (controller,) = fake_controllers(host).values()
    assert controller["keep_alive_tmo"] == kato
    assert controller["reconnect_delay"] == delay


def test_connect_paths_run_side_by_side_on_one_host_keep_every_port_in_the_config(node: Nodes):
    # ReconcileArray's connect phase sends one connect-path per controller to each host at
    # once (and two bootstraps can overlap): the runs update nvme-cli's config side by side.
    # Before the lock, two runs renamed the same config.json.tmp and the second failed.
    addresses = [f"10.0.0.{n}" for n in range(11, 17)]
    for n, address in enumerate(addresses):
        target = node(f"c{n}")
        target.attach(*VOLUMES)
        assert configure(target, address, Slot=str(n)).code == 0
    host = node("h0")
    # (rounds: a race shows only sometimes; a later round finds the paths and rewrites the config)
    for _ in range(4):
        (host.root / NVME_CONFIG).unlink(missing_ok=True)
        with ThreadPoolExecutor(len(addresses)) as pool:
            results = list(pool.map(lambda a: connect(host, a), addresses))
        assert [r.code for r in results] == [0] * len(addresses), [r.stderr for r in results if r.code]
        (ours,) = json.loads((host.root / NVME_CONFIG).read_text())
        ports = {s["nqn"]: sorted(p["traddr"] for p in s["ports"]) for s in ours["subsystems"]}
        assert ports == {nvme.subsystem_nqn(ARRAY, v): addresses for v in VOLUMES}
        assert not list((host.root / NVME_CONFIG).parent.glob(".config.*"))  # no temporary left


def test_fast_io_fail_tmo_reaches_the_controller_through_the_config_only(node: Nodes):
    # nvme-cli 2.3's connect has no fast_io_fail_tmo option: the config is the only way
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    result = connect(host, "10.0.0.5", FastIoFailTmo="5")
    assert result.code == 0, result.stderr
    assert {c["fast_io_fail_tmo"] for c in fake_controllers(host).values()} == {5}
    ports = [
        p
        for h in json.loads((host.root / NVME_CONFIG).read_text())
        for s in h["subsystems"]
        for p in s["ports"]
    ]
    assert {p["fast_io_fail_tmo"] for p in ports} == {5}
    # And back to off (-1), the key leaves the config (the kernel's default, off, applies)
    assert connect(host, "10.0.0.5", FastIoFailTmo="-1").code == 0
    ports = [
        p
        for h in json.loads((host.root / NVME_CONFIG).read_text())
        for s in h["subsystems"]
        for p in s["ports"]
    ]
    assert all("fast_io_fail_tmo" not in p for p in ports)


def test_connect_refuses_failover_settings_the_kernel_would_not_honour(node: Nodes):
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    longer = connect(host, "10.0.0.5", FastIoFailTmo="90", CtrlLossTmo="60")
    assert longer.code == 1
    assert "FastIoFailTmo (90 s) is longer than CtrlLossTmo (60 s)" in longer.report["error"]
    nowhere = connect(host, "10.0.0.5", FastIoFailTmo="5", NvmeConfig="none")
    assert nowhere.code == 1
    assert "FastIoFailTmo needs NvmeConfig" in nowhere.report["error"]
    assert not any(argv[:1] == ["connect"] for argv in calls(host.root))  # nothing was connected
    assert not (host.root / NVME_CONFIG).exists()
    # NvmeConfig=none: connected, nothing kept
    assert connect(host, "10.0.0.5", NvmeConfig="none").code == 0
    assert not (host.root / NVME_CONFIG).exists()


def test_list_subsys_has_nvme_cli_2s_shape(node: Nodes):
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    assert connect(host, "10.0.0.5").code == 0
    (entry,) = json.loads(fake(host, FAKE_NVME, "list-subsys", "-o", "json").stdout)
    assert set(entry) == {"HostNQN", "HostID", "Subsystems"}
    assert entry["HostNQN"] == HOST
    assert entry["HostID"] == nvme.host_id(HOST)
    subsystem = entry["Subsystems"][0]
    assert set(subsystem) == {"Name", "NQN", "IOPolicy", "Paths"}
    assert subsystem["Name"].startswith("nvme-subsys")
    (path,) = subsystem["Paths"]
    assert path == {
        "Name": path["Name"],
        "Transport": "tcp",
        "Address": "traddr=10.0.0.5,trsvcid=4420",
        "State": "live",
    }


def test_connecting_twice_exits_1_already_connected_and_a_stranger_is_refused(node: Nodes):
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    nqn = nvme.subsystem_nqn(ARRAY, VOLUMES[0])
    argv = ["connect", "-t", "tcp", "-a", "10.0.0.5", "-s", "4420", "-n", nqn, "--hostnqn", HOST]
    assert fake(host, FAKE_NVME, *argv).returncode == 0
    again = fake(host, FAKE_NVME, *argv)
    assert again.returncode == 1
    assert "already connected" in again.stderr
    stranger = connect(host, "10.0.0.5", HostNqn=OTHER_HOST)
    assert stranger.code == 1
    assert "Connect Invalid Host" in stranger.stderr
    assert "no live path to 10.0.0.5:4420" in stranger.report["error"]


def test_connect_sets_each_subsystems_multipath_io_policy_to_round_robin(node: Nodes):
    # The kernel's default policy (numa) sends all IO down one path (tests/dataplane saw it):
    # connect-path sets round-robin on every subsystem it connects, writing only a change.
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    first = connect(host, "10.0.0.5")
    assert first.code == 0, first.stderr
    policies = sorted(host.root.glob(f"{SYSFS}/class/nvme-subsystem/*/iopolicy"))
    assert len(policies) == len(VOLUMES)
    assert {p.read_text().strip() for p in policies} == {"round-robin"}
    assert first.report["ioPolicy"] == "round-robin"
    assert "set the IO policy" in first.stderr
    again = connect(host, "10.0.0.5")
    assert again.code == 0
    assert "set the IO policy" not in again.stderr
    numa = connect(host, "10.0.0.5", IoPolicy="numa")
    assert {p.read_text().strip() for p in policies} == {"numa"}
    assert numa.report["ioPolicy"] == "numa"


def test_connect_fails_when_the_io_policy_cannot_be_set(node: Nodes):
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    result = connect(host, "10.0.0.5", SysfsRoot="no/sysfs/here")
    assert result.code == 1
    assert "cannot set the IO policy round-robin" in result.report["error"]
    assert result.report["livePaths"] == len(VOLUMES)  # the paths are there; the policy is not


def test_fake_modprobe_loads_nvmet_into_the_node_and_refuses_unknown_modules(node: Nodes):
    target = node("c0")
    assert fake(target, FAKE_MODPROBE, "nvmet-tcp").returncode == 0
    assert sorted(p.name for p in target.nvmet.iterdir()) == ["hosts", "ports", "subsystems"]
    assert fake(target, FAKE_MODPROBE, "nvmet-tcp").returncode == 0  # loaded already: nothing to do
    (target.nvmet / "subsystems" / "x").mkdir()
    assert "in use" in fake(target, FAKE_MODPROBE, "-r", "nvmet").stderr
    missing = fake(target, FAKE_MODPROBE, "no-such-module")
    assert missing.returncode == 1
    assert "not found" in missing.stderr


# --- observed state: what each node reports it sees ------------------------------------------


def test_configure_target_reports_what_configfs_exports_read_back(node: Nodes):
    # Given a controller with the array's volumes attached (16 GiB devices)
    target = node("c0")
    target.attach(*VOLUMES, size_gib=16)
    # When configure-target applies for two hosts
    result = configure(target, "10.0.0.5", HostNqns=f"{HOST},{OTHER_HOST}")
    # Then the report's exports are configfs as the test reads it, sizes from the devices
    assert result.code == 0, result.stderr
    expected = []
    for subsystem in sorted((target.nvmet / "subsystems").iterdir()):
        namespace = subsystem / "namespaces/1"
        device = (namespace / "device_path").read_text().strip()
        expected.append(
            {
                "nqn": subsystem.name,
                "volume": subsystem.name.rsplit(":", 1)[1],
                "allowAnyHost": (subsystem / "attr_allow_any_host").read_text().strip() == "1",
                "allowedHosts": sorted(p.name for p in (subsystem / "allowed_hosts").iterdir()),
                "namespaces": [
                    {
                        "nsid": 1,
                        "enabled": (namespace / "enable").read_text().strip() == "1",
                        "device": device,
                        "sizeBytes": Path(device).stat().st_size,
                        "deviceBytes": Path(device).stat().st_size,
                    }
                ],
                "ports": [
                    {"id": port.name, "traddr": "10.0.0.5", "trsvcid": "4420"}
                    for port in (target.nvmet / "ports").iterdir()
                    if (port / "subsystems" / subsystem.name).is_symlink()
                ],
            }
        )
    assert result.report["exports"] == expected
    assert [e["volume"] for e in expected] == sorted(VOLUMES)
    assert {n["sizeBytes"] for e in expected for n in e["namespaces"]} == {16 * 2**30}
    assert all(e["allowedHosts"] == sorted([HOST, OTHER_HOST]) for e in expected)


def test_configure_target_reports_only_its_arrays_exports_and_none_after_teardown(node: Nodes):
    # Given two arrays exported by one controller on one port
    target = node("c0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    assert configure(target, "10.0.0.5", ArrayId="other", Volumes=VOLUMES[0], Slot="1").code == 0
    # When "other" is torn down
    gone = configure(target, "10.0.0.5", ArrayId="other", Mode="teardown")
    # Then its report shows it exports nothing, and "demo" still reports both of its subsystems
    assert gone.code == 0, gone.stderr
    assert gone.report["exports"] == []
    demo = configure(target, "10.0.0.5").report["exports"]
    assert [e["nqn"] for e in demo] == sorted(nvme.subsystem_nqn(ARRAY, v) for v in VOLUMES)


def test_host_reports_each_subsystems_paths_states_io_policy_and_size(node: Nodes):
    # Given two controllers exporting 32 GiB volumes and a host connected through both
    c0, c1, host = node("c0"), node("c1"), node("h0")
    for slot, (target, address) in enumerate(((c0, "10.0.0.5"), (c1, "10.0.0.6"))):
        target.attach(*VOLUMES, size_gib=32)
        assert configure(target, address, Slot=str(slot)).code == 0
    assert connect(host, "10.0.0.5", CtrlLossTmo="600").code == 0
    both = connect(host, "10.0.0.6", CtrlLossTmo="600")
    # Then each subsystem shows a live path through each, the policy set and the head's size
    assert both.code == 0, both.stderr
    for entry in both.report["subsystems"]:
        assert sorted((p["address"], p["state"]) for p in entry["paths"]) == [
            ("10.0.0.5", "live"),
            ("10.0.0.6", "live"),
        ]
        assert entry["ioPolicy"] == "round-robin"
        assert entry["sizeBytes"] == 32 * 2**30
    # When controller c1 stops exporting (its paths reconnect: "connecting")
    assert configure(c1, "10.0.0.6", Slot="1", Mode="teardown").code == 0
    again = connect(host, "10.0.0.5", CtrlLossTmo="600")
    # Then the host's next report says so, path by path
    assert again.code == 0, again.stderr
    for entry in again.report["subsystems"]:
        assert sorted((p["address"], p["state"]) for p in entry["paths"]) == [
            ("10.0.0.5", "live"),
            ("10.0.0.6", "connecting"),
        ]
        assert entry["livePaths"] == 1
    # and disconnect-path (no sysfs parameter) reports the policy from nvme-cli, the size unknown
    left = host.run(
        "disconnect-path", ArrayId=ARRAY, Volumes=",".join(VOLUMES), Address="10.0.0.6", NvmeCommand=FAKE_NVME
    )
    assert left.code == 0, left.stderr
    assert [(e["ioPolicy"], e["sizeBytes"], e["livePaths"]) for e in left.report["subsystems"]] == [
        ("round-robin", None, 1)
    ] * len(VOLUMES)


def test_configure_target_revalidates_only_the_namespaces_whose_device_grew(node: Nodes):
    # Given two controllers exporting two 8 GiB volumes, and a host connected through both
    c0, c1, host = node("c0"), node("c1"), node("h0")
    targets = ((c0, "10.0.0.5"), (c1, "10.0.0.6"))
    for slot, (target, address) in enumerate(targets):
        target.attach(*VOLUMES, size_gib=8)
        assert configure(target, address, Slot=str(slot)).code == 0
    assert connect(host, "10.0.0.5").code == 0
    assert connect(host, "10.0.0.6").code == 0
    grown, kept = VOLUMES[1], VOLUMES[0]
    namespace = {v: nvme.subsystem_nqn(ARRAY, v) for v in VOLUMES}
    # When EBS grows one volume to 16 GiB (its device on every controller it is attached to)
    for target, _ in targets:
        os.truncate(target.root / DEVICES / nvme.device_name(grown), 16 * 2**30)
    # Then no host sees it before a target announces it
    seen = connect(host, "10.0.0.5").report["subsystems"]
    assert {s["volume"]: s["sizeBytes"] for s in seen} == {kept: 8 * 2**30, grown: 8 * 2**30}
    before = {t.root.name: tree(t.nvmet) for t, _ in targets}
    # When configure-target applies on each controller
    for slot, (target, address) in enumerate(targets):
        result = configure(target, address, Slot=str(slot))
        # Then it writes revalidate_size of the grown volume's namespace only, and nothing else
        assert result.code == 0, result.stderr
        assert writes(result.stderr) == []
        assert result.report["changes"] == 1
        assert (
            f"revalidated subsystems/{namespace[grown]}/namespaces/1 at {16 * 2**30} bytes" in result.stderr
        )
        after = tree(target.nvmet)
        revalidate = f"subsystems/{namespace[grown]}/namespaces/1/revalidate_size"
        assert after.pop(revalidate) == ("file", "1\n")
        assert after == before[target.root.name]
        assert not (target.nvmet / f"subsystems/{namespace[kept]}/namespaces/1/revalidate_size").exists()
        # and its report shows the namespace at the size nvmet re-read
        sizes = {e["volume"]: e["namespaces"][0]["sizeBytes"] for e in result.report["exports"]}
        assert sizes == {kept: 8 * 2**30, grown: 16 * 2**30}
    # When it applies again, nothing is written (the size nvmet read is recorded)
    stamp = (c0.nvmet / f"subsystems/{namespace[grown]}/namespaces/1/revalidate_size").stat().st_mtime_ns
    again = configure(c0, "10.0.0.5", Slot="0")
    assert (again.code, again.report["changes"]) == (0, 0), again.stderr
    assert (
        c0.nvmet / f"subsystems/{namespace[grown]}/namespaces/1/revalidate_size"
    ).stat().st_mtime_ns == stamp
    # Then the host's next report sees the new size, with both paths live all along
    report = connect(host, "10.0.0.6").report["subsystems"]
    assert {s["volume"]: s["sizeBytes"] for s in report} == {kept: 8 * 2**30, grown: 16 * 2**30}
    assert all(sorted(p["state"] for p in s["paths"]) == ["live", "live"] for s in report)


def test_report_paths_reports_what_connect_path_does_and_changes_nothing(node: Nodes):
    # Given a host connected through two controllers, one of which then stops exporting
    c0, c1, host = node("c0"), node("c1"), node("h0")
    for slot, (target, address) in enumerate(((c0, "10.0.0.5"), (c1, "10.0.0.6"))):
        target.attach(*VOLUMES, size_gib=16)
        assert configure(target, address, Slot=str(slot)).code == 0
        assert connect(host, address, CtrlLossTmo="600").code == 0
    assert configure(c1, "10.0.0.6", Slot="1", Mode="teardown").code == 0
    before = calls(host.root)
    state = (host.root / ".fakes/nvme-state.json").read_text()

    # When report-paths runs
    result = host.run(
        "report-paths", ArrayId=ARRAY, Volumes=",".join(VOLUMES), NvmeCommand=FAKE_NVME, SysfsRoot=SYSFS
    )

    # Then it reports each subsystem's paths as they are, its policy and size, in the hosts'
    # report shape (the one vsa_core.arrays.dataplane reads)
    assert result.code == 0, result.stderr
    assert (result.report["document"], result.report["arrayId"], result.report["livePaths"]) == (
        "report-paths",
        ARRAY,
        len(VOLUMES),
    )
    assert [e["volume"] for e in result.report["subsystems"]] == VOLUMES
    for entry in result.report["subsystems"]:
        assert sorted((p["address"], p["state"]) for p in entry["paths"]) == [
            ("10.0.0.5", "live"),
            ("10.0.0.6", "connecting"),
        ]
        assert (entry["livePaths"], entry["ioPolicy"], entry["sizeBytes"]) == (1, "round-robin", 16 * 2**30)
    # And it only listed: no connect, no disconnect, the host's controllers as they were
    assert [argv[0] for argv in calls(host.root)[len(before) :]] == ["list-subsys"]
    assert json.loads((host.root / ".fakes/nvme-state.json").read_text())["controllers"].keys() == (
        json.loads(state)["controllers"].keys()
    )


def test_report_paths_says_what_is_mounted_from_each_subsystem_and_null_when_it_cannot_read(node: Nodes):
    # Given a host with one path to each volume, the first mounted whole, a partition of the
    # second mounted through device-mapper (LVM's shape in sysfs), an unrelated device mounted
    c0, host = node("c0"), node("h0")
    c0.attach(*VOLUMES, size_gib=8)
    assert configure(c0, "10.0.0.5").code == 0
    assert connect(host, "10.0.0.5").code == 0
    subsystems = sorted((host.root / SYSFS / "class/nvme-subsystem").iterdir())
    heads = {}
    for folder in subsystems:
        nqn = (folder / "subsysnqn").read_text().strip()
        (head,) = [h.name for h in folder.iterdir() if re.fullmatch(r"nvme\d+n\d+", h.name)]
        heads[nqn.rsplit(":", 1)[1]] = (folder, head)
    first, second = heads[VOLUMES[0]][1], heads[VOLUMES[1]]
    partition = second[0] / second[1] / f"{second[1]}p1"
    (partition / "holders/dm-3/dm").mkdir(parents=True)
    (partition / "holders/dm-3/dm/name").write_text("vg0-logs\n")
    mounts = host.root / "proc/self/mounts"
    mounts.parent.mkdir(parents=True)
    mounts.write_text(
        f"/dev/{first} /data xfs rw,relatime 0 0\n"
        "/dev/mapper/vg0-logs /var/log/app ext4 rw 0 0\n"
        "/dev/nvme9n1p1 / ext4 rw 0 0\n"
        "proc /proc proc rw 0 0\n"
    )
    params = {"ArrayId": ARRAY, "Volumes": ",".join(VOLUMES), "NvmeCommand": FAKE_NVME, "SysfsRoot": SYSFS}

    # When report-paths runs with the host's mount table
    result = host.run("report-paths", **params, MountsFile="proc/self/mounts")

    # Then each subsystem lists what is mounted from it, and only that
    assert result.code == 0, result.stderr
    shown = {s["volume"]: s["mounts"] for s in result.report["subsystems"]}
    assert shown == {
        VOLUMES[0]: [{"device": f"/dev/{first}", "mountpoint": "/data", "fstype": "xfs"}],
        VOLUMES[1]: [{"device": "/dev/mapper/vg0-logs", "mountpoint": "/var/log/app", "fstype": "ext4"}],
    }
    # When nothing is mounted from them any more, the lists are empty
    mounts.write_text("proc /proc proc rw 0 0\n")
    result = host.run("report-paths", **params, MountsFile="proc/self/mounts")
    assert [s["mounts"] for s in result.report["subsystems"]] == [[], []]
    # When the mount table cannot be read, the report says it cannot tell (null), never "none"
    result = host.run("report-paths", **params, MountsFile="proc/missing/mounts")
    assert result.code == 0, result.stderr
    assert [s["mounts"] for s in result.report["subsystems"]] == [None, None]
    # and the documents that change paths report no mounts at all (they do not read the table)
    assert all("mounts" not in s for s in connect(host, "10.0.0.5").report["subsystems"])


def _configfs_tree(root: Path) -> dict[str, str]:
    """Every file and link under configfs with its content or target: a whole-tree snapshot."""
    return {
        str(p.relative_to(root)): os.readlink(p) if p.is_symlink() else (p.read_text() if p.is_file() else "")
        for p in sorted(root.rglob("*"))
    }


def test_report_exports_reports_configure_targets_exports_and_changes_nothing(node: Nodes):
    # Given a controller that exports the array, then loses one subsystem's port link behind the
    # control plane's back (what a wedged or hand-edited nvmet looks like)
    target = node("c0")
    target.attach(*VOLUMES, size_gib=16)
    configured = configure(target, "10.0.0.5")
    assert configured.code == 0, configured.stderr
    gone = nvme.subsystem_nqn(ARRAY, VOLUMES[1])
    for link in (target.nvmet / "ports").glob(f"*/subsystems/{gone}"):
        link.unlink()
    before = _configfs_tree(target.nvmet)

    # When report-exports runs
    result = target.run("report-exports", ArrayId=ARRAY, ConfigfsRoot=CONFIGFS)

    # Then it reports the exports as configure-target's report shape, the unlinked subsystem
    # without a port, and writes nothing
    assert result.code == 0, result.stderr
    assert result.report["document"] == "report-exports"
    by_volume = {e["volume"]: e for e in result.report["exports"]}
    first = {e["volume"]: e for e in configured.report["exports"]}[VOLUMES[0]]
    assert by_volume[VOLUMES[0]] == first
    assert by_volume[VOLUMES[1]]["ports"] == []
    assert by_volume[VOLUMES[1]]["namespaces"][0]["sizeBytes"] == 16 * 2**30
    assert _configfs_tree(target.nvmet) == before


def _timed_calls(root: Path) -> list[tuple[str, str, float]]:
    """Every fake call on a node, in order: (tool, first argument, when it ended)."""
    log = root / ".fakes" / "calls.jsonl"
    entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [(e["tool"], (e["argv"] or [""])[0], e["time"]) for e in entries]


def _epoch(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def test_every_node_report_says_when_it_read_the_node(node: Nodes):
    # Two runs at once on a node can end in the other order than they read it (a run lists the
    # paths, then writes its report while the other connects, lists and ends), so
    # each report carries observedAt, taken as its last reading of the node began, and the status
    # takes the report that read last (vsa_core.arrays.aws_reports)
    c0, c1, host = node("c0"), node("c1"), node("h0")
    for target in (c0, c1):
        target.attach(*VOLUMES)
    started = time.time()
    configured = configure(c0, "10.0.0.5")
    assert configured.code == 0, configured.stderr
    # configure-target read configfs back after loading nvmet (the fake modprobe), before it ended
    loaded = max(t for tool, _, t in _timed_calls(c0.root) if tool == "modprobe")
    assert started <= loaded <= _epoch(configured.report["observedAt"]) <= time.time()
    assert configure(c1, "10.0.0.6", Slot="1").code == 0
    before = time.time()
    exported = c0.run("report-exports", ArrayId=ARRAY, ConfigfsRoot=CONFIGFS)
    assert before <= _epoch(exported.report["observedAt"]) <= time.time()
    base = {"ArrayId": ARRAY, "Volumes": ",".join(VOLUMES), "NvmeCommand": FAKE_NVME}
    runs = (
        lambda: connect(host, "10.0.0.5"),
        lambda: connect(host, "10.0.0.6"),
        lambda: host.run("report-paths", **base, SysfsRoot=SYSFS),
        lambda: host.run("disconnect-path", **base, Address="10.0.0.6"),
    )
    for run in runs:
        seen = len(_timed_calls(host.root))
        result = run()
        assert result.code == 0, result.stderr
        # a host's report: as the last listing began, after every nvme call before it
        mine = _timed_calls(host.root)[seen:]
        assert mine[-1][:2] == ("nvme", "list-subsys"), mine
        earlier = mine[-2][2] if len(mine) > 1 else before
        observed = _epoch(result.report["observedAt"])
        assert earlier <= observed <= mine[-1][2], (result.report["document"], mine, observed)
        before = mine[-1][2]


# --- DH-HMAC-CHAP (issue #20) ------------------------------------------------------------------
FAKE_AWS = str(Path(FAKE_NVME).with_name("aws"))
ARRAY_SECRET = "vsa/demo/dhchap"
HOST_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:vsa/demo/host-AbCdEf"


def dhchap_key() -> str:
    """A DH-HMAC-CHAP secret as nvme gen-dhchap-key prints one: DHHC-1:00: (no transformation),
    then base64 of the 32-byte key followed by its CRC-32 (little-endian), then ':'."""
    key = os.urandom(32)
    return "DHHC-1:00:" + base64.b64encode(key + zlib.crc32(key).to_bytes(4, "little")).decode() + ":"


def put_secret(node: LocalNode, secret_id: str, value: object) -> None:
    """What Secrets Manager holds under ``secret_id`` for this node (the fake aws's store)."""
    store = node.root / ".fakes/secrets"
    store.mkdir(parents=True, exist_ok=True)
    text = value if isinstance(value, str) else json.dumps(value)
    (store / secret_id.replace("/", "#").replace(":", "%")).write_text(text)


def keyed(**params: str) -> dict[str, str]:
    return {"Authentication": "dh-hmac-chap", "KeysSecretId": ARRAY_SECRET, "AwsCommand": FAKE_AWS, **params}


def shows_no_key(result: Result, *keys: str) -> None:
    for key in keys:
        assert key not in result.stdout + result.stderr
    assert "DHHC-1:0" not in result.stdout + result.stderr


def test_configure_target_writes_each_hosts_key_and_the_controller_key_never_showing_one(node: Nodes):
    # Given the array's keys in Secrets Manager: the controller key and one key per host
    target = node("c0")
    target.attach(*VOLUMES)
    keys = {"controller": dhchap_key(), HOST: dhchap_key(), OTHER_HOST: dhchap_key()}
    put_secret(
        target,
        ARRAY_SECRET,
        {"controllerKey": keys["controller"], "hosts": {HOST: keys[HOST], OTHER_HOST: keys[OTHER_HOST]}},
    )
    # When configure-target applies with dh-hmac-chap for both hosts
    result = configure(
        target, "10.0.0.5", **keyed(HostNqns=f"{HOST},{OTHER_HOST}", DhchapHash="hmac(sha384)")
    )
    # Then nvmet's entry of each host holds its key, the controller key, the hash and the group
    assert result.code == 0, result.stderr
    for host in (HOST, OTHER_HOST):
        entry = target.nvmet / "hosts" / host
        assert (entry / "dhchap_key").read_text() == keys[host] + "\n"
        assert (entry / "dhchap_ctrl_key").read_text() == keys["controller"] + "\n"
        assert (entry / "dhchap_hash").read_text() == "hmac(sha384)\n"
        assert (entry / "dhchap_dhgroup").read_text() == "ffdhe2048\n"
    assert result.report["authentication"] == {
        "method": "dh-hmac-chap",
        "keysSecretId": ARRAY_SECRET,
        "hash": "hmac(sha384)",
        "dhgroup": "ffdhe2048",
        "bidirectional": True,
        "keyedHosts": [HOST, OTHER_HOST],
    }
    # and no key was shown, nor passed to any command (the AWS CLI got the secret's id only)
    shows_no_key(result, *keys.values())
    assert calls(target.root, "aws") == [
        [
            "secretsmanager",
            "get-secret-value",
            "--secret-id",
            ARRAY_SECRET,
            "--query",
            "SecretString",
            "--output",
            "text",
        ]
    ]
    # When it runs again: nothing changes
    again = configure(target, "10.0.0.5", **keyed(HostNqns=f"{HOST},{OTHER_HOST}", DhchapHash="hmac(sha384)"))
    assert again.code == 0
    assert again.report["changes"] == 0
    # When one host's key changes in the secret (a rotation)
    keys[OTHER_HOST] = dhchap_key()
    put_secret(
        target,
        ARRAY_SECRET,
        {"controllerKey": keys["controller"], "hosts": {HOST: keys[HOST], OTHER_HOST: keys[OTHER_HOST]}},
    )
    rotated = configure(
        target, "10.0.0.5", **keyed(HostNqns=f"{HOST},{OTHER_HOST}", DhchapHash="hmac(sha384)")
    )
    # Then exactly that key is written, and the log says so without showing it
    assert rotated.code == 0
    assert rotated.report["changes"] == 1
    assert (target.nvmet / "hosts" / OTHER_HOST / "dhchap_key").read_text() == keys[OTHER_HOST] + "\n"
    assert f"set hosts/{OTHER_HOST}/dhchap_key (the host's key, a new key)" in rotated.stderr
    shows_no_key(rotated, *keys.values())


def test_configure_target_without_authentication_reads_no_secret_and_writes_no_key(node: Nodes):
    target = node("c0")
    target.attach(*VOLUMES)
    result = configure(target, "10.0.0.5", AwsCommand=FAKE_AWS)
    assert result.code == 0
    assert result.report["authentication"] == {"method": "none"}
    assert calls(target.root, "aws") == []
    assert not list(target.nvmet.glob("hosts/*/dhchap_*"))


def test_configure_target_fails_naming_what_is_missing_never_a_key_and_changes_nothing(node: Nodes):
    target = node("c0")
    target.attach(*VOLUMES)
    good = dhchap_key()
    cases = [
        ("absent", None, ["cannot read the secret vsa/demo/absent", "ResourceNotFoundException"]),
        ("denied", None, ["cannot read the secret vsa/demo/denied", "AccessDeniedException"]),
        ("not-json", "controllerKey=" + good, ["the secret vsa/demo/not-json is not JSON"]),
        ("a-list", [good], ["the secret vsa/demo/a-list is not a JSON object"]),
        ("no-host", {"controllerKey": good, "hosts": {OTHER_HOST: good}}, [f"no key for hosts/{HOST}"]),
        ("no-controller", {"hosts": {HOST: good}}, ["no key for controllerKey"]),
        (
            "bad-key",
            {"controllerKey": good, "hosts": {HOST: good[:-10] + ":"}},
            ["not a DHHC-1 key", f"for hosts/{HOST}"],
        ),
    ]
    for name, value, said in cases:
        if value is not None:
            put_secret(target, f"vsa/demo/{name}", value)
        if name == "denied":
            put_secret(target, "vsa/demo/denied", {"controllerKey": good})
            put_secret(target, "vsa/demo/denied.denied", "")
        # When configure-target applies with that secret
        result = configure(target, "10.0.0.5", **keyed(KeysSecretId=f"vsa/demo/{name}"))
        # Then it fails naming what is wrong, shows no key, and nvmet was not even loaded
        assert result.code == 1, name
        for words in said:
            assert words in result.report["error"], (name, result.report["error"])
        shows_no_key(result, good)
        assert not target.nvmet.exists(), name
    # Without a secret id, or with any host allowed (nvmet would hold no host entry to key)
    assert "needs KeysSecretId" in configure(target, "10.0.0.5", **keyed(KeysSecretId="none")).report["error"]
    anyone = configure(target, "10.0.0.5", **keyed(AllowAnyHost="true"))
    assert "needs the hosts listed" in anyone.report["error"]


def test_connect_path_authenticates_both_ways_through_the_config_never_the_command_line(node: Nodes):
    # Given a controller keyed for the host, and the host's own secret (its key, the controller key)
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    host_key, controller_key = dhchap_key(), dhchap_key()
    put_secret(target, ARRAY_SECRET, {"controllerKey": controller_key, "hosts": {HOST: host_key}})
    assert configure(target, "10.0.0.5", **keyed()).code == 0
    put_secret(host, HOST_SECRET, {"hostKey": host_key, "controllerKey": controller_key})
    # When connect-path runs with dh-hmac-chap
    result = connect(host, "10.0.0.5", **keyed(KeysSecretId=HOST_SECRET))
    # Then every subsystem is connected, authenticated (the fake kernel checked both keys)
    assert result.code == 0, result.stderr
    assert result.report["authentication"] == "dh-hmac-chap"
    assert result.report["livePaths"] == len(VOLUMES)
    assert {c["authenticated"] for c in fake_controllers(host).values()} == {True}
    # and the keys went through nvme-cli's config, root-only; never on a command line, never shown
    config = host.root / NVME_CONFIG
    assert config.stat().st_mode & 0o777 == 0o600
    ports = [p for h in json.loads(config.read_text()) for s in h["subsystems"] for p in s["ports"]]
    assert {(p["dhchap_key"], p["dhchap_ctrl_key"]) for p in ports} == {(host_key, controller_key)}
    assert not any(key in json.dumps(calls(host.root)) for key in (host_key, controller_key))
    shows_no_key(result, host_key, controller_key)
    # When the host connects again without authentication (its paths gone: a reboot)
    (host.root / ".fakes/nvme-state.json").unlink()
    plain = connect(host, "10.0.0.5")
    # Then it is refused (nvmet holds a key for it), the keys left the config, which is 0644 again
    assert plain.code == 1
    assert "Required key not available" in plain.report["error"]
    ports = [p for h in json.loads(config.read_text()) for s in h["subsystems"] for p in s["ports"]]
    assert not any("dhchap_key" in p or "dhchap_ctrl_key" in p for p in ports)
    assert config.stat().st_mode & 0o777 == 0o644


def test_connect_path_refused_with_a_wrong_host_key_or_a_controller_with_a_wrong_controller_key(node: Nodes):
    target, host = node("c0"), node("h0")
    target.attach(*VOLUMES)
    host_key, controller_key, other = dhchap_key(), dhchap_key(), dhchap_key()
    put_secret(target, ARRAY_SECRET, {"controllerKey": controller_key, "hosts": {HOST: host_key}})
    assert configure(target, "10.0.0.5", **keyed()).code == 0
    # When the host presents another key
    put_secret(host, HOST_SECRET, {"hostKey": other, "controllerKey": controller_key})
    impostor = connect(host, "10.0.0.5", **keyed(KeysSecretId=HOST_SECRET))
    # Then the controller refuses it
    assert impostor.code == 1
    assert "Key was rejected by service" in impostor.report["error"]
    assert impostor.report["livePaths"] == 0
    shows_no_key(impostor, host_key, controller_key, other)
    # When the host expects another controller key than the controller's (bidirectional)
    put_secret(host, HOST_SECRET, {"hostKey": host_key, "controllerKey": other})
    rogue = connect(host, "10.0.0.5", **keyed(KeysSecretId=HOST_SECRET))
    # Then the host refuses the controller
    assert rogue.code == 1
    assert "Key was rejected by service" in rogue.report["error"]
    assert {c["traddr"] for c in fake_controllers(host).values()} == set()  # no path either way
    shows_no_key(rogue, host_key, controller_key, other)
    # And a host secret without the controller key, or none at all, fails before connecting
    put_secret(host, HOST_SECRET, {"hostKey": host_key})
    partial = connect(host, "10.0.0.5", **keyed(KeysSecretId=HOST_SECRET))
    assert "no key for controllerKey" in partial.report["error"]
    assert "needs NvmeConfig" in connect(host, "10.0.0.5", **keyed(NvmeConfig="none")).report["error"]
    assert "needs KeysSecretId" in connect(host, "10.0.0.5", **keyed(KeysSecretId="none")).report["error"]
    refused = [argv for argv in calls(host.root) if argv[:1] == ["connect"]]
    assert len(refused) == 2 * len(VOLUMES)  # the impostor's and the rogue's, nothing since


# --- key rotation without an IO stop (issue #20): per-address keys, existing paths converge ------
C0, C1 = "10.0.0.5", "10.0.0.6"
NQNS = [nvme.subsystem_nqn(ARRAY, volume) for volume in VOLUMES]


def keyed_array(target: LocalNode, address: str, slot: int, host_key: str, controller_key: str) -> None:
    """The controller at ``address`` configured with dh-hmac-chap for HOST with these keys."""
    put_secret(target, ARRAY_SECRET, {"controllerKey": controller_key, "hosts": {HOST: host_key}})
    result = configure(target, address, Slot=str(slot), **keyed())
    assert result.code == 0, result.stderr


def path_keys(host: LocalNode) -> dict[str, tuple[str, str, str]]:
    """Each path of the host as its sysfs shows it: device -> (address, dhchap_secret,
    dhchap_ctrl_secret)."""
    found = {}
    for name, ctrl in fake_controllers(host).items():
        entry = host.root / SYSFS / "class/nvme" / name
        keys = (
            (entry / "dhchap_secret").read_text().strip(),
            (entry / "dhchap_ctrl_secret").read_text().strip(),
        )
        found[name] = (str(ctrl["traddr"]), *keys)
    return found


def keys_at(host: LocalNode, address: str) -> set[tuple[str, str]]:
    return {(k, c) for a, k, c in path_keys(host).values() if a == address}


def connect_keyed(host: LocalNode, address: str) -> Result:
    return connect(host, address, **keyed(KeysSecretId=HOST_SECRET))


def test_connect_path_takes_the_keys_of_its_address_from_the_secrets_paths(node: Nodes):
    # Given two controllers holding different keys for the host (c1 rotated already)
    c0, c1, host = node("c0"), node("c1"), node("h0")
    old, new, old_ctrl, new_ctrl = dhchap_key(), dhchap_key(), dhchap_key(), dhchap_key()
    for target in (c0, c1):
        target.attach(*VOLUMES)
    keyed_array(c0, C0, 0, old, old_ctrl)
    keyed_array(c1, C1, 1, new, new_ctrl)
    # and the host's secret: the old keys at top level, the new ones for c1's address
    put_secret(
        host,
        HOST_SECRET,
        {
            "hostKey": old,
            "controllerKey": old_ctrl,
            "paths": {C1: {"hostKey": new, "controllerKey": new_ctrl}},
        },
    )
    # When connect-path runs for each address
    runs = [connect_keyed(host, address) for address in (C0, C1)]
    # Then both connect, each path with its address's keys (the fake kernel checked them)
    for run in runs:
        assert run.code == 0, run.stderr
        assert run.report["connected"] == NQNS
        shows_no_key(run, old, new, old_ctrl, new_ctrl)
    assert keys_at(host, C0) == {(old, old_ctrl)}
    assert keys_at(host, C1) == {(new, new_ctrl)}
    assert {c["authenticated"] for c in fake_controllers(host).values()} == {True}
    # and nvme-cli's config holds the same, per port
    config = json.loads((host.root / NVME_CONFIG).read_text())
    ports = {
        (p["traddr"], p["dhchap_key"], p["dhchap_ctrl_key"])
        for h in config
        for s in h["subsystems"]
        for p in s["ports"]
    }
    assert ports == {(C0, old, old_ctrl), (C1, new, new_ctrl)}
    # And an entry for the address without both keys fails naming what is missing, never a key
    put_secret(
        host, HOST_SECRET, {"hostKey": old, "controllerKey": old_ctrl, "paths": {C1: {"hostKey": new}}}
    )
    partial = connect_keyed(host, C1)
    assert partial.code == 1
    assert f"no key for paths/{C1}/controllerKey" in partial.report["error"]
    shows_no_key(partial, old, new, old_ctrl)


def two_keyed_controllers(node: Nodes, old: str, old_ctrl: str) -> tuple[LocalNode, LocalNode, LocalNode]:
    """c0 and c1 keyed with the old keys, the host connected through both with them."""
    c0, c1, host = node("c0"), node("c1"), node("h0")
    for slot, (target, address) in enumerate(((c0, C0), (c1, C1))):
        target.attach(*VOLUMES)
        keyed_array(target, address, slot, old, old_ctrl)
    put_secret(host, HOST_SECRET, {"hostKey": old, "controllerKey": old_ctrl})
    for address in (C0, C1):
        assert connect_keyed(host, address).code == 0
    return c0, c1, host


@pytest.mark.parametrize("changed", ["host key", "controller key"])
def test_a_path_with_one_key_changed_is_rekeyed_in_place_never_showing_a_key(node: Nodes, changed: str):
    # Given the host connected with the old keys through c0 and c1
    old, new, old_ctrl = dhchap_key(), dhchap_key(), dhchap_key()
    c0, _c1, host = two_keyed_controllers(node, old, old_ctrl)
    devices = {name: ctrl["traddr"] for name, ctrl in fake_controllers(host).items()}
    # When c0 gets one new key (configure-target), then the host's secret the same for c0's
    # address, and connect-path runs for c0's address
    wanted = (new, old_ctrl) if changed == "host key" else (old, new)
    keyed_array(c0, C0, 0, *wanted)
    paths = {C0: {"hostKey": wanted[0], "controllerKey": wanted[1]}}
    put_secret(host, HOST_SECRET, {"hostKey": old, "controllerKey": old_ctrl, "paths": paths})
    before = len(calls(host.root))
    result = connect_keyed(host, C0)
    # Then c0's paths were rekeyed where they are: their sysfs files hold the new key, the same
    # controllers (no disconnect, no connect), c1's paths kept the old keys
    assert result.code == 0, result.stderr
    assert result.report["rekeyed"] == NQNS
    others = ("connected", "reconnected", "unauthenticated", "notRekeyed")
    assert [result.report[k] for k in others] == [[], [], [], []]
    assert keys_at(host, C0) == {wanted}
    assert keys_at(host, C1) == {(old, old_ctrl)}
    assert {name: ctrl["traddr"] for name, ctrl in fake_controllers(host).items()} == devices
    assert {argv[0] for argv in calls(host.root)[before:]} == {"list-subsys"}
    assert result.report["livePaths"] == 2 * len(VOLUMES)
    # only the key that changed was written, as the kernel takes a key: its bytes, no newline
    file = "dhchap_secret" if changed == "host key" else "dhchap_ctrl_secret"
    other = "dhchap_ctrl_secret" if changed == "host key" else "dhchap_secret"
    for device in (name for name, address in devices.items() if address == C0):
        assert (host.root / SYSFS / "class/nvme" / device / file).read_text() == new
        assert (host.root / SYSFS / "class/nvme" / device / other).read_text().endswith("\n")  # as connected
    # and no key in stdout, stderr or the report, nor on any command line
    shows_no_key(result, old, new, old_ctrl)
    assert not any(key in json.dumps(calls(host.root)) for key in (old, new, old_ctrl))
    assert f"in place: wrote a new {changed}" in result.stderr


BOTH = (
    "connected with other keys for both the host and the controller: only one key of a pair is"
    " changed in place (a rotation changes one at a time): left as it is"
)


def test_a_path_with_both_keys_changed_is_left_alone_and_reported_though_another_path_is_live(
    node: Nodes,
):
    # Given the host connected with the old keys through c0 and c1
    old, new, old_ctrl, new_ctrl = dhchap_key(), dhchap_key(), dhchap_key(), dhchap_key()
    c0, _c1, host = two_keyed_controllers(node, old, old_ctrl)
    devices = {name: ctrl["traddr"] for name, ctrl in fake_controllers(host).items()}
    # When c0 gets both new keys, the host's secret the same for c0's address, and connect-path
    # runs for c0's address (a host that missed the rotation's first half)
    keyed_array(c0, C0, 0, new, new_ctrl)
    paths = {C0: {"hostKey": new, "controllerKey": new_ctrl}}
    put_secret(host, HOST_SECRET, {"hostKey": old, "controllerKey": old_ctrl, "paths": paths})
    before = len(calls(host.root))
    result = connect_keyed(host, C0)
    # Then no key is written (both at once stalled the 6.12 kernel), no path is taken down, and
    # each of c0's paths is reported; the run is no failure
    assert result.code == 0, result.stderr
    by_device = {name: str(c["nqn"]) for name, c in fake_controllers(host).items()}
    assert result.report["notRekeyed"] == [
        {"nqn": nqn, "device": device, "reason": BOTH}
        for device, nqn in sorted(by_device.items(), key=lambda item: NQNS.index(item[1]))
        if devices[device] == C0
    ]
    others = ("connected", "reconnected", "unauthenticated", "rekeyed")
    assert [result.report[k] for k in others] == [[], [], [], []]
    assert keys_at(host, C0) == {(old, old_ctrl)}
    assert keys_at(host, C1) == {(old, old_ctrl)}
    assert {name: ctrl["traddr"] for name, ctrl in fake_controllers(host).items()} == devices
    assert {argv[0] for argv in calls(host.root)[before:]} == {"list-subsys"}
    assert result.report["livePaths"] == 2 * len(VOLUMES)
    shows_no_key(result, old, new, old_ctrl, new_ctrl)
    assert not any(key in json.dumps(calls(host.root)) for key in (old, new, old_ctrl, new_ctrl))


def test_the_only_live_path_with_both_keys_changed_is_left_alone_and_reported(node: Nodes):
    # Given the host connected with the old keys through c0 only, then c0 given both new keys
    c0, host = node("c0"), node("h0")
    old, new, old_ctrl, new_ctrl = dhchap_key(), dhchap_key(), dhchap_key(), dhchap_key()
    c0.attach(*VOLUMES)
    keyed_array(c0, C0, 0, old, old_ctrl)
    put_secret(host, HOST_SECRET, {"hostKey": old, "controllerKey": old_ctrl})
    assert connect_keyed(host, C0).code == 0
    devices = {name: str(c["nqn"]) for name, c in fake_controllers(host).items()}
    keyed_array(c0, C0, 0, new, new_ctrl)
    put_secret(host, HOST_SECRET, {"hostKey": new, "controllerKey": new_ctrl})
    before = len(calls(host.root))
    # When connect-path runs with the new keys
    result = connect_keyed(host, C0)
    # Then each path keeps its old keys and its connection, reported; the run is no failure
    assert result.code == 0, result.stderr
    assert result.report["notRekeyed"] == [
        {"nqn": nqn, "device": device, "reason": BOTH}
        for device, nqn in sorted(devices.items(), key=lambda item: NQNS.index(item[1]))
    ]
    assert (result.report["rekeyed"], result.report["unauthenticated"]) == ([], [])
    assert {argv[0] for argv in calls(host.root)[before:]} == {"list-subsys"}
    assert keys_at(host, C0) == {(old, old_ctrl)}
    shows_no_key(result, old, new, old_ctrl, new_ctrl)


def test_paths_whose_keys_already_match_are_left_alone(node: Nodes):
    # Given the host connected with its keys through c0
    c0, host = node("c0"), node("h0")
    key, ctrl = dhchap_key(), dhchap_key()
    c0.attach(*VOLUMES)
    keyed_array(c0, C0, 0, key, ctrl)
    put_secret(
        host,
        HOST_SECRET,
        {"hostKey": key, "controllerKey": ctrl, "paths": {C0: {"hostKey": key, "controllerKey": ctrl}}},
    )
    assert connect_keyed(host, C0).code == 0
    files = sorted((host.root / SYSFS / "class/nvme").glob("nvme*/dhchap_*"))
    assert len(files) == 2 * len(VOLUMES)
    written = [f.stat().st_mtime_ns for f in files]
    before = len(calls(host.root))
    # When connect-path runs again with the same keys
    again = connect_keyed(host, C0)
    # Then nothing is done: no key written, nothing connected or disconnected
    assert again.code == 0, again.stderr
    assert (again.report["rekeyed"], again.report["reconnected"], again.report["unauthenticated"]) == (
        [],
        [],
        [],
    )
    assert again.report["connected"] == []
    assert [f.stat().st_mtime_ns for f in files] == written
    assert {argv[0] for argv in calls(host.root)[before:]} == {"list-subsys"}


def test_a_path_connected_without_keys_is_reconnected_with_them_while_another_path_is_live(node: Nodes):
    # Given the host connected without authentication through c0 and c1
    c0, c1, host = node("c0"), node("c1"), node("h0")
    key, ctrl = dhchap_key(), dhchap_key()
    for slot, (target, address) in enumerate(((c0, C0), (c1, C1))):
        target.attach(*VOLUMES)
        assert configure(target, address, Slot=str(slot)).code == 0
        assert connect(host, address).code == 0
    assert set(keys_at(host, C0) | keys_at(host, C1)) == {("none", "none")}
    # When the array turns dh-hmac-chap on: both controllers get the keys (the connections stay)
    for slot, (target, address) in enumerate(((c0, C0), (c1, C1))):
        keyed_array(target, address, slot, key, ctrl)
    put_secret(host, HOST_SECRET, {"hostKey": key, "controllerKey": ctrl})
    # and connect-path runs for c0's address with the keys
    before = len(calls(host.root))
    first = connect_keyed(host, C0)
    # Then c0's paths were disconnected one by one (each subsystem had c1's live path) and
    # connected again with the keys; c1's are still unauthenticated
    assert first.code == 0, first.stderr
    assert first.report["reconnected"] == NQNS
    assert (first.report["connected"], first.report["rekeyed"], first.report["unauthenticated"]) == (
        [],
        [],
        [],
    )
    assert keys_at(host, C0) == {(key, ctrl)}
    assert keys_at(host, C1) == {("none", "none")}
    commands = [argv[:2] for argv in calls(host.root)[before:] if argv[0] in ("connect", "disconnect")]
    assert [c[0] for c in commands] == ["disconnect"] * len(VOLUMES) + ["connect"] * len(VOLUMES)
    assert all(argv[1] == "-d" for argv in commands[: len(VOLUMES)])  # one path each, never -n
    # When it runs for c1's address (c0's new paths are live)
    second = connect_keyed(host, C1)
    # Then every path is authenticated, two per subsystem, live
    assert second.code == 0, second.stderr
    assert second.report["reconnected"] == NQNS
    assert keys_at(host, C0) | keys_at(host, C1) == {(key, ctrl)}
    assert {c["authenticated"] for c in fake_controllers(host).values()} == {True}
    assert second.report["livePaths"] == 2 * len(VOLUMES)
    shows_no_key(first, key, ctrl)
    shows_no_key(second, key, ctrl)


def test_the_only_live_path_connected_without_keys_is_left_alone_and_reported(node: Nodes):
    # Given the host connected without authentication through c0 only, then c0 keyed
    c0, host = node("c0"), node("h0")
    key, ctrl = dhchap_key(), dhchap_key()
    c0.attach(*VOLUMES)
    assert configure(c0, C0).code == 0
    assert connect(host, C0).code == 0
    devices = {name: str(c["nqn"]) for name, c in fake_controllers(host).items()}
    keyed_array(c0, C0, 0, key, ctrl)
    put_secret(host, HOST_SECRET, {"hostKey": key, "controllerKey": ctrl})
    before = len(calls(host.root))
    # When connect-path runs with the keys
    result = connect_keyed(host, C0)
    # Then each path stays as it is (disconnecting it would stop the subsystem's IO), reported
    assert result.code == 0, result.stderr
    assert result.report["unauthenticated"] == [
        {
            "nqn": nqn,
            "device": device,
            "reason": "connected without a key and the only live path of the subsystem: left as it is",
        }
        for device, nqn in sorted(devices.items(), key=lambda item: NQNS.index(item[1]))
    ]
    assert (result.report["rekeyed"], result.report["reconnected"], result.report["connected"]) == (
        [],
        [],
        [],
    )
    assert {argv[0] for argv in calls(host.root)[before:]} == {"list-subsys"}
    assert keys_at(host, C0) == {("none", "none")}
    assert result.report["livePaths"] == len(VOLUMES)
    shows_no_key(result, key, ctrl)


def test_side_by_side_runs_take_a_hosts_paths_down_one_at_a_time(node: Nodes):
    # Given the host connected without authentication through c0 and c1, and the array now
    # authenticating: ReconcileArray's connect phase runs connect-path for both addresses at once
    c0, c1, host = node("c0"), node("c1"), node("h0")
    key, ctrl = dhchap_key(), dhchap_key()
    for slot, (target, address) in enumerate(((c0, C0), (c1, C1))):
        target.attach(*VOLUMES)
        assert configure(target, address, Slot=str(slot)).code == 0
        assert connect(host, address).code == 0
    for slot, (target, address) in enumerate(((c0, C0), (c1, C1))):
        keyed_array(target, address, slot, key, ctrl)
    put_secret(host, HOST_SECRET, {"hostKey": key, "controllerKey": ctrl})
    # When both run side by side
    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = pool.map(lambda address: connect_keyed(host, address), (C0, C1))
    # Then neither took its paths down while the other's were down: one held the host's lock
    # until its paths were live again with keys, and the other, reading the paths afresh,
    # found those live and reconnected its own; every path ends authenticated and live
    assert first.code == 0, first.stderr
    assert second.code == 0, second.stderr
    assert first.report["reconnected"] == NQNS
    assert second.report["reconnected"] == NQNS
    assert keys_at(host, C0) | keys_at(host, C1) == {(key, ctrl)}
    assert second.report["livePaths"] == first.report["livePaths"] == 2 * len(VOLUMES)
    commands = [argv[:2] for argv in calls(host.root) if argv[0] in ("connect", "disconnect")]
    # the reconnects: all of one address's (disconnect, connect), then the other's
    tail = [c[0] for c in commands[-4 * len(VOLUMES) :]]
    assert tail == (["disconnect"] * len(VOLUMES) + ["connect"] * len(VOLUMES)) * 2


# --- ownership (ANA) --------------------------------------------------------------------------
def ana_states(target: LocalNode) -> dict[str, str]:
    groups = target.nvmet / "ports" / "4420" / "ana_groups"
    return {
        g.name: (g / "ana_state").read_text().strip()
        for g in sorted(groups.iterdir())
        if (g / "ana_state").exists()
    }


def test_with_owners_each_namespace_joins_its_owners_group_served_only_where_asked(node: Nodes):
    # Given a controller in slot 1 with both volumes, the first owned by slot 0, the second by 1
    target = node("c1")
    target.attach(*VOLUMES)
    result = configure(target, "10.0.0.6", Slot="1", Owners="0,1")
    assert result.code == 0, result.stderr
    # Then each namespace is in its owner's ANA group (slot + 2), and this port serves only its own
    for volume, group in zip(VOLUMES, ("2", "3"), strict=True):
        namespace = target.nvmet / "subsystems" / nvme.subsystem_nqn(ARRAY, volume) / "namespaces/1"
        assert (namespace / "ana_grpid").read_text() == f"{group}\n"
    assert ana_states(target) == {"2": "inaccessible", "3": "optimized"}
    # and the group states were written before any namespace joined a group (never optimized here
    # for a volume this controller does not serve, not even for one write)
    order = [path for path, _ in writes(result.stderr)]
    first_grpid = min(i for i, p in enumerate(order) if p.endswith("/ana_grpid"))
    assert max(i for i, p in enumerate(order) if p.endswith("/ana_state")) < first_grpid
    assert result.report["ana"] == {
        "owners": {VOLUMES[0]: 0, VOLUMES[1]: 1},
        "serving": [1],
        "groups": [{"id": 2, "state": "inaccessible"}, {"id": 3, "state": "optimized"}],
    }
    # When it takes over slot 0's group (after slot 0 is fenced), the one write is that group's state
    promoted = configure(target, "10.0.0.6", Slot="1", Owners="0,1", Serving="1,0")
    assert promoted.code == 0, promoted.stderr
    assert writes(promoted.stderr) == [("ports/4420/ana_groups/2/ana_state", "optimized")]
    assert ana_states(target) == {"2": "optimized", "3": "optimized"}
    # and the same run again changes nothing
    again = configure(target, "10.0.0.6", Slot="1", Owners="0,1", Serving="1,0")
    assert again.report["changes"] == 0, again.stderr


def test_without_owners_every_namespace_stays_in_the_default_group(node: Nodes):
    target = node("c0")
    target.attach(*VOLUMES)
    result = configure(target, "10.0.0.5")
    assert result.code == 0, result.stderr
    assert result.report["ana"] is None
    assert not any(p.endswith(("/ana_grpid", "/ana_state")) for p, _ in writes(result.stderr))
    # and owners given later move the namespaces, while a plain re-apply moves them back to group 1
    assert configure(target, "10.0.0.5", Owners="0,0").code == 0
    back = configure(target, "10.0.0.5")
    assert back.code == 0, back.stderr
    for volume in VOLUMES:
        namespace = target.nvmet / "subsystems" / nvme.subsystem_nqn(ARRAY, volume) / "namespaces/1"
        assert (namespace / "ana_grpid").read_text() == "1\n"


def test_ownership_refuses_a_count_that_does_not_match_and_serving_without_owners(node: Nodes):
    target = node("c0")
    target.attach(*VOLUMES)
    short = configure(target, "10.0.0.5", Owners="0")
    assert short.code == 1
    assert "Owners lists 1 slots for 2 volumes" in short.report["error"]
    alone = configure(target, "10.0.0.5", Serving="0,1")
    assert alone.code == 1
    assert "Serving needs Owners" in alone.report["error"]
    assert not target.nvmet.exists()


# --- fencing (NVMe reservations on the EBS devices) -------------------------------------------
def fenced(node: LocalNode, boot: str, **params: str) -> Result:
    (node.root / "boot_id").write_text(boot + "\n")
    return configure(
        node,
        "10.0.0.5" if node.root.name == "c0" else "10.0.0.6",
        Slot=node.root.name[1:],
        Fencing="reservations",
        NvmeCommand=FAKE_NVME,
        BootIdFile="boot_id",
        DmesgCommand=FAKE_DMESG,
        **params,
    )


def registrants(node: LocalNode) -> dict[str, dict[str, Any]]:
    folder = node.root.parent / ".ebs-reservations"
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("vol-*.json")}


def test_each_controller_registers_a_key_per_boot_and_holds_every_volume_write_exclusive_all_registrants(
    node: Nodes,
):
    c0, c1 = node("c0"), node("c1")
    for target in (c0, c1):
        target.attach(*VOLUMES)
    first, second = fenced(c0, "boot-a", Owners="0,0"), fenced(c1, "boot-b", Owners="0,0")
    assert first.code == 0, first.stderr
    assert second.code == 0, second.stderr
    keys = {"c0": int(first.report["fencing"]["key"], 16), "c1": int(second.report["fencing"]["key"], 16)}
    assert keys["c0"] != keys["c1"]
    assert 0 < min(keys.values()) < 2**52
    # Then both are registered on every volume, held type 5 (every registrant a holder)
    for volume in VOLUMES:
        state = registrants(c0)[volume]
        assert (state["rtype"], state["keys"]) == (5, keys)
    # and a re-run changes nothing; a new boot replaces the old key (the attachment kept it)
    assert fenced(c0, "boot-a", Owners="0,0").report["changes"] == 0
    rebooted = fenced(c0, "boot-c", Owners="0,0")
    assert rebooted.code == 0, rebooted.stderr
    assert rebooted.report["fencing"]["key"] != first.report["fencing"]["key"]
    assert {registrants(c0)[v]["keys"]["c0"] for v in VOLUMES} == {int(rebooted.report["fencing"]["key"], 16)}


def test_a_survivor_fences_the_lost_owner_on_every_volume_before_it_serves_its_group(node: Nodes):
    # Given c0 owning both volumes, c1 serving nothing of them, both registered
    c0, c1 = node("c0"), node("c1")
    for target in (c0, c1):
        target.attach(*VOLUMES)
    lost = fenced(c0, "boot-a", Owners="0,0").report["fencing"]["key"]
    assert fenced(c1, "boot-b", Owners="0,0").code == 0
    # When c1 is promoted to serve slot 0's group, fencing c0's key
    promoted = fenced(c1, "boot-b", Owners="0,0", Serving="1,0", FenceKeys=lost)
    # Then c0's key is gone from every volume, and only then did c1's port serve group 2
    assert promoted.code == 0, promoted.stderr
    assert all(set(registrants(c1)[v]["keys"]) == {"c1"} for v in VOLUMES)
    log = promoted.stderr.splitlines()
    fences = [i for i, line in enumerate(log) if "fenced key" in line]
    promotion = next(i for i, line in enumerate(log) if "ana_groups/2/ana_state = optimized" in line)
    assert len(fences) == len(VOLUMES)
    assert max(fences) < promotion
    assert promoted.report["fencing"]["fenced"] == [lost]
    assert ana_states(c1) == {"2": "optimized", "3": "optimized"}
    # and a second survivor run (or a retry) finds it fenced already and changes nothing
    assert fenced(c1, "boot-b", Owners="0,0", Serving="1,0", FenceKeys=lost).report["changes"] == 0


def test_a_fenced_controller_fences_itself_and_never_registers_again_on_that_boot(node: Nodes):
    # Given c0 owning both volumes and c1 promoted to serve its group, fencing c0's key (c0 was
    # cut off; the control plane judged it lost)
    c0, c1 = node("c0"), node("c1")
    for target in (c0, c1):
        target.attach(*VOLUMES)
    first = fenced(c0, "boot-a", Owners="0,0")
    lost = first.report["fencing"]["key"]
    # and c0's fence watch gone (ended, or not yet at its next read-back): what this test checks
    # is configure-target's own finding, which must not depend on the watch (the watch's own
    # tests are below); running, it could fence c0 first and the run would find that instead
    watch = first.report["fencing"]["watch"]
    os.kill(watch, signal.SIGTERM)
    wait_until(lambda: not watch_running(c0, watch), "c0's watch ended")
    assert fenced(c1, "boot-b", Owners="0,0").code == 0
    assert fenced(c1, "boot-b", Owners="0,0", Serving="1,0", FenceKeys=lost).code == 0
    assert ana_states(c0) == {"2": "optimized"}
    # When configure-target runs on c0 again on the same boot (a retry, a reconcile that still
    # counts it serving)
    again = fenced(c0, "boot-a", Owners="0,0")
    # Then it refuses, naming the fence; it did not register again (re-registering would let
    # through every write it still holds); and its port serves nothing (every group inaccessible)
    assert again.code == 1
    assert "this controller is fenced" in again.report["error"]
    assert "preempted" in again.report["error"]
    assert all(set(registrants(c0)[v]["keys"]) == {"c1"} for v in VOLUMES)
    assert ana_states(c0) == {"2": "inaccessible"}
    # and every later run on that boot is refused before it touches a volume, whatever it asks
    later = fenced(c0, "boot-a", Owners="1,1")
    assert later.code == 1
    assert "earlier on this boot" in later.report["error"]
    assert all(set(registrants(c0)[v]["keys"]) == {"c1"} for v in VOLUMES)
    # and after a reboot (a new key) it registers and serves as asked
    rebooted = fenced(c0, "boot-c", Owners="1,1")
    assert rebooted.code == 0, rebooted.stderr
    assert all(set(registrants(c0)[v]["keys"]) == {"c0", "c1"} for v in VOLUMES)


def test_a_registration_lost_with_its_attachment_is_made_again_not_taken_for_a_fence(node: Nodes):
    # Given c0 registered on both volumes on this boot
    c0 = node("c0")
    c0.attach(*VOLUMES)
    assert fenced(c0, "boot-a", Owners="0,0").code == 0
    # When one volume is detached and attached again (EBS drops the attachment's registration)
    volume = VOLUMES[0]
    path = c0.root.parent / ".ebs-reservations" / f"{volume}.json"
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "keys": {}, "rtype": 0, "holder": None}))
    device = c0.root / DEVICES / nvme.device_name(volume)
    before = device.stat().st_ctime_ns
    while device.stat().st_ctime_ns == before:  # a new device node: another change time (the
        c0.attach(volume)  # kernel's coarse clock can give a rewrite in the same tick the same)
    # Then the next run registers it again and serves: a new attachment is not a fence
    again = fenced(c0, "boot-a", Owners="0,0")
    assert again.code == 0, again.stderr
    assert set(registrants(c0)[volume]["keys"]) == {"c0"}
    assert registrants(c0)[volume]["rtype"] == 5


def kernel_log(target: LocalNode, line: str) -> None:
    """A line the node's kernel logs (the fake dmesg follows ``.fakes/kmsg``)."""
    log = target.root / ".fakes" / "kmsg"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(line + "\n")


def conflict(volume: str) -> str:
    """What Linux (6.5 and later) logs when the volume refuses a write with a Reservation Conflict."""
    device = nvme.device_name(volume)  # the sandbox's device is the file itself
    return f"reservation conflict error, dev {device}, sector 2048 op 0x1:(WRITE) flags 0x8800 phys_seg 1"


def watch_running(target: LocalNode, pid: int) -> bool:
    return pid in fence_watches(target.root.parent.parent)


def watch_log(target: LocalNode, pid: int) -> str:
    for pid_file in target.root.parent.parent.glob("vsa-configure-target-*.fence-watch.pid"):
        if pid_file.read_text().strip() == str(pid):
            return pid_file.with_suffix(".log").read_text()
    return ""


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Waits on the condition (the watch runs on its own), with a generous bound."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.05)


def test_a_controller_fenced_between_runs_fences_itself_with_no_run_reaching_it(node: Nodes):
    # Given c0 owning both volumes, its fence watch running (one per kernel: a re-run keeps it),
    # and c1 registered
    c0, c1 = node("c0"), node("c1")
    for target in (c0, c1):
        target.attach(*VOLUMES)
    first = fenced(c0, "boot-a", Owners="0,0")
    watch = first.report["fencing"]["watch"]
    assert isinstance(watch, int), first.report
    assert watch_running(c0, watch)
    assert fenced(c0, "boot-a", Owners="0,0").report["fencing"]["watch"] == watch
    assert fenced(c1, "boot-b", Owners="0,0").code == 0
    # When c1 fences c0's key and serves its group (c0 cut off: no run reaches it), and c0 then
    # passes on a write the volume refuses
    lost = first.report["fencing"]["key"]
    assert fenced(c1, "boot-b", Owners="0,0", Serving="1,0", FenceKeys=lost).code == 0
    kernel_log(c0, conflict(VOLUMES[0]))
    # Then c0's watch fences it: every ANA group of its port inaccessible, and the watch ends
    wait_until(lambda: ana_states(c0) == {"2": "inaccessible"}, "c0's groups inaccessible")
    wait_until(lambda: not watch_running(c0, watch), "c0's watch ended")
    assert "is gone from" in watch_log(c0, watch)
    # and the next run on c0 is refused, naming the fence, and registers nothing again
    again = fenced(c0, "boot-a", Owners="0,0")
    assert again.code == 1
    assert "earlier on this boot" in again.report["error"]
    assert all(set(registrants(c0)[v]["keys"]) == {"c1"} for v in VOLUMES)


def test_the_watch_reads_back_on_an_error_of_its_own_devices_and_decides_nothing_on_the_log(node: Nodes):
    # Given c0 registered on both volumes, its watch running
    c0 = node("c0")
    c0.attach(*VOLUMES)
    watch = fenced(c0, "boot-a", Owners="0,0").report["fencing"]["watch"]
    # When its kernel logs an error on another device, then a conflict on one of its volumes
    # while its key is still registered there (not a fence: e.g. a write that raced a re-register)
    kernel_log(c0, "I/O error, dev nvme9n1, sector 8 op 0x1:(WRITE) flags 0x0 phys_seg 1 prio class 0")
    kernel_log(c0, conflict(VOLUMES[1]))
    # Then the watch reads its registrations back for the second line only
    wait_until(lambda: "reading back now" in watch_log(c0, watch), "a read-back on the conflict")
    assert watch_log(c0, watch).count("reading back now") == 1, watch_log(c0, watch)
    assert VOLUMES[1].replace("-", "") in watch_log(c0, watch)
    # and, its key still there, c0 serves on: nothing is decided on the log alone
    assert ana_states(c0) == {"2": "optimized"}
    assert watch_running(c0, watch)


def test_the_watch_ends_with_the_arrays_teardown_its_boot_or_its_last_attached_volume(node: Nodes):
    c0 = node("c0")
    c0.attach(*VOLUMES)
    # a teardown of the array stops it
    watch = fenced(c0, "boot-a", Owners="0,0").report["fencing"]["watch"]
    down = configure(c0, "10.0.0.5", Mode="teardown")
    assert down.code == 0, down.stderr
    assert not (c0.nvmet / "ports" / "4420").exists()  # its ANA groups removed first, then the port
    wait_until(lambda: not watch_running(c0, watch), "the watch stopped by the teardown")
    # a new boot ends it (the key it guards was this boot's)
    watch = fenced(c0, "boot-a", Owners="0,0").report["fencing"]["watch"]
    (c0.root / "boot_id").write_text("boot-b\n")
    wait_until(lambda: not watch_running(c0, watch), "the watch ended by a new boot")
    assert "a new boot" in watch_log(c0, watch)
    # and so does the last of its volumes being detached
    watch = fenced(c0, "boot-b", Owners="0,0").report["fencing"]["watch"]
    for volume in VOLUMES:
        (c0.root / DEVICES / nvme.device_name(volume)).unlink()
    wait_until(lambda: not watch_running(c0, watch), "the watch ended with no volume attached")
    assert "none of the registered volumes is attached" in watch_log(c0, watch)


def test_survivors_fencing_side_by_side_find_the_lost_key_gone_and_serve(node: Nodes, tmp_path: Path):
    # Given c0 lost with its key on both volumes, and two survivors registered (every survivor
    # fences a lost controller)
    c0, c1, c2 = node("c0"), node("c1"), node("c2")
    for target in (c0, c1, c2):
        target.attach(*VOLUMES)
    lost = fenced(c0, "boot-a", Owners="0,0").report["fencing"]["key"]
    other = fenced(c1, "boot-b", Owners="0,0").report["fencing"]["key"]
    assert fenced(c2, "boot-c", Owners="0,0").code == 0
    # When c1's preempt of c0's key lands on each volume between c2's read of the registrants and
    # c2's own preempt (c2's nvme runs c1's first), and c2 is promoted to serve slot 0's group
    racing = tmp_path / "nvme-racing"
    racing.write_text(
        "#!/bin/bash\n"
        'if [[ $1 == resv-acquire && " $* " == *" --racqa=2 "* ]]; then\n'
        f'  VSA_NODE_ROOT={c1.root} {FAKE_NVME} resv-acquire "{c1.root}/dev/disk/by-id/${{2##*/}}"'
        f" --crkey=$(({other})) --prkey=$(({lost})) --rtype=5 --racqa=2 >/dev/null\n"
        "fi\n"
        f'exec {FAKE_NVME} "$@"\n'
    )
    racing.chmod(0o755)
    (c2.root / "boot_id").write_text("boot-c\n")
    promoted = configure(
        c2,
        "10.0.0.7",
        Slot="2",
        Owners="0,0",
        Serving="2,0",
        FenceKeys=lost,
        Fencing="reservations",
        NvmeCommand=str(racing),
        BootIdFile="boot_id",
        DmesgCommand=FAKE_DMESG,
    )
    # Then c2 takes the refused preempt for what it is (the key gone all the same) and serves
    assert promoted.code == 0, promoted.stderr
    assert promoted.stderr.count("preempted meanwhile by another survivor") == len(VOLUMES)
    assert all(set(registrants(c2)[v]["keys"]) == {"c1", "c2"} for v in VOLUMES)
    assert ana_states(c2)["2"] == "optimized"


def test_a_survivor_that_cannot_fence_promotes_nothing(node: Nodes):
    # Given c0 registered and owning the volumes, and c1 attached but not registered (another
    # user took the volume's reservation with another type meanwhile)
    c0, c1 = node("c0"), node("c1")
    for target in (c0, c1):
        target.attach(*VOLUMES)
    lost = fenced(c0, "boot-a", Owners="0,0").report["fencing"]["key"]
    assert configure(c1, "10.0.0.6", Slot="1", Owners="0,0").code == 0  # group 2 inaccessible here
    for volume in VOLUMES:
        path = c0.root.parent / ".ebs-reservations" / f"{volume}.json"
        state = json.loads(path.read_text())
        path.write_text(json.dumps({**state, "rtype": 1, "holder": "c0"}))
    # When c1 is asked to fence c0 and serve its group
    refused = fenced(c1, "boot-b", Owners="0,0", Serving="1,0", FenceKeys=lost)
    # Then it fails naming why, c0 is still registered, and group 2 is still inaccessible on c1
    assert refused.code == 1
    assert "reserved with type 1" in refused.report["error"]
    assert all("c0" in registrants(c0)[v]["keys"] for v in VOLUMES)
    assert ana_states(c1) == {"2": "inaccessible", "3": "optimized"}
    # and FenceKeys without reservations, or naming its own key, are refused before anything
    plain = configure(c1, "10.0.0.6", Slot="1", Owners="0,0", Serving="1,0", FenceKeys=lost)
    assert "FenceKeys needs Fencing reservations" in plain.report["error"]
