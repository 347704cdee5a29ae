"""DH-HMAC-CHAP keys (vsa_core.arrays.keys): the DHHC-1 form the kernel and nvme-cli use, who
gets which key, and that a node's copy holds only what that node needs."""

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vsa_core.arrays import keys

# Written by nvme-cli 2.3 (`nvme gen-dhchap-key -s <hex> -n nqn.x`, hmac 0 = the key as it is),
# on this machine: the secret bytes 00..1f, and 00..2f with -l 48.
NVME_CLI_32 = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
NVME_CLI_48 = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:"

HOST_A = "nqn.2014-08.org.nvmexpress:uuid:0b1b3c1e-0000-4000-8000-00000000000a"
HOST_B = "nqn.2014-08.org.nvmexpress:uuid:0b1b3c1e-0000-4000-8000-00000000000b"


def test_the_form_is_nvme_clis_byte_for_byte() -> None:
    assert keys.encode_key(bytes(range(32))) == NVME_CLI_32
    assert keys.encode_key(bytes(range(48))) == NVME_CLI_48
    assert keys.decode_key(NVME_CLI_32) == bytes(range(32))


@given(st.sampled_from(keys.KEY_LENGTHS).flatmap(lambda n: st.binary(min_size=n, max_size=n)))
def test_every_key_round_trips(key: bytes) -> None:
    assert keys.decode_key(keys.encode_key(key)) == key


def test_a_new_key_is_random_and_well_formed() -> None:
    made = {keys.new_key() for _ in range(50)}
    assert len(made) == 50
    assert all(len(keys.decode_key(k)) == keys.KEY_BYTES for k in made)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (NVME_CLI_32.replace("KfiaR", "KfiaS"), "CRC-32"),  # one bit of the checksum off
        (NVME_CLI_32[:-1], "DHHC-1:00:<base64>:"),  # no closing colon
        ("DHHC-1:04:" + NVME_CLI_32[10:], "DHHC-1:00:<base64>:"),  # no such transformation
        ("DHHC-1:00:" + "QUJD" * 5 + ":", "bytes"),  # 11 bytes of key
        ("DHHC-1:00:$(reboot):", "DHHC-1:00:<base64>:"),
    ],
)
def test_a_malformed_key_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(keys.InvalidKeyError, match=why.replace("(", r"\(").replace(")", r"\)")):
        keys.decode_key(text)


def test_converge_keeps_keys_adds_the_new_hosts_and_drops_the_gone() -> None:
    first, said = keys.converge(None, [HOST_A])
    everything_said = list(said)
    assert said == ["controller key created", f"key created for host {HOST_A}"]
    second, said = keys.converge(first, [HOST_B])
    assert second.controller_key == first.controller_key
    assert set(second.hosts) == {HOST_B}
    assert said == [f"key created for host {HOST_B}", f"key dropped for host {HOST_A} (no longer listed)"]
    everything_said += said
    third, said = keys.converge(second, [HOST_B])
    assert third == second
    assert said == []
    shown = " ".join(everything_said)
    assert all(k not in shown for k in [*first.hosts.values(), *second.hosts.values(), first.controller_key])


def test_each_node_copy_holds_only_what_that_node_needs() -> None:
    array, _ = keys.converge(None, [HOST_A, HOST_B])
    controller = json.loads(array.controller_secret([HOST_A, HOST_B]))
    assert controller == {"controllerKey": array.controller_key, "hosts": dict(array.hosts)}
    host = json.loads(array.host_secret(HOST_A))
    assert host == {"hostKey": array.hosts[HOST_A], "controllerKey": array.controller_key}
    assert array.hosts[HOST_B] not in array.host_secret(HOST_A)
    assert keys.ArrayKeys.from_secret(array.as_secret()) == array


def test_a_stored_secret_that_is_not_the_arrays_keys_is_refused() -> None:
    with pytest.raises(keys.InvalidKeyError):
        keys.ArrayKeys.from_secret(json.dumps({"controllerKey": NVME_CLI_32}))
    with pytest.raises(keys.InvalidKeyError):
        keys.ArrayKeys.from_secret(json.dumps({"controllerKey": "x", "hosts": {}}))


def test_names_are_per_array_and_per_node_and_no_array_is_anothers_prefix() -> None:
    assert keys.node_secret_name("db", "i-0123456789abcdef0") == "vsa/db/node/i-0123456789abcdef0"
    assert not keys.node_secret_name("db-2", "i-0123456789abcdef0").startswith(keys.node_prefix("db"))
    assert keys.array_secret_name("db") == "vsa/db/keys"
    assert not keys.array_secret_name("db").startswith(keys.node_prefix("db"))


def test_document_parameters() -> None:
    assert keys.document_parameters("dh-hmac-chap", "vsa/db/node/i-1", "aws") == {
        "Authentication": "dh-hmac-chap",
        "KeysSecretId": "vsa/db/node/i-1",
        "AwsCommand": "aws",
    }
    assert keys.document_parameters("none", "vsa/db/node/i-1", "aws")["Authentication"] == "none"


def test_the_keys_of_as_many_hosts_as_fit_one_secret_during_a_rotation_are_accepted() -> None:
    # Given host NQNs of the uuid form nvme gen-hostnqn makes
    nqns = [f"nqn.2014-08.org.nvmexpress:uuid:{uuid.UUID(int=i)}" for i in range(256)]
    # Then the array secret of a rotation (the largest the array has) is measured against
    # Secrets Manager's SecretString limit: the hosts that fit pass, one more host does not
    fits = next(n for n in range(256, 0, -1) if keys.size_problem(nqns[:n]) is None)
    assert 200 < fits < 256
    rotating, _ = keys.converge(None, nqns[:fits])[0].begin_rotation()
    assert len(rotating.as_secret()) <= keys.SECRET_STRING_LIMIT
    over = keys.converge(None, nqns[: fits + 1])[0].begin_rotation()[0]
    assert len(over.as_secret()) > keys.SECRET_STRING_LIMIT
    said = keys.size_problem(nqns[: fits + 1])
    assert said is not None
    assert f"declare at most about {fits} hosts" in said
    # and long NQNs (223 bytes, NVMe's most) fit fewer
    long = [f"nqn.2014-08.com.example:host-{i:03d}".ljust(223, "x") for i in range(fits)]
    assert keys.size_problem(long) is not None
