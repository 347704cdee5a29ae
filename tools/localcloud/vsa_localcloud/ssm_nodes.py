"""Local SSM managed nodes: an EC2 instance of the local cloud plus a sandbox directory of its own.

A node is registered explicitly through the control endpoint (``register_node``), or, after
``configure {"auto_register": true}``, every running EC2 instance of the local cloud is one (as
instances launched with an instance profile that lets their SSM agent register become managed
nodes): looked up whenever Run Command needs its nodes, so instances an Auto Scaling group
launches are nodes too. Its sandbox is ``<data dir>/ssm-nodes/<instance-id>/`` where
``<data dir>`` is the local cloud's run directory (the parent of LocalStack's
``FILESYSTEM_ROOT``), so it is wiped with the rest of the state at the next start. ``set_ping``
takes a node offline (``ConnectionLost``) or back ``Online``, as an agent losing and regaining
its connection would.

The sandbox is the node's root file system: every EBS volume attached to its instance appears as
``<sandbox>/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<hex>``, as udev names an EBS NVMe
device on a Nitro instance, and disappears when the volume is detached or the instance terminates
(``sync_devices``, called by the EBS model on every attach, detach and growth, and when a node
registers). The device is a symbolic link to the volume's one data file in the run directory
(``ebs_data``: sparse, as long as the volume, grown in place when a modification of the volume
reaches ``optimizing``; a fresh volume's first line is its id), so what one node writes through
its device every node the volume is attached to reads through its own, and a snapshot copies it.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moto.ec2.models import ec2_backends

from vsa_localcloud import ebs_data, timings
from vsa_localcloud.run_dir import data_dir

DEFAULT_ACCOUNT = "000000000000"
DEFAULT_REGION = "us-east-1"
AGENT_VERSION = "3.3.1611.0"
PING_STATUSES = ("Online", "ConnectionLost")
# EC2 states in which AWS refuses to send a command to an instance (SendCommand: InvalidInstanceId)
GONE_STATES = ("shutting-down", "terminated")
BOOT_ID_FILE = "proc/sys/kernel/random/boot_id"
"""Inside a node's sandbox (the stack's NodeBootIdFile on the local cloud)."""

DEVICE_DIR = "dev/disk/by-id"


@dataclass
class Settings:
    """What tests may change through ``CONTROL["configure"]``."""

    auto_register: bool = False  # every running EC2 instance is a managed node


SETTINGS = Settings()

# One lock and condition for all Run Command state: nodes, commands and invocations. Invocation
# threads wait on it for a node to come back online, for a cancel, or for their deadline.
LOCK = threading.RLock()
CHANGED = threading.Condition(LOCK)


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Node:
    instance_id: str
    account_id: str
    region: str
    root: Path
    ip_address: str
    computer_name: str
    ping_status: str = "Online"
    last_ping: datetime = field(default_factory=now)
    registered: datetime = field(default_factory=now)

    def ping(self) -> str | None:
        """The node's PingStatus: its agent is connected only while its EC2 instance runs (a
        stopped instance shows ConnectionLost); None once the instance is terminated."""
        instance = ec2_instance(self.account_id, self.region, self.instance_id)
        if instance is None or instance.state in GONE_STATES:
            return None
        return self.ping_status if instance.state == "running" else "ConnectionLost"

    @property
    def online(self) -> bool:
        return self.ping() == "Online"

    def information(self) -> dict[str, Any]:
        """An ``InstanceInformation`` as DescribeInstanceInformation answers it for an EC2 node."""
        return {
            "InstanceId": self.instance_id,
            "PingStatus": self.ping(),
            "LastPingDateTime": self.last_ping,
            "AgentVersion": AGENT_VERSION,
            "IsLatestVersion": True,
            "PlatformType": "Linux",
            "PlatformName": "Amazon Linux",
            "PlatformVersion": "2023",
            "ResourceType": "EC2Instance",
            "IPAddress": self.ip_address,
            "ComputerName": self.computer_name,
            "AssociationStatus": "Success",
            "LastAssociationExecutionDate": self.registered,
            "LastSuccessfulAssociationExecutionDate": self.registered,
            "SourceId": self.instance_id,
            "SourceType": "AWS::EC2::Instance",
        }


# (account, region) -> instance id -> node
NODES: dict[tuple[str, str], dict[str, Node]] = {}
# Instances deregistered explicitly: auto_register leaves them alone (an instance whose agent
# was removed does not come back by itself), until register_node registers them again.
DEREGISTERED: set[tuple[str, str, str]] = set()


def ec2_instance(account_id: str, region: str, instance_id: str) -> Any | None:
    """The instance in the local cloud's EC2 (moto's backend, shared with the EC2 provider)."""
    try:
        return ec2_backends[account_id][region].get_instance(instance_id)
    except Exception:  # noqa: BLE001 - moto raises its own InvalidInstanceIdError for unknown ids
        return None


def instance_gone(account_id: str, region: str, instance_id: str) -> bool:
    instance = ec2_instance(account_id, region, instance_id)
    return instance is None or instance.state in GONE_STATES


def node(account_id: str, region: str, instance_id: str) -> Node | None:
    _auto_register(account_id, region)
    return NODES.get((account_id, region), {}).get(instance_id)


def nodes(account_id: str, region: str) -> list[Node]:
    _auto_register(account_id, region)
    return list(NODES.get((account_id, region), {}).values())


def _new_node(account_id: str, region: str, instance: Any) -> Node:
    """Register a running instance (under LOCK): its sandbox, its attached volumes' devices."""
    root = data_dir() / "ssm-nodes" / instance.id
    root.mkdir(parents=True, exist_ok=True)
    # the node's kernel boot id, as Linux shows it (a random UUID per boot): configure-target
    # derives the controller's NVMe reservation key from it, so each instance needs its own
    boot_id = root / BOOT_ID_FILE
    if not boot_id.exists():
        boot_id.parent.mkdir(parents=True, exist_ok=True)
        boot_id.write_text(f"{uuid.uuid4()}\n")
    managed = Node(
        instance_id=instance.id,
        account_id=account_id,
        region=region,
        root=root,
        ip_address=instance.private_ip or "",
        computer_name=instance.private_dns_name or instance.id,
    )
    NODES.setdefault((account_id, region), {})[instance.id] = managed
    _sync_devices(managed, instance)
    return managed


def _auto_register(account_id: str, region: str) -> None:
    """With ``auto_register`` on, every running instance of the region not yet a node becomes one."""
    if not SETTINGS.auto_register:
        return
    try:
        instances = ec2_backends[account_id][region].all_instances()
    except Exception:  # noqa: BLE001 - a region moto cannot create holds no instances
        return
    with CHANGED:
        known = NODES.get((account_id, region), {})
        fresh = [
            i
            for i in instances
            if i.state == "running"
            and i.id not in known
            and (account_id, region, i.id) not in DEREGISTERED
            and _agent_started(i)
        ]
        for instance in fresh:
            _new_node(account_id, region, instance)
        if fresh:
            CHANGED.notify_all()


def _agent_started(instance: Any) -> bool:
    """The SSM agent registers ``ssm_agent_online`` seconds (latency profile) after the instance
    started running: counted from launch plus the profile's ``instance_pending``, or from the
    moment the instance model recorded it running (``vsa_running_since``, epoch seconds)."""
    delay = timings.current().ssm_agent_online
    if delay <= 0:
        return True
    since = instance.__dict__.get("vsa_running_since")
    if since is None:
        launched = instance.launch_time  # moto: a naive datetime in UTC
        if isinstance(launched, str):
            launched = datetime.fromisoformat(launched.replace("Z", "+00:00"))
        if launched.tzinfo is None:
            launched = launched.replace(tzinfo=UTC)
        since = launched.timestamp() + timings.current().instance_pending
    return bool(now().timestamp() >= since + delay)


def _sync_devices(managed: Node, instance: Any | None) -> None:
    """One device file per EBS volume attached to the instance (none once it is gone)."""
    attached = []
    if instance is not None and instance.state not in GONE_STATES:
        # only attachments that completed: not while "attaching", no longer once "detaching"
        attached = [
            m.volume_id
            for m in list(instance.block_device_mapping.values())
            if m.volume_id and getattr(m, "status", None) in ("in-use", "attached", None)
        ]
    sizes = (
        {
            m.volume_id: int(getattr(m, "size", 0) or 0)
            for m in list(instance.block_device_mapping.values())
            if m.volume_id
        }
        if instance is not None
        else {}
    )
    wanted = {ebs_data.device_name(v): v for v in attached}
    directory = managed.root / DEVICE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for existing in directory.glob(ebs_data.EBS_DEVICE_PREFIX + "*"):
        if existing.name not in wanted:
            existing.unlink(missing_ok=True)
    for name, volume_id in wanted.items():
        # the volume's one file, as long as the volume: a block device's size is what the
        # controllers export and the hosts see (GiB, EBS's unit)
        data = ebs_data.ensure_volume(volume_id, sizes.get(volume_id, 0))
        device = directory / name
        # A symbolic link, not a hard link, to the one file every node shares (a write through
        # one node's device is read through another's either way). udev's by-id names are links
        # too, and what the documents do with the path follows a link (-e, -f, stat -L, readlink
        # -f, nvme-cli's open). The choice is configure-target's attachment identity (fencing.sh:
        # ``stat -L -c %i:%z``, the device's inode and change time): through a link it is the
        # volume file's, which changes only when the volume's data or size does; a hard link's
        # change time would also change whenever another node attaches or detaches the volume
        # (a link count change), so a fenced controller would take a replacement's attachment for
        # a new attachment of its own and register again instead of fencing itself.
        if not device.is_symlink() or device.readlink() != data:
            device.unlink(missing_ok=True)
            device.symlink_to(data)


def sync_devices(account_id: str, region: str, instance_id: str) -> None:
    """The EBS model attached or detached a volume of this instance (or terminated it): its
    node's /dev/disk/by-id follows. Nothing for an instance that is not a managed node."""
    with CHANGED:
        managed = node(account_id, region, instance_id)
        if managed is not None:
            _sync_devices(managed, ec2_instance(account_id, region, instance_id))


def configure(body: dict[str, Any]) -> dict[str, Any]:
    """``{"auto_register": true|false}`` or ``{"reset": true}``; answers the settings. Nodes
    registered automatically stay nodes when it is turned off (as registered agents do)."""
    with CHANGED:
        if body.pop("reset", False):
            SETTINGS.auto_register = Settings().auto_register
        for key, value in body.items():
            if key not in asdict(SETTINGS):
                raise ValueError(f"unknown setting {key!r}; one of {', '.join(asdict(SETTINGS))}")
            if not isinstance(value, bool):
                raise ValueError(f"{key} takes true or false")
            setattr(SETTINGS, key, value)
        CHANGED.notify_all()
        return asdict(SETTINGS)


def _where(body: dict[str, Any]) -> tuple[str, str, str]:
    instance_id = body.get("InstanceId")
    if not isinstance(instance_id, str) or not instance_id:
        raise ValueError("InstanceId is required")
    return str(body.get("AccountId", DEFAULT_ACCOUNT)), str(body.get("Region", DEFAULT_REGION)), instance_id


def register_node(body: dict[str, Any]) -> dict[str, Any]:
    """``{"InstanceId"[, "AccountId", "Region"]}`` -> the node's sandbox path. Idempotent."""
    account_id, region, instance_id = _where(body)
    instance = ec2_instance(account_id, region, instance_id)
    if instance is None:
        raise ValueError(f"no EC2 instance {instance_id} in {account_id}/{region}")
    if instance.state in GONE_STATES:
        raise ValueError(f"EC2 instance {instance_id} is {instance.state}")
    with CHANGED:
        DEREGISTERED.discard((account_id, region, instance_id))
        existing = node(account_id, region, instance_id)
        if existing is None:
            existing = _new_node(account_id, region, instance)
        CHANGED.notify_all()
        return {"InstanceId": instance_id, "Root": str(existing.root), "PingStatus": existing.ping_status}


def set_ping(body: dict[str, Any]) -> dict[str, Any]:
    """``{"InstanceId", "PingStatus": "Online"|"ConnectionLost"}``: a node coming back online
    receives the commands still pending for it (within their delivery timeout)."""
    account_id, region, instance_id = _where(body)
    status = body.get("PingStatus")
    if status not in PING_STATUSES:
        raise ValueError(f"PingStatus must be one of {', '.join(PING_STATUSES)}")
    with CHANGED:
        managed = node(account_id, region, instance_id)
        if managed is None:
            raise ValueError(f"{instance_id} is not a managed node; register_node it first")
        managed.ping_status = status
        if status == "Online":
            managed.last_ping = now()
        CHANGED.notify_all()
        return {"InstanceId": instance_id, "PingStatus": status}


def deregister_node(body: dict[str, Any]) -> dict[str, Any]:
    """``{"InstanceId"}``: no longer managed; commands still pending for it end Undeliverable.
    The sandbox directory is kept (as a deregistered instance keeps its disk). ``auto_register``
    does not make it a node again; ``register_node`` does."""
    account_id, region, instance_id = _where(body)
    with CHANGED:
        DEREGISTERED.add((account_id, region, instance_id))
        removed = NODES.get((account_id, region), {}).pop(instance_id, None)
        CHANGED.notify_all()
    return {"InstanceId": instance_id, "Deregistered": removed is not None}
