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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from vsa_core.naming import deployment

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
    return f"{deployment()}/{array_id}/keys"


def node_secret_name(array_id: str, instance_id: str) -> str:
    """A node's copy of the keys it needs: read by that node only."""
    return f"{deployment()}/{array_id}/node/{instance_id}"


def node_prefix(array_id: str) -> str:
    """Every node secret of the array starts with this (and no other array's does: an array id
    has no '/', nor another deployment's: a deployment's name has none either)."""
    return f"{deployment()}/{array_id}/node/"


def instance_arn(partition: str, region: str, account: str, instance_id: str) -> str:
    """An instance's ARN, as ``ec2:SourceInstanceARN`` carries it."""
    return f"arn:{partition}:ec2:{region}:{account}:instance/{instance_id}"


Stage = Literal["keying", "keyed", "connected", "ctrl-keying", "ctrl-keyed", "ctrl-connected"]
"""Where a controller is in a key rotation, which takes each controller's keys in two halves,
one key of each pair at a time: the hosts' keys, then the controller key. A host re-authenticates
a live path when one of its keys is written (sysfs ``dhchap_secret`` or ``dhchap_ctrl_secret``),
and that re-authentication must find the controller holding the other key of the pair as it was:
changed together, the first write's re-authentication runs with one key new and one old and
fails (seen on 6.12: the host then resets the path). For each half: ``…keying`` the controller's
copy holds the new key and configure-target is writing it into nvmet (or was, when a run
stopped: it is sent again); ``…keyed`` nvmet holds it; ``…connected`` every host's path to the
controller uses it (connect-path succeeded on every host)."""
STAGES: Final[tuple[Stage, ...]] = (
    "keying",
    "keyed",
    "connected",
    "ctrl-keying",
    "ctrl-keyed",
    "ctrl-connected",
)
HOST_HALF: Final = ("keying", "keyed", "connected")
"""The stages at which the controller's nvmet holds (or is given) the new host keys and the old
controller key."""
PATHS_AT_NEW_HOST_KEY: Final = ("keyed", "connected", "ctrl-keying")
PATHS_AT_NEW_KEYS: Final = ("ctrl-keyed", "ctrl-connected")


@dataclass(frozen=True)
class Generation:
    """One set of keys: the controller key, and each host's by its NQN."""

    controller_key: str
    hosts: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {"controllerKey": self.controller_key, "hosts": dict(sorted(self.hosts.items()))}

    @classmethod
    def from_json(cls, value: object, what: str) -> "Generation":
        if not isinstance(value, dict) or not isinstance(value.get("hosts"), dict):
            raise InvalidKeyError(f'{what} is not {{"controllerKey": ..., "hosts": {{...}}}}')
        decode_key(str(value.get("controllerKey", "")))
        for key in value["hosts"].values():
            decode_key(str(key))
        return cls(
            controller_key=str(value["controllerKey"]),
            hosts={str(k): str(v) for k, v in value["hosts"].items()},
        )

    def for_hosts(self, wanted: Iterable[str]) -> tuple["Generation", list[str], list[str]]:
        """These keys for exactly the hosts ``wanted``: a new key for each host without one, the
        keys of hosts not wanted dropped. Answers the keys, the hosts keyed and those dropped."""
        nqns = sorted(set(wanted))
        hosts = {n: self.hosts[n] if n in self.hosts else new_key() for n in nqns}
        made = [n for n in nqns if n not in self.hosts]
        dropped = sorted(set(self.hosts) - set(nqns))
        return Generation(self.controller_key, hosts), made, dropped


def new_generation(nqns: Iterable[str]) -> Generation:
    """Fresh keys: a controller key and one key per host."""
    return Generation(controller_key=new_key(), hosts={n: new_key() for n in sorted(set(nqns))})


@dataclass(frozen=True)
class Rotation:
    """A key rotation under way (``vsactl rotate-keys``): the new keys, and each controller's
    stage. nvmet holds one key per host, so the old keys cannot stay accepted beside the new:
    the rotation goes controller by controller instead. A controller's nvmet gets the new keys
    (its live connections stay up: authentication happens at connect and at re-authentication),
    then every host's path to that controller re-authenticates with them, and only then the next
    controller; each path uses the keys of the controller it leads to (a host's copy names the
    rotated controllers' addresses), so a path that reconnects meanwhile still authenticates."""

    keys: Generation
    controllers: Mapping[str, tuple[Stage, str]] = field(default_factory=dict)
    """controller instance id → (its stage, its address)."""

    def stage(self, instance_id: str) -> Stage | None:
        entry = self.controllers.get(instance_id)
        return entry[0] if entry is not None else None


@dataclass(frozen=True)
class ArrayKeys:
    """The array's keys: the controller key, each host's by its NQN, and a rotation when one is
    under way (the new keys and how far it has come)."""

    controller_key: str
    hosts: Mapping[str, str] = field(default_factory=dict)
    rotation: Rotation | None = None

    @property
    def current(self) -> Generation:
        return Generation(self.controller_key, self.hosts)

    def as_secret(self) -> str:
        """The array's secret: the keys, and a rotation's new keys (its progress is the
        registry's: ``stages`` / ``with_stages``)."""
        value: dict[str, object] = dict(self.current.as_json())
        if self.rotation is not None:
            value["rotation"] = self.rotation.keys.as_json()
        return json.dumps(value)

    @classmethod
    def from_secret(cls, text: str) -> "ArrayKeys":
        value = json.loads(text)
        current = Generation.from_json(value, "the array's key secret")
        rotation = None
        if isinstance(value, dict) and value.get("rotation") is not None:
            rotation = Rotation(Generation.from_json(value["rotation"], "the array's key rotation"))
        return cls(controller_key=current.controller_key, hosts=current.hosts, rotation=rotation)

    def stages(self) -> dict[str, dict[str, str]]:
        """The rotation's progress as the registry keeps it (empty without a rotation)."""
        if self.rotation is None:
            return {}
        return {
            i: {"stage": stage, "address": a} for i, (stage, a) in sorted(self.rotation.controllers.items())
        }

    def with_stages(self, stages: Mapping[str, Mapping[str, str]]) -> "ArrayKeys":
        """These keys with a rotation's progress as the registry keeps it (``stages``); without a
        rotation the progress is stale (a rotation's end recorded in the secret first) and
        ignored."""
        if self.rotation is None:
            return self
        controllers: dict[str, tuple[Stage, str]] = {}
        for instance_id, entry in stages.items():
            stage = entry.get("stage")
            if stage not in STAGES:
                raise InvalidKeyError(f"the key rotation's stage of {instance_id} is not one of {STAGES}")
            controllers[str(instance_id)] = (stage, str(entry.get("address", "")))
        return ArrayKeys(self.controller_key, self.hosts, Rotation(self.rotation.keys, controllers))

    def generation_of(self, instance_id: str) -> Generation:
        """The keys a controller's nvmet holds, or is being given: the new host keys with the
        old controller key in the rotation's first half, all new keys in its second."""
        stage = self.rotation.stage(instance_id) if self.rotation is not None else None
        if self.rotation is None or stage is None:
            return self.current
        if stage in HOST_HALF:
            return Generation(self.controller_key, self.rotation.keys.hosts)
        return self.rotation.keys

    def controller_secret(self, nqns: Iterable[str], instance_id: str = "") -> str:
        """A controller's copy: the controller key and the listed hosts' keys (configure-target's
        KeysSecretId), of the generation that controller is at."""
        keys = self.generation_of(instance_id)
        return json.dumps(
            {"controllerKey": keys.controller_key, "hosts": {n: keys.hosts[n] for n in sorted(set(nqns))}}
        )

    def host_secret(self, nqn: str) -> str:
        """A host's copy: its own key and the controller key (connect-path's KeysSecretId); during
        a rotation, under ``paths``, the keys of each controller whose nvmet holds new ones, as it
        holds them (by its address: connect-path takes the keys of the address it connects to)."""
        value: dict[str, object] = {"hostKey": self.hosts[nqn], "controllerKey": self.controller_key}
        if self.rotation is not None:
            new = self.rotation.keys
            paths = {
                address: {
                    "hostKey": new.hosts[nqn],
                    "controllerKey": new.controller_key
                    if stage in PATHS_AT_NEW_KEYS
                    else self.controller_key,
                }
                for _, (stage, address) in sorted(self.rotation.controllers.items())
                if stage in (*PATHS_AT_NEW_HOST_KEY, *PATHS_AT_NEW_KEYS) and address
            }
            if paths:
                value["paths"] = dict(sorted(paths.items()))
        return json.dumps(value)

    def begin_rotation(self) -> tuple["ArrayKeys", bool]:
        """New keys for the controller and every host, no controller at them yet; a rotation
        already under way is kept (asked again, it goes on). Whether one began."""
        if self.rotation is not None:
            return self, False
        return ArrayKeys(self.controller_key, self.hosts, Rotation(new_generation(self.hosts))), True

    def at_stage(self, instance_id: str, stage: Stage, address: str) -> "ArrayKeys":
        """The rotation with ``instance_id`` at ``stage`` (its address as given)."""
        if self.rotation is None:
            raise ValueError("no key rotation is under way")
        controllers = {**self.rotation.controllers, instance_id: (stage, address)}
        return ArrayKeys(self.controller_key, self.hosts, Rotation(self.rotation.keys, controllers))

    def promoted(self) -> "ArrayKeys":
        """The rotation's keys as the array's: the old ones are gone."""
        if self.rotation is None:
            return self
        return ArrayKeys(self.rotation.keys.controller_key, self.rotation.keys.hosts)


SECRET_STRING_LIMIT: Final = 65_536
"""Secrets Manager's largest SecretString, in bytes (CreateSecret / PutSecretValue API
reference: "Length Constraints: Maximum length of 65536"; botocore's model says so too)."""


def size_problem(nqns: Iterable[str]) -> str | None:
    """Why the keys of hosts ``nqns`` cannot be kept in Secrets Manager, or None. The largest
    secret an array has is its own during a key rotation: two generations, every host's key in
    each (a controller's copy holds one). Keys have a fixed length, so fresh ones measure it."""
    wanted = sorted(set(nqns))
    rotating = ArrayKeys(new_key(), new_generation(wanted).hosts, Rotation(new_generation(wanted)))
    size = len(rotating.as_secret().encode())
    if size <= SECRET_STRING_LIMIT:
        return None
    fits = len(wanted) * SECRET_STRING_LIMIT // size
    return (
        f"authentication dh-hmac-chap: the array's keys for {len(wanted)} hosts take {size:,} bytes "
        f"during a key rotation (two keys per host, by host NQN), over Secrets Manager's "
        f"{SECRET_STRING_LIMIT:,}-byte secret: declare at most about {fits} hosts with these NQNs "
        "(or shorter hostNqn values), or split them across arrays"
    )


def converge(current: ArrayKeys | None, nqns: Iterable[str]) -> tuple[ArrayKeys, list[str]]:
    """The keys for the hosts ``nqns``: ``current``'s kept, a new key for each host without one,
    the keys of hosts no longer listed dropped (in both generations during a rotation); a
    controller key made when there is none. Answers the keys and what changed, in words (never
    a key)."""
    wanted = sorted(set(nqns))
    changes: list[str] = []
    if current is None:
        current = ArrayKeys(controller_key=new_key())
        changes.append("controller key created")
    keys, made, dropped = current.current.for_hosts(wanted)
    changes += [f"key created for host {n}" for n in made]
    changes += [f"key dropped for host {n} (no longer listed)" for n in dropped]
    rotation = current.rotation
    if rotation is not None:
        new, made, dropped = rotation.keys.for_hosts(wanted)
        if made or dropped:
            changes.append("rotation's new keys follow the hosts")
        rotation = Rotation(new, rotation.controllers)
    return ArrayKeys(keys.controller_key, keys.hosts, rotation), changes


RekeyKind = Literal["none", "target", "paths", "promote"]


@dataclass(frozen=True)
class RekeyStep:
    """The key rotation's next action (``rekey_step``): ``target`` configure-target on one
    controller after its stage is set to ``begin``; ``paths`` connect-path on every host for its
    address; either records ``done`` once it succeeded."""

    kind: RekeyKind
    instance_id: str = ""
    address: str = ""
    reason: str = ""
    begin: Stage | None = None
    done: Stage | None = None


_NEXT: Final[Mapping[Stage | None, tuple[RekeyKind, Stage | None, Stage, str]]] = {
    None: ("target", "keying", "keyed", "the hosts' new keys into nvmet on {c}"),
    "keying": ("target", "keying", "keyed", "the hosts' new keys into nvmet on {c}"),
    "keyed": ("paths", None, "connected", "hosts' paths to {c} re-authenticate with their new keys"),
    "connected": ("target", "ctrl-keying", "ctrl-keyed", "the new controller key into nvmet on {c}"),
    "ctrl-keying": ("target", "ctrl-keying", "ctrl-keyed", "the new controller key into nvmet on {c}"),
    "ctrl-keyed": (
        "paths",
        None,
        "ctrl-connected",
        "hosts' paths to {c} re-authenticate it with the new controller key",
    ),
}


def rekey_step(keys: ArrayKeys | None, serving: Sequence[tuple[str, str]]) -> RekeyStep:
    """What the rotation does next, given the serving controllers ``(instance id, address)`` in
    slot order: nothing without one; else the first controller not through both halves takes
    its next action (``_NEXT``: its hosts' keys into nvmet, its hosts' paths re-authenticating,
    the controller key into nvmet, the paths again; a controller left ``…keying`` by a stopped
    run gets configure-target again); else every serving controller and path is at the new keys
    and they become the array's (``promote``). A controller that left the array mid-rotation is
    not waited for; one that joined is rotated too (it bootstrapped with the old keys)."""
    if keys is None or keys.rotation is None:
        return RekeyStep("none", reason="no key rotation under way")
    rotation = keys.rotation
    total = len(serving)
    for number, (instance_id, address) in enumerate(serving, start=1):
        stage = rotation.stage(instance_id)
        if stage is not None and rotation.controllers[instance_id][1] != address:
            stage = None  # the same instance at another address: from the start
        if stage == "ctrl-connected":
            continue
        kind, begin, done, said = _NEXT[stage]
        reason = f"{said.format(c=instance_id)} ({number} of {total})"
        return RekeyStep(kind, instance_id, address, reason, begin, done)
    return RekeyStep(
        "promote", reason=f"all {total} controllers and their paths at the new keys: old keys removed"
    )


def document_parameters(authentication: str, secret_name: str | None, aws_command: str) -> dict[str, str]:
    """The authentication parameters of configure-target and connect-path for one node (its own
    secret), or the ones that say no authentication."""
    if authentication != DH_HMAC_CHAP or secret_name is None:
        return {"Authentication": NONE, "KeysSecretId": "none", "AwsCommand": aws_command}
    return {"Authentication": DH_HMAC_CHAP, "KeysSecretId": secret_name, "AwsCommand": aws_command}
