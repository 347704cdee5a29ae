"""The NVMe identities of an array, derived deterministically: the same inputs give the same
names on every controller, every host, every run.

The SSM documents (``documents/*.sh``) derive exactly these values in bash; a test runs the
scripts and compares (``tests/documents``). Change both together.

* A subsystem per array volume: ``nqn.2025-01.org.vsa-control-plane:array:<array>:<volume>``.
  The array id is in the NQN so a controller can tell its array's subsystems from any other
  array's (``subsystem_nqn_prefix``); array ids contain no ``:``, so no prefix of one array is
  another's.
* Namespace 1 of that subsystem has a uuid and an nguid derived from the volume id alone
  (SHA-256 of a labelled name), so every controller exports the volume with the same identity
  and each host merges the paths into one multipath device.
* Serial and model come from the array id: identical on every controller of the array.
* Controller ids: each slot (0-15) owns a disjoint ``cntlid`` range inside 1..0xFFEF, so two
  controllers never hand a host the same controller id for one subsystem (the host would reject
  the second path: "Duplicate cntlid ... rejecting").
* The nvmet port id is the TCP port number: one nvmet port per listening TCP port, the same id
  on every controller and on every run, shared by every array the controller serves on that
  port (the kernel cannot have two listeners on one address and port).
* A host's NQN, when the spec does not name one, is the NVMe uuid form
  (``nqn.2014-08.org.nvmexpress:uuid:<uuid>``) with a uuid derived from its instance id, and
  its host id is that uuid (the pairing ``nvme gen-hostnqn`` makes).
"""

import hashlib
import re
import uuid
from typing import Final, Protocol

NQN_AUTHORITY: Final = "nqn.2025-01.org.vsa-control-plane"
"""The naming authority of the subsystem NQNs (``nqn.<yyyy-mm>.<reverse domain>``)."""

NQN_MAX_BYTES: Final = 223
"""NVMe Base Specification: an NQN is at most 223 bytes (UTF-8)."""

UUID_NQN_PREFIX: Final = "nqn.2014-08.org.nvmexpress:uuid:"
"""The NVMe-defined NQN form for a name that is a UUID (host NQNs, ``nvme gen-hostnqn``)."""

_UUID = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")

SLOTS: Final = 16
"""Controller slots 0-15: io2 Multi-Attach attaches a volume to at most 16 instances."""

CNTLID_MIN: Final = 1
CNTLID_MAX: Final = 0xFFEF
"""nvmet accepts controller ids 1..0xFFEF (0xFFF0 and above are reserved by the spec)."""

CNTLID_PER_SLOT: Final = 4000
"""Controller ids per slot: slot s owns s*4000+1 .. s*4000+4000 (slot 15 ends at 64000).
Every (host, subsystem) connection to a controller takes one id from its range, so a slot
serves e.g. 250 hosts x 16 volumes."""

SERIAL_LENGTH: Final = 20
"""The NVMe serial number field is 20 ASCII bytes; nvmet pads a shorter one with spaces."""

DEFAULT_PORT: Final = 4420
"""The IANA port of NVMe over Fabrics (NVMe/TCP I/O controllers)."""

EBS_DEVICE_PREFIX: Final = "nvme-Amazon_Elastic_Block_Store_"
"""udev names an EBS NVMe volume /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<hex>:
the model, then the serial (the volume id without its dash)."""


def _digest(label: str, name: str) -> bytes:
    """The first 16 bytes of SHA-256 over ``vsa:<label>:<name>``."""
    return hashlib.sha256(f"vsa:{label}:{name}".encode()).digest()[:16]


def _uuid8(label: str, name: str) -> str:
    """A name-based UUID (RFC 9562 version 8, the custom form, from SHA-256), lower-case."""
    value = int.from_bytes(_digest(label, name), "big")
    value = (value & ~(0xF << 76)) | (0x8 << 76)  # version 8
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # variant 10 (RFC 4122/9562)
    return str(uuid.UUID(int=value))


def subsystem_nqn_prefix(array_id: str) -> str:
    """Every subsystem NQN of the array starts with this (and no other array's does)."""
    return f"{NQN_AUTHORITY}:array:{array_id}:"


def subsystem_nqn(array_id: str, volume_id: str) -> str:
    """The NQN of the subsystem that exports ``volume_id`` for ``array_id``."""
    return f"{subsystem_nqn_prefix(array_id)}{volume_id}"


def namespace_uuid(volume_id: str) -> str:
    """The namespace's UUID (``device_uuid``): the same on every controller."""
    return _uuid8("namespace-uuid", volume_id)


def namespace_nguid(volume_id: str) -> str:
    """The namespace's NGUID (``device_nguid``, 16 bytes shown as nvmet shows them,
    8-4-4-4-12 lower-case hex): the same on every controller."""
    text = _digest("namespace-nguid", volume_id).hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def serial(array_id: str) -> str:
    """The subsystems' serial number (``attr_serial``): 20 characters, the same on every
    controller of the array."""
    return "vsa" + hashlib.sha256(f"vsa:serial:{array_id}".encode()).hexdigest()[: SERIAL_LENGTH - 3]


def model(array_id: str) -> str:
    """The subsystems' model number (``attr_model``, at most 40 characters)."""
    return f"VSA {array_id}"


def cntlid_range(slot: int) -> tuple[int, int]:
    """The controller ids (``attr_cntlid_min``, ``attr_cntlid_max``) of the controller in
    ``slot``: disjoint from every other slot's, inside 1..0xFFEF."""
    if not 0 <= slot < SLOTS:
        raise ValueError(f"slot {slot} is outside 0..{SLOTS - 1}")
    low = slot * CNTLID_PER_SLOT + 1
    return low, low + CNTLID_PER_SLOT - 1


def port_id(port: int = DEFAULT_PORT) -> int:
    """The nvmet port id (``nvmet/ports/<id>``) of the TCP port ``port``: the port number."""
    if not 1 <= port <= 0xFFFF:
        raise ValueError(f"TCP port {port} is outside 1..65535")
    return port


def device_name(volume_id: str) -> str:
    """The volume's EBS NVMe device under /dev/disk/by-id."""
    return EBS_DEVICE_PREFIX + volume_id.replace("-", "", 1)


def default_host_nqn(instance_id: str) -> str:
    """The host NQN derived from an instance id (when the spec names none)."""
    return UUID_NQN_PREFIX + _uuid8("host", instance_id)


class Host(Protocol):
    """What a host's NQN derives from (an array spec's host, ``vsa_core.arrays.spec.Host``):
    typed by its shape, so these identities depend on no capability and every layer may use them."""

    @property
    def instance_id(self) -> str: ...

    @property
    def host_nqn(self) -> str | None: ...


def host_nqn(host: Host) -> str:
    """The NQN the host connects with: the spec's ``hostNqn``, else one derived from its
    instance id. Both configure-target (allowed hosts) and connect-path use this."""
    return host.host_nqn or default_host_nqn(host.instance_id)


def host_id(nqn: str) -> str | None:
    """The host id to connect with: the uuid of a uuid-form NQN (as ``nvme gen-hostnqn`` pairs
    them); None for another form (nvme-cli then uses the host's own /etc/nvme/hostid)."""
    suffix = nqn[len(UUID_NQN_PREFIX) :]
    if nqn.startswith(UUID_NQN_PREFIX) and _UUID.fullmatch(suffix):
        return suffix
    return None
