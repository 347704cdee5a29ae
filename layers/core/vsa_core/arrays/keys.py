"""NVMe in-band authentication (DH-HMAC-CHAP) keys of an array: their form, who gets which, and
where each node reads them. Pure; ``aws_keys`` stores them in Secrets Manager.

**The key form** is the NVMe Base Specification's secret representation (section 8.13.5.8), as
``nvme gen-dhchap-key`` writes it and the kernel's ``nvme_auth_extract_key`` reads it:
``DHHC-1:<hh>:<base64 of the key and its CRC-32, little-endian>:``. ``hh`` 00 says the key is
used as it is (no transformation by a hash; its length 32, 48 or 64 bytes); the CRC-32 is the
one zlib computes (IEEE 802.3), which the kernel checks on every key it is given.

**Who gets which** (bidirectional authentication): every declared host has a key of its own (the
controllers authenticate the host with it), and the array has one controller key (each host
authenticates the controllers with it). The control plane keeps all of them in the array's own
secret (``array_secret_name``), which no node may read; each node reads only its own copy
(``node_secret_name``), tagged with the node's instance ARN (``NODE_TAG``): a controller's holds
the controller key and every host's key (configure-target writes them into nvmet's host
entries), a host's holds its own key and the controller key (connect-path). The node policy the
stack outputs lets an instance read a secret only when that tag names the instance itself
(``ec2:SourceInstanceARN``), so a node of another array, or another node of this one, is refused.
"""

import base64
import binascii
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

Authentication = Literal["none", "dh-hmac-chap"]
DH_HMAC_CHAP: Final = "dh-hmac-chap"
NONE: Final = "none"

KEY_BYTES: Final = 32
"""The length ``nvme gen-dhchap-key`` gives by default: 32 bytes (256 bits)."""
KEY_LENGTHS: Final = (32, 48, 64)
"""The lengths the kernel accepts for an untransformed (hh 00) secret."""
_KEY = re.compile(r"^DHHC-1:(0[0-3]):([A-Za-z0-9+/]+={0,2}):$")

NODE_TAG: Final = "vsa:node"
"""On a node's secret: the node's EC2 instance ARN, which the node policy compares with
``${ec2:SourceInstanceARN}``."""
KEYS_TAG: Final = "vsa:keys"
"""On every secret of an array's keys: ``array`` (the control plane's own) or ``node``."""


class InvalidKeyError(ValueError):
    """A key that is not in the DHHC-1 form the kernel takes."""


def encode_key(key: bytes, transform: int = 0) -> str:
    """The DHHC-1 representation of ``key``."""
    if transform == 0 and len(key) not in KEY_LENGTHS:
        raise InvalidKeyError(f"a DH-HMAC-CHAP key is 32, 48 or 64 bytes, not {len(key)}")
    crc = binascii.crc32(key).to_bytes(4, "little")
    return f"DHHC-1:{transform:02d}:{base64.b64encode(key + crc).decode()}:"


def decode_key(text: str) -> bytes:
    """The key inside a DHHC-1 representation; refuses what the kernel would refuse."""
    match = _KEY.fullmatch(text)
    if match is None:
        raise InvalidKeyError("a DH-HMAC-CHAP key looks like DHHC-1:00:<base64>:")
    try:
        raw = base64.b64decode(match[2], validate=True)
    except binascii.Error as error:
        raise InvalidKeyError(f"the key's base64 does not decode: {error}") from None
    key, crc = raw[:-4], raw[-4:]
    if len(key) not in KEY_LENGTHS:
        raise InvalidKeyError(f"a DH-HMAC-CHAP key is 32, 48 or 64 bytes, not {len(key)}")
    if binascii.crc32(key).to_bytes(4, "little") != crc:
        raise InvalidKeyError("the key's CRC-32 does not match its bytes")
    return key


def new_key() -> str:
    """A fresh random key (the operating system's CSPRNG), DHHC-1 encoded."""
    return encode_key(secrets.token_bytes(KEY_BYTES))


def array_secret_name(array_id: str) -> str:
    """The array's own secret: every key; read by the control plane only."""
    return f"vsa/{array_id}/keys"


def node_secret_name(array_id: str, instance_id: str) -> str:
    """A node's copy of the keys it needs: read by that node only."""
    return f"vsa/{array_id}/node/{instance_id}"


def node_prefix(array_id: str) -> str:
    """Every node secret of the array starts with this (and no other array's does: an array id
    has no '/')."""
    return f"vsa/{array_id}/node/"


def instance_arn(partition: str, region: str, account: str, instance_id: str) -> str:
    """An instance's ARN, as ``ec2:SourceInstanceARN`` carries it."""
    return f"arn:{partition}:ec2:{region}:{account}:instance/{instance_id}"


@dataclass(frozen=True)
class ArrayKeys:
    """The array's keys: the controller key, and each host's by its NQN."""

    controller_key: str
    hosts: Mapping[str, str] = field(default_factory=dict)

    def as_secret(self) -> str:
        return json.dumps({"controllerKey": self.controller_key, "hosts": dict(sorted(self.hosts.items()))})

    @classmethod
    def from_secret(cls, text: str) -> "ArrayKeys":
        value = json.loads(text)
        if not isinstance(value, dict) or not isinstance(value.get("hosts"), dict):
            raise InvalidKeyError('the array\'s key secret is not {"controllerKey": ..., "hosts": {...}}')
        decode_key(str(value.get("controllerKey", "")))
        for key in value["hosts"].values():
            decode_key(str(key))
        return cls(controller_key=value["controllerKey"], hosts=dict(value["hosts"]))

    def controller_secret(self, nqns: Iterable[str]) -> str:
        """A controller's copy: the controller key and the listed hosts' keys (configure-target's
        KeysSecretId)."""
        return json.dumps(
            {"controllerKey": self.controller_key, "hosts": {n: self.hosts[n] for n in sorted(set(nqns))}}
        )

    def host_secret(self, nqn: str) -> str:
        """A host's copy: its own key and the controller key (connect-path's KeysSecretId)."""
        return json.dumps({"hostKey": self.hosts[nqn], "controllerKey": self.controller_key})


def converge(current: ArrayKeys | None, nqns: Iterable[str]) -> tuple[ArrayKeys, list[str]]:
    """The keys for the hosts ``nqns``: ``current``'s kept, a new key for each host without one,
    the keys of hosts no longer listed dropped; a controller key made when there is none. Answers
    the keys and what changed, in words (never a key)."""
    wanted = sorted(set(nqns))
    changes: list[str] = []
    if current is None:
        current = ArrayKeys(controller_key=new_key())
        changes.append("controller key created")
    hosts = {n: current.hosts[n] for n in wanted if n in current.hosts}
    for nqn in wanted:
        if nqn not in hosts:
            hosts[nqn] = new_key()
            changes.append(f"key created for host {nqn}")
    changes += [
        f"key dropped for host {n} (no longer listed)" for n in sorted(set(current.hosts) - set(wanted))
    ]
    return ArrayKeys(controller_key=current.controller_key, hosts=hosts), changes


def document_parameters(authentication: str, secret_name: str | None, aws_command: str) -> dict[str, str]:
    """The authentication parameters of configure-target and connect-path for one node (its own
    secret), or the ones that say no authentication."""
    if authentication != DH_HMAC_CHAP or secret_name is None:
        return {"Authentication": NONE, "KeysSecretId": "none", "AwsCommand": aws_command}
    return {"Authentication": DH_HMAC_CHAP, "KeysSecretId": secret_name, "AwsCommand": aws_command}
