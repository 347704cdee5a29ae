"""The data plane: what the spec asks of every controller and host, against what each node last
reported it sees (the documents' JSON reports), with every difference named in words. Pure.

A controller's report is configure-target's (``exports``: the array's subsystems read back from
nvmet's configfs, each with its namespaces, their size and state, its allowed hosts and the
ports it is linked to). A host's is connect-path's or disconnect-path's, whichever ran last
(``subsystems``: per subsystem each path with its address and state, the IO policy, the
multipath head's size). ``compare`` is what ``GET /arrays/{id}`` shows as the array's drift, and
what a dry-run shows as the data plane's part of the plan.

With ``authentication: dh-hmac-chap`` a controller's report also says how it authenticates:
configure-target's ``authentication`` (``method``, and ``keyedHosts``: the host NQNs whose key it
wrote into nvmet). A report without it (report-exports', or a configure-target older than the
field) says nothing about keys: ``unknown``, never drift. A keyed host the spec no longer allows
is no drift either: nvmet cannot clear a key (only removing the host entry does).

Only **serving** controllers (their slot says so) are expected to export and to be reached by
every host: a controller still bootstrapping or already draining is on its way in or out, and
its workflow owns its paths.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vsa_core.arrays.keys import DH_HMAC_CHAP, NONE, Authentication
from vsa_core.nvme import subsystem_nqn_prefix

GIB = 2**30
IO_POLICY = "round-robin"
"""The multipath IO policy connect-path sets (its IoPolicy's default, what the workflows send)."""


@dataclass(frozen=True)
class Report:
    """A node's last report: the JSON object its document printed last, when and by what."""

    document: str
    command_id: str
    at: str | None
    status: str
    body: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """What the status shows of it: ``at`` is when the run was requested, ``observedAt`` when
        it read the node (None: a report of a document older than that field)."""
        observed = self.body.get("observedAt")
        return {
            "document": self.document,
            "commandId": self.command_id,
            "at": self.at,
            "observedAt": observed if isinstance(observed, str) else None,
            "status": self.status,
        }


def parse_report(stdout: str) -> dict[str, Any] | None:
    """The report in a document's stdout: its last line that is a JSON object, or None."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


@dataclass(frozen=True)
class Volume:
    """A volume the array serves: its id (None while an apply has not created it), the name
    the spec gives it, and its size on EBS (what every namespace and host should show)."""

    volume_id: str | None
    name: str
    size_gib: int | None = None


@dataclass(frozen=True)
class Controller:
    """A controller of the group as the registry and EC2 know it."""

    instance_id: str
    address: str | None
    slot: int | None
    state: str | None  # the slot's: bootstrapping, serving, draining (None: no slot)


@dataclass(frozen=True)
class Host:
    instance_id: str
    host_nqn: str


@dataclass(frozen=True)
class Difference:
    """One way the data plane is not what the spec asks: ``node`` the instance it is seen on,
    ``kind`` a stable name, ``text`` the difference in words."""

    node: str
    kind: str
    text: str
    volume: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "kind": self.kind, "volume": self.volume, "text": self.text}


@dataclass(frozen=True)
class Desired:
    array_id: str
    volumes: Sequence[Volume]
    hosts: Sequence[Host]
    allow_any_host: bool = False
    io_policy: str = IO_POLICY
    authentication: Authentication = NONE
    """How hosts authenticate (the spec's): with dh-hmac-chap every serving controller holds a
    key for every host in ``hosts``."""


@dataclass(frozen=True)
class Observed:
    """What AWS and the nodes say: the group's controllers, each volume's attachments (EC2),
    and each node's last report (None when it has reported nothing). ``authentication_reports``:
    per controller, the report to read its authentication from when its last report carries
    none (its last configure-target's: report-exports, the health check's, says nothing of keys)."""

    controllers: Sequence[Controller]
    attachments: Mapping[str, frozenset[str]] = field(default_factory=dict)
    controller_reports: Mapping[str, Report | None] = field(default_factory=dict)
    host_reports: Mapping[str, Report | None] = field(default_factory=dict)
    authentication_reports: Mapping[str, Report | None] = field(default_factory=dict)


UNKNOWN = "unknown"


@dataclass(frozen=True)
class Authenticating:
    """How a controller authenticates hosts as its report says: ``method`` ``unknown`` when no
    report says (before the field existed, or only report-exports'), ``keyed_hosts`` None when
    the report names none (unknown, not empty: a teardown's, or an unknown method)."""

    method: str = UNKNOWN
    keyed_hosts: frozenset[str] | None = None
    document: str | None = None

    def as_dict(self) -> dict[str, Any]:
        keyed = None if self.keyed_hosts is None else sorted(self.keyed_hosts)
        return {"method": self.method, "keyedHosts": keyed, "document": self.document}


def authentication_of(report: Report | None) -> Authenticating | None:
    """The ``authentication`` a report carries, or None when it carries none."""
    if report is None:
        return None
    value = report.body.get("authentication")
    if not isinstance(value, Mapping) or not isinstance(value.get("method"), str):
        return None
    keyed = value.get("keyedHosts")
    return Authenticating(
        method=str(value["method"]),
        keyed_hosts=frozenset(str(h) for h in keyed) if isinstance(keyed, list) else None,
        document=report.document,
    )


def authenticating(observed: Observed, instance_id: str) -> Authenticating:
    """How a controller authenticates: its last report's word, else its last configure-target's,
    else ``unknown``."""
    return (
        authentication_of(observed.controller_reports.get(instance_id))
        or authentication_of(observed.authentication_reports.get(instance_id))
        or Authenticating()
    )


def _gib(size: Any) -> str:
    return f"{size / GIB:g} GiB" if isinstance(size, int | float) else "an unknown size"


def _label(volume: Volume) -> str:
    return (
        volume.name
        if volume.volume_id is None or volume.name == volume.volume_id
        else (f"{volume.name} ({volume.volume_id})")
    )


def exports_of(report: Report | None, array_id: str) -> dict[str, Mapping[str, Any]]:
    """The array's subsystems a controller's report shows exported, by volume id."""
    if report is None:
        return {}
    prefix = subsystem_nqn_prefix(array_id)
    return {
        str(e["nqn"]).removeprefix(prefix): e
        for e in report.body.get("exports") or []
        if str(e.get("nqn", "")).startswith(prefix)
    }


def subsystems_of(report: Report | None, array_id: str) -> dict[str, Mapping[str, Any]]:
    """The array's subsystems a host's report shows, by volume id."""
    if report is None:
        return {}
    prefix = subsystem_nqn_prefix(array_id)
    return {
        str(s["nqn"]).removeprefix(prefix): s
        for s in report.body.get("subsystems") or []
        if str(s.get("nqn", "")).startswith(prefix)
    }


def serving(observed: Observed) -> list[Controller]:
    return [c for c in observed.controllers if c.state == "serving"]


def compare(desired: Desired, observed: Observed) -> list[Difference]:
    """Every difference between what ``desired`` asks of the serving controllers and the hosts
    and what they report, controllers first, then hosts, each in a stable order."""
    differences: list[Difference] = []
    for controller in serving(observed):
        differences += _controller_differences(desired, observed, controller)
    for host in desired.hosts:
        differences += _host_differences(desired, observed, host)
    return differences


def _controller_differences(desired: Desired, observed: Observed, controller: Controller) -> list[Difference]:
    node = controller.instance_id
    where = f"controller {node} (slot {controller.slot}, {controller.address})"
    found: list[Difference] = []

    def add(kind: str, text: str, volume: str | None = None) -> None:
        found.append(Difference(node, kind, text, volume))

    for volume in desired.volumes:
        attached = observed.attachments.get(volume.volume_id or "", frozenset())
        if volume.volume_id is not None and node not in attached:
            add("not-attached", f"volume {_label(volume)} is not attached to {where}", volume.name)
    report = observed.controller_reports.get(node)
    if report is None:
        add("no-report", f"{where} has reported nothing (no configure-target in SSM's history)")
        return found
    exports = exports_of(report, desired.array_id)
    wanted_hosts = sorted(h.host_nqn for h in desired.hosts)
    for volume in desired.volumes:
        if volume.volume_id is None:
            continue
        export = exports.get(volume.volume_id)
        if export is None:
            add("not-exported", f"{where} does not export volume {_label(volume)}", volume.name)
            continue
        found += _export_differences(desired, node, where, volume, export, wanted_hosts)
    known = {v.volume_id for v in desired.volumes}
    for volume_id in sorted(set(exports) - known):
        text = f"{where} exports volume {volume_id}, which the spec does not declare"
        add("exported-not-declared", text, volume_id)
    if desired.authentication == DH_HMAC_CHAP:
        found += _key_differences(node, where, authenticating(observed, node), wanted_hosts)
    return found


OBSERVED = "observed"
"""report-exports' method: the keyed hosts as nvmet's configfs shows them now (whatever the
last configure-target was asked)."""
REMEDY = "a ReconcileArray run (vsactl apply; the drift check starts one) writes"


def _key_differences(
    node: str, where: str, seen: Authenticating, wanted_hosts: list[str]
) -> list[Difference]:
    """What a controller lacks of dh-hmac-chap, as its report says: an unknown method or
    unnamed keyed hosts say nothing; a host keyed but no longer wanted is no difference (nvmet
    cannot clear a key)."""
    if seen.method == UNKNOWN:
        return []
    if seen.method not in (DH_HMAC_CHAP, OBSERVED):
        text = (
            f"{where} authenticates no host (its configure-target ran with authentication "
            f"{seen.method}), the spec asks dh-hmac-chap: allowed hosts connect without a key; "
            f"{REMEDY} every host's key"
        )
        return [Difference(node, "no-authentication", text)]
    if seen.keyed_hosts is None:
        return []
    return [
        Difference(
            node,
            "host-not-keyed",
            f"{where} holds no DH-HMAC-CHAP key for host {nqn}: it admits that host without "
            f"authenticating it, or refuses it if it does not allow it; {REMEDY} the key",
        )
        for nqn in wanted_hosts
        if nqn not in seen.keyed_hosts
    ]


def _export_differences(
    desired: Desired,
    node: str,
    where: str,
    volume: Volume,
    export: Mapping[str, Any],
    wanted_hosts: list[str],
) -> list[Difference]:
    found: list[Difference] = []
    label = _label(volume)

    def add(kind: str, text: str) -> None:
        found.append(Difference(node, kind, text, volume.name))

    namespaces = list(export.get("namespaces") or [])
    if not any(n.get("enabled") for n in namespaces):
        add("namespace-disabled", f"{where} has volume {label}'s namespace disabled")
    if not export.get("ports"):
        add("not-listening", f"{where} links volume {label} to no port: no host can reach it")
    if volume.size_gib is not None:
        for namespace in namespaces:
            size = namespace.get("sizeBytes")
            if isinstance(size, int) and size != volume.size_gib * GIB:
                add("size", f"{where} exports volume {label} at {_gib(size)}, EBS says {volume.size_gib} GiB")
    if not desired.allow_any_host:
        allowed = sorted(str(h) for h in export.get("allowedHosts") or [])
        if export.get("allowAnyHost"):
            add("allows-any-host", f"{where} lets any host connect to volume {label}")
        for nqn in sorted(set(wanted_hosts) - set(allowed)):
            add("host-not-allowed", f"{where} does not allow host {nqn} to volume {label}")
        for nqn in sorted(set(allowed) - set(wanted_hosts)):
            text = f"{where} allows host {nqn} to volume {label}, which the spec does not declare"
            add("host-allowed-not-declared", text)
    return found


def _host_differences(desired: Desired, observed: Observed, host: Host) -> list[Difference]:
    node = host.instance_id
    report = observed.host_reports.get(node)
    if report is None:
        text = f"host {node} has reported nothing (no connect-path in SSM's history)"
        return [Difference(node, "no-report", text)]
    subsystems = subsystems_of(report, desired.array_id)
    addresses = {c.address: c for c in observed.controllers if c.address}
    found: list[Difference] = []
    for volume in desired.volumes:
        if volume.volume_id is None:
            continue
        label = _label(volume)

        def add(kind: str, text: str, volume: Volume = volume) -> None:
            found.append(Difference(node, kind, text, volume.name))

        subsystem = subsystems.get(volume.volume_id, {})
        paths = {str(p.get("address")): str(p.get("state")) for p in subsystem.get("paths") or []}
        for controller in serving(observed):
            state = paths.get(controller.address or "")
            through = f"controller {controller.instance_id} ({controller.address})"
            if state is None:
                add("no-path", f"host {node} has no path to volume {label} through {through}")
            elif state != "live":
                add("path-not-live", f"host {node}'s path to volume {label} through {through} is {state}")
        for address, state in sorted(paths.items()):
            owner = addresses.get(address)
            if owner is None or owner.state != "serving":
                what = (
                    "no controller of the array"
                    if owner is None
                    else f"controller {owner.instance_id}, {owner.state}"
                )
                text = f"host {node} has a path ({state}) to volume {label} through {address}, {what}"
                add("stale-path", text)
        if not subsystem:
            continue
        policy = subsystem.get("ioPolicy")
        if policy is not None and policy != desired.io_policy:
            text = f"host {node} uses IO policy {policy} for volume {label}, not {desired.io_policy}"
            add("io-policy", text)
        size = subsystem.get("sizeBytes")
        if volume.size_gib is not None and isinstance(size, int) and size != volume.size_gib * GIB:
            add("size", f"host {node} sees volume {label} at {_gib(size)}, EBS says {volume.size_gib} GiB")
    return found


def host_view(desired: Desired, observed: Observed, host: Host) -> dict[str, Any]:
    """A host as its own last report shows it: per volume each path and state, the live path
    count, the IO policy, the size and what is mounted from it; ``livePaths`` is the fewest live
    paths of any volume (what a host can lose before a volume goes dark)."""
    report = observed.host_reports.get(host.instance_id)
    subsystems = subsystems_of(report, desired.array_id)
    volumes = []
    for volume in desired.volumes:
        if volume.volume_id is None:
            continue
        subsystem = subsystems.get(volume.volume_id, {})
        paths = [{"address": p.get("address"), "state": p.get("state")} for p in subsystem.get("paths") or []]
        volumes.append(
            {
                "volumeId": volume.volume_id,
                "paths": paths,
                "livePaths": sum(p["state"] == "live" for p in paths),
                "ioPolicy": subsystem.get("ioPolicy"),
                "sizeBytes": subsystem.get("sizeBytes"),
                # what the host has mounted from it (report-paths only; None: it cannot tell)
                "mounts": subsystem.get("mounts"),
            }
        )
    return {
        "report": report.as_dict() if report is not None else None,
        "volumes": volumes,
        "livePaths": min((v["livePaths"] for v in volumes), default=0) if report is not None else None,
    }


def controller_view(desired: Desired, observed: Observed, controller: Controller) -> dict[str, Any]:
    """A controller as its own last report shows it: the array's subsystems it exports, and how
    it authenticates hosts (``authenticating``: ``unknown`` when no report says)."""
    report = observed.controller_reports.get(controller.instance_id)
    exports = exports_of(report, desired.array_id)
    return {
        "report": report.as_dict() if report is not None else None,
        "authentication": authenticating(observed, controller.instance_id).as_dict(),
        "exports": [
            {
                "volumeId": volume_id,
                "enabled": any(n.get("enabled") for n in e.get("namespaces") or []),
                "sizeBytes": next((n.get("sizeBytes") for n in e.get("namespaces") or []), None),
                "allowedHosts": list(e.get("allowedHosts") or []),
                "allowAnyHost": bool(e.get("allowAnyHost")),
                "ports": [f"{p.get('traddr')}:{p.get('trsvcid')}" for p in e.get("ports") or []],
            }
            for volume_id, e in sorted(exports.items())
        ],
    }


def plan_changes(
    before: Sequence[Volume],
    after: Sequence[Volume],
    hosts_before: Sequence[str],
    hosts_after: Sequence[str],
    serving_controllers: Sequence[str],
) -> list[dict[str, Any]]:
    """What converging the nodes on a new spec takes, one entry per resource and action (the
    plan's data plane part): volumes keyed by name, hosts by instance id. A volume added is
    attached to and exported by every serving controller, then connected by every host; one
    removed goes the other way; one grown is revalidated by each controller. A host added is
    allowed on every controller, then connects to every volume; one removed disconnects first."""
    old = {v.name: v for v in before}
    new = {v.name: v for v in after}
    controllers = sorted(serving_controllers)
    if not controllers:  # nothing serves yet: each controller's bootstrap makes all of it so
        return []
    kept_hosts = [h for h in hosts_after if h in set(hosts_before)]
    changes: list[dict[str, Any]] = []

    def change(resource: str, action: str, **fields: Any) -> None:
        changes.append(
            {
                "resource": resource,
                "action": action,
                "fields": [{"field": k, "before": None, "after": v} for k, v in fields.items()],
            }
        )

    for name in [n for n in new if n not in old]:
        change(f"volume/{name}", "attach", controllers=controllers)
        change(f"volume/{name}", "export", controllers=controllers)
        for host in kept_hosts:
            change(f"host/{host}", "connect", volume=name, paths=len(controllers))
    for name, volume in new.items():
        was = old.get(name)
        if was is not None and was.size_gib is not None and volume.size_gib != was.size_gib:
            changes.append(
                {
                    "resource": f"volume/{name}",
                    "action": "revalidate",
                    "fields": [{"field": "sizeGiB", "before": was.size_gib, "after": volume.size_gib}],
                }
            )
    for name in [n for n in old if n not in new]:
        for host in hosts_before:
            change(f"host/{host}", "disconnect", volume=name)
        change(f"volume/{name}", "unexport", controllers=controllers)
        change(f"volume/{name}", "detach", controllers=controllers)
    for host in [h for h in hosts_after if h not in set(hosts_before)]:
        change(f"host/{host}", "allow", controllers=controllers)
        change(f"host/{host}", "connect", volumes=sorted(new), paths=len(controllers))
    for host in [h for h in hosts_before if h not in set(hosts_after)]:
        change(f"host/{host}", "disconnect", volumes=sorted(old))
        change(f"host/{host}", "disallow", controllers=controllers)
    return changes


def spec_volumes(volumes: Sequence[Any]) -> list[Volume]:
    """A spec's volumes as the data plane names them: a new volume by its name (and size), an
    existing one by its id (its size is EBS's, not the spec's)."""
    found = []
    for v in volumes:
        volume_id = getattr(v, "volume_id", None)
        name = str(getattr(v, "name", None) or volume_id)
        found.append(Volume(volume_id, name, getattr(v, "size_gib", None)))
    return found
