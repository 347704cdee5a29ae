"""Who the controllers' security groups let reach NVMe/TCP (pure).

An NQN is no secret, so the network is the first gate: port 4420 of a controller may be open to
the array's hosts only, by their security groups or by their own addresses, never to a CIDR
range, a prefix list or another group. Rules are read as EC2's DescribeSecurityGroups answers
them (``IpPermissions``: ``IpProtocol`` "-1" is every protocol and port; "tcp" or "6" with
``FromPort``..``ToPort``).
"""

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vsa_core.arrays.spec import NVME_TCP_PORT


@dataclass(frozen=True)
class HostAccess:
    """What identifies a host on the network: its security groups and its addresses."""

    instance_id: str
    groups: frozenset[str]
    addresses: frozenset[str]


def _opens_port(permission: Mapping[str, Any], port: int) -> bool:
    protocol = str(permission.get("IpProtocol", ""))
    if protocol == "-1":
        return True
    if protocol not in ("tcp", "6"):
        return False
    return int(permission.get("FromPort", 0)) <= port <= int(permission.get("ToPort", 65535))


def _single_address(cidr: str) -> str | None:
    network = ipaddress.ip_network(cidr, strict=False)
    return str(network.network_address) if network.num_addresses == 1 else None


def strangers(group: Mapping[str, Any], hosts: Iterable[HostAccess], port: int = NVME_TCP_PORT) -> list[str]:
    """Every source ``group``'s inbound rules open ``port`` to that is not one of ``hosts``."""
    hosts = list(hosts)
    host_groups = {g for h in hosts for g in h.groups}
    host_addresses = {a for h in hosts for a in h.addresses}
    found: list[str] = []
    for permission in group.get("IpPermissions", []):
        if not _opens_port(permission, port):
            continue
        for pair in permission.get("UserIdGroupPairs", []):
            if pair.get("GroupId") not in host_groups:
                found.append(f"security group {pair.get('GroupId')}")
        for ranges, key in (("IpRanges", "CidrIp"), ("Ipv6Ranges", "CidrIpv6")):
            for item in permission.get(ranges, []):
                cidr = str(item.get(key))
                if _single_address(cidr) not in host_addresses:
                    found.append(cidr)
        found += [f"prefix list {p.get('PrefixListId')}" for p in permission.get("PrefixListIds", [])]
    return found


def admitted(group: Mapping[str, Any], host: HostAccess, port: int = NVME_TCP_PORT) -> bool:
    """Whether ``group``'s inbound rules let ``host`` reach ``port``."""
    for permission in group.get("IpPermissions", []):
        if not _opens_port(permission, port):
            continue
        if any(p.get("GroupId") in host.groups for p in permission.get("UserIdGroupPairs", [])):
            return True
        cidrs = [r.get("CidrIp") for r in permission.get("IpRanges", [])] + [
            r.get("CidrIpv6") for r in permission.get("Ipv6Ranges", [])
        ]
        if any(_single_address(str(c)) in host.addresses for c in cidrs):
            return True
    return False


def problems(
    groups: list[Mapping[str, Any]], hosts: list[HostAccess], port: int = NVME_TCP_PORT
) -> list[str]:
    """What to fix in the controllers' security groups: port ``port`` open to anything but the
    array's hosts; a host that none of them admits."""
    found: list[str] = []
    for group in groups:
        others = strangers(group, hosts, port)
        if others:
            found.append(
                f"controllers.securityGroupIds {group['GroupId']} opens port {port} (NVMe/TCP) to "
                f"{', '.join(sorted(set(others)))}, which is not a host of this array: open port {port} "
                "only to the hosts' security groups or their addresses (/32)"
            )
    for host in hosts:
        if groups and not any(admitted(g, host, port) for g in groups):
            found.append(
                f"host {host.instance_id} cannot reach port {port} (NVMe/TCP): no security group in "
                f"controllers.securityGroupIds admits it; allow port {port} from its security group "
                f"({', '.join(sorted(host.groups)) or 'none'}) or its address"
            )
    return found
