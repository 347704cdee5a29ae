"""The NVMe identities of an array (vsa_core.nvme): what the kernel needs of them, as properties.

The shell documents derive the same values; tests/documents/test_scripts_local.py compares."""

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vsa_core import nvme
from vsa_core.arrays.spec import Host
from vsa_core.naming import ARRAY_ID_PATTERN

array_ids = st.from_regex(ARRAY_ID_PATTERN, fullmatch=True)
volume_ids = st.from_regex(r"vol-[0-9a-f]{8,17}", fullmatch=True)
instance_ids = st.from_regex(r"i-[0-9a-f]{8,17}", fullmatch=True)
slots = st.integers(min_value=0, max_value=nvme.SLOTS - 1)
NQN = re.compile(r"nqn\.\d{4}-\d{2}\.[a-z0-9][a-z0-9.-]*(:[A-Za-z0-9._:-]+)?")  # as model.Nqn
HEX_GROUPS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@given(a=slots, b=slots)
def test_cntlid_ranges_of_two_slots_are_disjoint_and_inside_the_kernel_range(a: int, b: int):
    # Given two slots / When their controller-id ranges are derived
    low_a, high_a = nvme.cntlid_range(a)
    low_b, high_b = nvme.cntlid_range(b)
    # Then each is a non-empty range inside 1..0xFFEF, and two different slots never overlap
    for low, high in ((low_a, high_a), (low_b, high_b)):
        assert nvme.CNTLID_MIN <= low <= high <= nvme.CNTLID_MAX
    assert (a == b) or high_a < low_b or high_b < low_a


def test_every_slot_pair_is_disjoint_exhaustively():
    ranges = [nvme.cntlid_range(slot) for slot in range(nvme.SLOTS)]
    ids = [set(range(low, high + 1)) for low, high in ranges]
    assert all(ids[i].isdisjoint(ids[j]) for i in range(16) for j in range(i + 1, 16))
    assert ranges[0] == (1, 4000)
    assert ranges[15] == (60001, 64000)


@pytest.mark.parametrize("slot", [-1, 16])
def test_a_slot_outside_0_to_15_is_refused(slot: int):
    with pytest.raises(ValueError, match=r"outside 0\.\.15"):
        nvme.cntlid_range(slot)


@given(array_id=array_ids, volume_id=volume_ids)
def test_subsystem_nqn_is_a_valid_nqn_of_at_most_223_bytes(array_id: str, volume_id: str):
    nqn = nvme.subsystem_nqn(array_id, volume_id)
    assert NQN.fullmatch(nqn)
    assert len(nqn.encode()) <= nvme.NQN_MAX_BYTES
    assert nqn.startswith(nvme.subsystem_nqn_prefix(array_id))


def test_the_longest_array_and_volume_ids_fit_an_nqn():
    nqn = nvme.subsystem_nqn("a" * 32, "vol-" + "f" * 17)
    assert len(nqn.encode()) <= nvme.NQN_MAX_BYTES


@given(a=array_ids, b=array_ids, volume_id=volume_ids)
def test_no_array_claims_another_arrays_subsystems(a: str, b: str, volume_id: str):
    # teardown removes the subsystems whose NQN starts with the array's prefix: never another's
    if a != b:
        assert not nvme.subsystem_nqn(a, volume_id).startswith(nvme.subsystem_nqn_prefix(b))


@given(volume_id=volume_ids)
def test_namespace_uuid_is_a_version_8_uuid_and_nguid_16_hex_bytes(volume_id: str):
    value = nvme.namespace_uuid(volume_id)
    parsed = uuid.UUID(value)
    assert str(parsed) == value  # lower-case, as nvmet shows device_uuid
    assert parsed.version == 8
    assert parsed.variant == uuid.RFC_4122
    nguid = nvme.namespace_nguid(volume_id)
    assert HEX_GROUPS.fullmatch(nguid)
    assert nguid != value


@given(a=volume_ids, b=volume_ids)
def test_namespace_identities_are_deterministic_and_distinct_per_volume(a: str, b: str):
    assert nvme.namespace_uuid(a) == nvme.namespace_uuid(a)
    assert nvme.namespace_nguid(a) == nvme.namespace_nguid(a)
    if a != b:
        assert nvme.namespace_uuid(a) != nvme.namespace_uuid(b)
        assert nvme.namespace_nguid(a) != nvme.namespace_nguid(b)


@given(array_id=array_ids)
def test_serial_and_model_fit_their_nvme_fields(array_id: str):
    serial, model = nvme.serial(array_id), nvme.model(array_id)
    # 20 bytes exactly (nvmet pads a shorter serial with spaces: then it would not read back equal)
    assert len(serial) == nvme.SERIAL_LENGTH
    assert serial.isascii()
    assert serial.isprintable()
    assert 0 < len(model) <= 40
    assert model.isprintable()


def test_serial_differs_between_arrays():
    assert nvme.serial("demo") != nvme.serial("demo-2")


def test_device_name_is_udevs_name_of_the_ebs_nvme_device():
    assert nvme.device_name("vol-0123456789abcdef0") == "nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"


def test_port_id_is_the_tcp_port():
    assert nvme.port_id() == 4420
    assert nvme.port_id(4421) == 4421
    with pytest.raises(ValueError, match="outside"):
        nvme.port_id(0)


@given(instance_id=instance_ids)
def test_a_hosts_default_nqn_is_the_uuid_form_and_its_host_id_is_that_uuid(instance_id: str):
    host = Host.model_validate({"instanceId": instance_id})
    nqn = nvme.host_nqn(host)
    assert NQN.fullmatch(nqn)
    assert nqn == nvme.default_host_nqn(instance_id)
    assert nqn.startswith(nvme.UUID_NQN_PREFIX)
    assert nvme.host_id(nqn) == str(uuid.UUID(nqn.removeprefix(nvme.UUID_NQN_PREFIX)))


def test_a_named_host_nqn_wins():
    named = "nqn.2014-08.com.example:host-1"
    host = Host.model_validate({"instanceId": "i-0123456789abcdef0", "hostNqn": named})
    assert nvme.host_nqn(host) == named
    assert nvme.host_id(named) is None  # nvme-cli then uses the host's own hostid


def test_different_instances_get_different_host_nqns():
    assert nvme.default_host_nqn("i-0123456789abcdef0") != nvme.default_host_nqn("i-0123456789abcdef1")
