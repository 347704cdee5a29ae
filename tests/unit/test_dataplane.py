"""The data plane's desired against observed (vsa_core.arrays.dataplane, pure): every difference
named, per controller and per host, from the nodes' own reports in the documents' shapes (with
DH-HMAC-CHAP: which hosts each controller keyed); and the last report of a node read from Run
Command's history (aws_reports, aws_status, with botocore's Stubber: the request shape matters)."""

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from tests.specs import BASE
from vsa_core.arrays import aws_observe, aws_reports, aws_status, dataplane
from vsa_core.arrays.dataplane import Controller, Desired, Host, Observed, Report, Volume
from vsa_core.arrays.spec import ArraySpec
from vsa_core.nvme import default_host_nqn, subsystem_nqn

ARRAY = "demo"
V1, V2 = "vol-0000000000000000a", "vol-0000000000000000b"
C1, C2, DRAINING = "i-00000000000000c01", "i-00000000000000c02", "i-00000000000000c03"
C3 = "i-00000000000000c04"
H1, H2 = "i-00000000000000a01", "i-00000000000000a02"
ADDRESSES = {C1: "10.0.0.1", C2: "10.0.0.2", DRAINING: "10.0.0.3"}
GIB = 2**30
CMD = {
    n: f"00000000-0000-4000-8000-00000000000{i}"
    for i, n in enumerate(("c-old", "c-running", "d-other", "d-failed"))
}


def desired(**overrides: Any) -> Desired:
    base: dict[str, Any] = {
        "array_id": ARRAY,
        "volumes": [Volume(V1, V1, 8), Volume(V2, "data2", 16)],
        "hosts": [Host(H1, default_host_nqn(H1)), Host(H2, default_host_nqn(H2))],
    }
    return Desired(**{**base, **overrides})


def controllers() -> list[Controller]:
    return [
        Controller(C1, ADDRESSES[C1], 0, "serving"),
        Controller(C2, ADDRESSES[C2], 1, "serving"),
        Controller(DRAINING, ADDRESSES[DRAINING], 2, "draining"),
    ]


def export(volume_id: str, size_gib: int, hosts: list[str], address: str, **overrides: Any) -> dict[str, Any]:
    """One entry of configure-target's ``exports``, as the script prints it."""
    entry = {
        "nqn": subsystem_nqn(ARRAY, volume_id),
        "volume": volume_id,
        "allowAnyHost": False,
        "allowedHosts": sorted(hosts),
        "namespaces": [
            {"nsid": 1, "enabled": True, "device": f"/dev/by-id/{volume_id}", "sizeBytes": size_gib * GIB}
        ],
        "ports": [{"id": "4420", "traddr": address, "trsvcid": "4420"}],
    }
    return {**entry, **overrides}


def controller_report(
    instance_id: str,
    exports: list[dict[str, Any]],
    authentication: dict[str, Any] | None = None,
    document: str = "configure-target",
) -> Report:
    """configure-target's report (``authentication`` as the script prints it; None: a report
    from before the field, or report-exports', which has none)."""
    body: dict[str, Any] = {"document": document, "arrayId": ARRAY, "mode": "apply", "exports": exports}
    if authentication is not None:
        body["authentication"] = authentication
    return Report(document, f"cmd-{instance_id}", "2026-11-24T10:00:00+00:00", "Success", body)


def keyed(*nqns: str) -> dict[str, Any]:
    """configure-target's ``authentication`` with dh-hmac-chap, ``nqns`` keyed."""
    return {
        "method": "dh-hmac-chap",
        "keysSecretId": f"vsa/{ARRAY}/nodes/c",
        "hash": "hmac(sha256)",
        "dhgroup": "ffdhe2048",
        "bidirectional": True,
        "keyedHosts": list(nqns),
    }


def host_report(
    instance_id: str, paths: dict[str, dict[str, str]], sizes: dict[str, int] | None = None
) -> Report:
    """connect-path's report: per volume, {address: state}."""
    subsystems = [
        {
            "nqn": subsystem_nqn(ARRAY, volume_id),
            "volume": volume_id,
            "paths": [
                {"device": f"nvme{i}", "address": a, "port": "4420", "state": s}
                for i, (a, s) in enumerate(sorted(by_address.items()))
            ],
            "livePaths": sum(s == "live" for s in by_address.values()),
            "ioPolicy": "round-robin",
            "sizeBytes": (sizes or {}).get(volume_id, {V1: 8, V2: 16}[volume_id]) * GIB,
        }
        for volume_id, by_address in paths.items()
    ]
    body = {"document": "connect-path", "arrayId": ARRAY, "subsystems": subsystems}
    return Report("connect-path", f"cmd-{instance_id}", "2026-11-24T10:00:00+00:00", "Success", body)


def healthy() -> Observed:
    hosts = [default_host_nqn(H1), default_host_nqn(H2)]
    live = {ADDRESSES[C1]: "live", ADDRESSES[C2]: "live"}
    return Observed(
        controllers=controllers(),
        attachments={V1: frozenset({C1, C2, DRAINING}), V2: frozenset({C1, C2, DRAINING})},
        controller_reports={
            c: controller_report(c, [export(V1, 8, hosts, ADDRESSES[c]), export(V2, 16, hosts, ADDRESSES[c])])
            for c in (C1, C2)
        },
        host_reports={h: host_report(h, {V1: dict(live), V2: dict(live)}) for h in (H1, H2)},
    )


def texts(differences: list[dataplane.Difference]) -> list[str]:
    return [d.text for d in differences]


def test_a_converged_array_has_no_difference_and_each_host_counts_its_own_live_paths() -> None:
    observed = healthy()
    assert dataplane.compare(desired(), observed) == []
    view = dataplane.host_view(desired(), observed, desired().hosts[0])
    assert view["livePaths"] == 2
    assert [v["livePaths"] for v in view["volumes"]] == [2, 2]


def test_a_host_that_lost_a_path_is_named_with_the_volume_and_the_controller() -> None:
    # Given host 1 whose path to data2 through controller 2 is reconnecting, and which has
    # no path at all to the first volume through controller 2
    observed = healthy()
    reports = dict(observed.host_reports)
    reports[H1] = host_report(
        H1, {V1: {ADDRESSES[C1]: "live"}, V2: {ADDRESSES[C1]: "live", ADDRESSES[C2]: "connecting"}}
    )
    observed = Observed(observed.controllers, observed.attachments, observed.controller_reports, reports)
    # When compared / Then both are named, in words, and only those
    differences = dataplane.compare(desired(), observed)
    assert texts(differences) == [
        f"host {H1} has no path to volume {V1} through controller {C2} (10.0.0.2)",
        f"host {H1}'s path to volume data2 ({V2}) through controller {C2} (10.0.0.2) is connecting",
    ]
    assert [d.kind for d in differences] == ["no-path", "path-not-live"]
    # and the host's path count is its own: 1, the fewest live paths of any of its volumes
    assert dataplane.host_view(desired(), observed, desired().hosts[0])["livePaths"] == 1


def test_every_controller_difference_is_named() -> None:
    hosts = [default_host_nqn(H1), default_host_nqn(H2)]
    stranger = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-8333-8444-555555555555"
    observed = healthy()
    reports = dict(observed.controller_reports)
    reports[C2] = controller_report(
        C2,
        [
            export(V1, 8, [hosts[0], stranger], ADDRESSES[C2], ports=[]),
            export(
                V2,
                16,
                hosts,
                ADDRESSES[C2],
                namespaces=[{"nsid": 1, "enabled": False, "device": "/d", "sizeBytes": 8 * GIB}],
            ),
            export("vol-0000000000000000f", 8, hosts, ADDRESSES[C2]),
        ],
    )
    attachments = {V1: frozenset({C1}), V2: frozenset({C1, C2})}
    observed = Observed(observed.controllers, attachments, reports, observed.host_reports)

    differences = dataplane.compare(desired(), observed)

    where = f"controller {C2} (slot 1, 10.0.0.2)"
    assert texts(differences) == [
        f"volume {V1} is not attached to {where}",
        f"{where} links volume {V1} to no port: no host can reach it",
        f"{where} does not allow host {hosts[1]} to volume {V1}",
        f"{where} allows host {stranger} to volume {V1}, which the spec does not declare",
        f"{where} has volume data2 ({V2})'s namespace disabled",
        f"{where} exports volume data2 ({V2}) at 8 GiB, EBS says 16 GiB",
        f"{where} exports volume vol-0000000000000000f, which the spec does not declare",
    ]


def test_a_silent_node_a_stale_path_and_a_grown_volume_the_host_has_not_seen() -> None:
    # Given controller 1 that never reported, host 2 still holding a path through the
    # draining controller, and data2 grown to 32 GiB on EBS that host 2 still sees at 16
    observed = healthy()
    live = {ADDRESSES[C1]: "live", ADDRESSES[C2]: "live"}
    reports = {
        H1: observed.host_reports[H1],
        H2: host_report(H2, {V1: dict(live), V2: {**live, ADDRESSES[DRAINING]: "live"}}),
    }
    controller_reports = {C1: None, C2: observed.controller_reports[C2]}
    observed = Observed(observed.controllers, observed.attachments, controller_reports, reports)
    grown = desired(volumes=[Volume(V1, V1, 8), Volume(V2, "data2", 32)])
    hosts = [default_host_nqn(H1), default_host_nqn(H2)]
    grown_observed = Observed(
        observed.controllers,
        observed.attachments,
        {
            C1: None,
            C2: controller_report(
                C2, [export(V1, 8, hosts, ADDRESSES[C2]), export(V2, 32, hosts, ADDRESSES[C2])]
            ),
        },
        reports,
    )

    differences = dataplane.compare(grown, grown_observed)

    assert texts(differences) == [
        f"controller {C1} (slot 0, 10.0.0.1) has reported nothing (no configure-target in SSM's history)",
        f"host {H1} sees volume data2 ({V2}) at 16 GiB, EBS says 32 GiB",
        f"host {H2} has a path (live) to volume data2 ({V2}) through 10.0.0.3, "
        f"controller {DRAINING}, draining",
        f"host {H2} sees volume data2 ({V2}) at 16 GiB, EBS says 32 GiB",
    ]


def test_a_host_without_a_report_and_a_volume_not_created_yet() -> None:
    # Given host 1 that never reported, and a volume the apply has not created yet
    observed = healthy()
    reports = {H1: None, H2: observed.host_reports[H2]}
    observed = Observed(observed.controllers, observed.attachments, observed.controller_reports, reports)
    wanted = desired(volumes=[Volume(V1, V1, 8), Volume(V2, "data2", 16), Volume(None, "new", 4)])
    # Then only the silent host is a difference (a volume without an id is the apply's to make)
    assert texts(dataplane.compare(wanted, observed)) == [
        f"host {H1} has reported nothing (no connect-path in SSM's history)"
    ]
    assert dataplane.host_view(wanted, observed, wanted.hosts[0])["livePaths"] is None


def test_parse_report_takes_the_last_json_line() -> None:
    assert dataplane.parse_report('log line\n{"a": 1}\n') == {"a": 1}
    assert dataplane.parse_report('{"a": 1}\n{"cut short": \n') is None
    assert dataplane.parse_report("") is None


# --- DH-HMAC-CHAP: which hosts each controller holds a key for ----------------------------------

NQN1, NQN2 = default_host_nqn(H1), default_host_nqn(H2)


def with_authentication(
    observed: Observed,
    by_controller: dict[str, dict[str, Any] | None],
    fallback: dict[str, Report | None] | None = None,
) -> Observed:
    """``observed`` with each controller's report carrying ``by_controller``'s authentication."""
    reports = {
        c: controller_report(c, list(r.body["exports"]), by_controller.get(c))
        for c, r in observed.controller_reports.items()
        if r is not None
    }
    return Observed(
        observed.controllers, observed.attachments, reports, observed.host_reports, fallback or {}
    )


def test_a_controller_without_authentication_and_an_allowed_host_without_a_key_are_named() -> None:
    # Given an array with dh-hmac-chap: controller 1 ran configure-target without
    # authentication, controller 2 keyed host 1 only
    wanted = desired(authentication="dh-hmac-chap")
    observed = with_authentication(healthy(), {C1: {"method": "none"}, C2: keyed(NQN1)})
    # When compared
    differences = dataplane.compare(wanted, observed)
    # Then each is named on its controller, with what fixes it, and nothing else
    remedy = "a ReconcileArray run (vsactl apply; the drift check starts one) writes"
    assert [(d.node, d.kind, d.volume) for d in differences] == [
        (C1, "no-authentication", None),
        (C2, "host-not-keyed", None),
    ]
    assert texts(differences) == [
        f"controller {C1} (slot 0, 10.0.0.1) authenticates no host (its configure-target ran with "
        "authentication none), the spec asks dh-hmac-chap: allowed hosts connect without a key; "
        f"{remedy} every host's key",
        f"controller {C2} (slot 1, 10.0.0.2) holds no DH-HMAC-CHAP key for host {NQN2}: it admits "
        f"that host without authenticating it, or refuses it if it does not allow it; {remedy} the key",
    ]
    # and each controller's view says what its report says
    view = dataplane.controller_view(wanted, observed, observed.controllers[1])
    assert view["authentication"] == {
        "method": "dh-hmac-chap",
        "keyedHosts": [NQN1],
        "document": "configure-target",
    }


def test_every_allowed_host_keyed_is_converged_and_a_key_left_for_a_dropped_host_is_no_drift() -> None:
    # Given both controllers keyed both hosts, one also a host the spec no longer allows (nvmet
    # cannot clear its key)
    dropped = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-8333-8444-555555555555"
    observed = with_authentication(healthy(), {C1: keyed(NQN1, NQN2), C2: keyed(NQN2, dropped, NQN1)})
    # Then nothing differs
    assert dataplane.compare(desired(authentication="dh-hmac-chap"), observed) == []


def test_a_report_that_says_nothing_of_keys_is_unknown_not_drift() -> None:
    # Given controllers whose last report has no authentication (a configure-target from before
    # the field; report-exports'), or dh-hmac-chap without keyed hosts (a teardown's)
    wanted = desired(authentication="dh-hmac-chap")
    observed = with_authentication(healthy(), {C1: None, C2: {"method": "dh-hmac-chap"}})
    # Then no authentication difference, and the view says unknown
    assert dataplane.compare(wanted, observed) == []
    view = dataplane.controller_view(wanted, observed, observed.controllers[0])
    assert view["authentication"] == {"method": "unknown", "keyedHosts": None, "document": None}


def test_a_report_exports_report_takes_the_keys_from_the_last_configure_target() -> None:
    # Given controller 1's last report is report-exports' (no authentication) and its last
    # configure-target keyed host 1 only; controller 2's own report keyed both
    observed = healthy()
    exports = list(observed.controller_reports[C1].body["exports"])  # type: ignore[union-attr]
    reports = {
        C1: controller_report(C1, exports, document="report-exports"),
        C2: controller_report(C2, exports, keyed(NQN1, NQN2)),
    }
    fallback = {
        C1: controller_report(C1, exports, keyed(NQN1)),
        C2: controller_report(C2, exports, {"method": "none"}),
    }
    observed = Observed(observed.controllers, observed.attachments, reports, observed.host_reports, fallback)
    # Then controller 1 lacks host 2's key; controller 2's own report wins over its fallback
    differences = dataplane.compare(desired(authentication="dh-hmac-chap"), observed)
    assert [(d.node, d.kind) for d in differences] == [(C1, "host-not-keyed")]
    assert NQN2 in differences[0].text


def test_report_exports_keyed_hosts_are_read_as_nvmet_shows_them_now() -> None:
    # Given controller 1's last report is report-exports' naming host 1 only as keyed in nvmet
    # (method observed), and its last configure-target keyed both (the fallback, not needed)
    observed = healthy()
    exports = list(observed.controller_reports[C1].body["exports"])  # type: ignore[union-attr]
    reports = {
        C1: controller_report(
            C1, exports, {"method": "observed", "keyedHosts": [NQN1]}, document="report-exports"
        ),
        C2: controller_report(C2, exports, keyed(NQN1, NQN2)),
    }
    fallback = {C1: controller_report(C1, exports, keyed(NQN1, NQN2))}
    observed = Observed(observed.controllers, observed.attachments, reports, observed.host_reports, fallback)
    # Then controller 1 lacks host 2's key: report-exports' view wins over an older configure-target
    differences = dataplane.compare(desired(authentication="dh-hmac-chap"), observed)
    assert [(d.node, d.kind) for d in differences] == [(C1, "host-not-keyed")]
    # and an observed report with every host keyed is converged, not "no authentication"
    reports[C1] = controller_report(
        C1, exports, {"method": "observed", "keyedHosts": [NQN1, NQN2]}, document="report-exports"
    )
    observed = Observed(observed.controllers, observed.attachments, reports, observed.host_reports, {})
    assert dataplane.compare(desired(authentication="dh-hmac-chap"), observed) == []


def test_an_array_without_authentication_is_never_flagged_for_keys() -> None:
    # Given an array with authentication none, whose controllers report no keys, or keys of a
    # former setting (nvmet keeps them)
    for by_controller in ({C1: {"method": "none"}, C2: keyed()}, {C1: keyed(NQN1), C2: None}):
        observed = with_authentication(healthy(), by_controller)
        # Then nothing differs
        assert dataplane.compare(desired(), observed) == []
        assert dataplane.compare(desired(authentication="none"), observed) == []


NQNS = [default_host_nqn(f"i-00000000000000a{i:02d}") for i in range(4)]
CS = (C1, C2)


@given(
    allowed=st.sets(st.sampled_from(NQNS), max_size=4),
    keyed_by=st.lists(st.sets(st.sampled_from(NQNS)), min_size=2, max_size=2),
    states=st.lists(st.sampled_from(["serving", "draining", "bootstrapping"]), min_size=2, max_size=2),
)
def test_key_drift_iff_an_allowed_host_is_unkeyed_on_a_serving_controller(
    allowed: set[str], keyed_by: list[set[str]], states: list[str]
) -> None:
    # Given any allowed hosts, two controllers in any state, each having keyed any hosts
    hosts = [Host(f"i-h{i}", nqn) for i, nqn in enumerate(sorted(allowed))]
    nodes = [
        Controller(c, ADDRESSES[c], slot, state)
        for slot, (c, state) in enumerate(zip(CS, states, strict=True))
    ]
    reports = {c: controller_report(c, [], keyed(*k)) for c, k in zip(CS, keyed_by, strict=True)}
    observed = Observed(nodes, controller_reports=reports)
    # When compared (the hosts report nothing here: only the controllers' differences count)
    differences = [
        d
        for d in dataplane.compare(desired(volumes=[], hosts=hosts, authentication="dh-hmac-chap"), observed)
        if d.node in CS
    ]
    # Then one host-not-keyed per serving controller and allowed host it holds no key for, and nothing else
    unkeyed = {
        (c, nqn)
        for c, k, state in zip(CS, keyed_by, states, strict=True)
        if state == "serving"
        for nqn in allowed - k
    }
    assert {(d.node, nqn) for d in differences for nqn in NQNS if f"key for host {nqn}:" in d.text} == unkeyed
    assert [d.kind for d in differences] == ["host-not-keyed"] * len(unkeyed)
    # and none at all for an array without authentication
    assert [d for d in dataplane.compare(desired(volumes=[], hosts=hosts), observed) if d.node in CS] == []


def test_the_status_reads_the_last_configure_target_only_where_the_last_report_is_another_documents() -> None:
    ssm = boto3.client("ssm", region_name="us-east-1")
    clients = aws_observe.ArrayClients(None, None, None, None, ssm, "")
    documents = aws_reports.NodeDocuments(
        "vsa-configure-target", "vsa-connect-path", "vsa-disconnect-path", report_exports="vsa-report-exports"
    )
    now = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    mine = controller_report(C1, [], keyed(NQN1)).body
    last = {
        C1: controller_report(C1, [], document="report-exports"),
        C2: controller_report(C2, [], keyed(NQN1)),
        # report-exports that names the keyed hosts itself: nothing more to read
        C3: controller_report(
            C3, [], {"method": "observed", "keyedHosts": [NQN1]}, document="report-exports"
        ),
        DRAINING: None,
    }
    spec = ArraySpec.model_validate(
        {
            **BASE,
            "arrayId": ARRAY,
            "availabilityZone": "us-east-1a",
            "minControllers": 1,
            "maxControllers": 2,
            "hosts": [{"instanceId": H1}],
        }
    )
    assert spec.authentication == "dh-hmac-chap"
    with Stubber(ssm) as stub:
        # Given controller 1's last report is report-exports', controller 2's configure-target's,
        # and a third reported nothing: only controller 1's configure-target history is read
        stub.add_response(
            "list_command_invocations",
            {"CommandInvocations": [_invocation(CMD["c-old"], now - timedelta(days=1))]},
            {"InstanceId": C1, "Filters": [{"key": "DocumentName", "value": "vsa-configure-target"}]},
        )
        stub.add_response(
            "get_command_invocation",
            {"CommandId": CMD["c-old"], "InstanceId": C1, "StandardOutputContent": json.dumps(mine) + "\n"},
            {"CommandId": CMD["c-old"], "InstanceId": C1},
        )
        found = aws_status._authentication_reports(clients, spec, documents, last)
        stub.assert_no_pending_responses()
    assert list(found) == [C1]
    assert dataplane.authentication_of(found[C1]) == dataplane.Authenticating(
        "dh-hmac-chap", frozenset({NQN1}), "configure-target"
    )
    # and nothing is read for an array without authentication
    assert (
        aws_status._authentication_reports(
            clients, spec.model_copy(update={"authentication": "none"}), documents, last
        )
        == {}
    )


# --- the last report, from Run Command's history -------------------------------------------------


def _invocation(command_id: str, when: datetime, status: str = "Success") -> dict[str, Any]:
    return {"CommandId": command_id, "InstanceId": H1, "RequestedDateTime": when, "Status": status}


def test_last_report_is_the_newest_full_report_of_the_array_across_documents() -> None:
    ssm = boto3.client("ssm", region_name="us-east-1")
    now = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    mine = host_report(H1, {V1: {ADDRESSES[C1]: "live"}}).body
    with Stubber(ssm) as stub:
        # Given connect-path runs (an old one, one still running) and disconnect-path runs (the
        # newest for another array, the next an early failure)
        stub.add_response(
            "list_command_invocations",
            {
                "CommandInvocations": [
                    _invocation(CMD["c-old"], now - timedelta(hours=2)),
                    _invocation(CMD["c-running"], now, "InProgress"),
                ]
            },
            {"InstanceId": H1, "Filters": [{"key": "DocumentName", "value": "vsa-connect-path"}]},
        )
        stub.add_response(
            "list_command_invocations",
            {
                "CommandInvocations": [
                    _invocation(CMD["d-other"], now - timedelta(minutes=1)),
                    _invocation(CMD["d-failed"], now - timedelta(minutes=2), "Failed"),
                ]
            },
            {"InstanceId": H1, "Filters": [{"key": "DocumentName", "value": "vsa-disconnect-path"}]},
        )
        for command_id, stdout in (
            (CMD["d-other"], '{"document":"disconnect-path","arrayId":"other","subsystems":[]}\n'),
            (
                CMD["d-failed"],
                'disconnect-path: error: x\n{"document":"disconnect-path","arrayId":"demo","error":"x"}\n',
            ),
            (CMD["c-old"], "connect-path: connected\n" + json.dumps(mine) + "\n"),
        ):
            stub.add_response(
                "get_command_invocation",
                {"CommandId": command_id, "InstanceId": H1, "StandardOutputContent": stdout},
                {"CommandId": command_id, "InstanceId": H1},
            )
        # When the last report of "demo" is read
        report = aws_reports.last_report(ssm, H1, ("vsa-connect-path", "vsa-disconnect-path"), ARRAY)
        # Then it is the old connect-path's: the newer ones are another array's or hold no paths
        stub.assert_no_pending_responses()
    assert report is not None
    assert (report.command_id, report.document, report.status) == (CMD["c-old"], "connect-path", "Success")
    assert report.body == mine
    assert report.at == (now - timedelta(hours=2)).isoformat()


def test_report_paths_is_read_for_the_last_hour_only_and_its_newer_report_wins() -> None:
    ssm = boto3.client("ssm", region_name="us-east-1")
    now = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    older = host_report(H1, {V1: {ADDRESSES[C1]: "live", ADDRESSES[C2]: "live"}}).body
    newer = {**host_report(H1, {V1: {ADDRESSES[C1]: "live", ADDRESSES[C2]: "connecting"}}).body}
    newer["document"] = "report-paths"
    with Stubber(ssm) as stub:
        # Given a connect-path of yesterday (read in full) and the health check's report-paths
        # (thousands a month: listed from an hour ago, InvokedAfter)
        stub.add_response(
            "list_command_invocations",
            {"CommandInvocations": [_invocation(CMD["c-old"], now - timedelta(days=1))]},
            {"InstanceId": H1, "Filters": [{"key": "DocumentName", "value": "vsa-connect-path"}]},
        )
        stub.add_response(
            "list_command_invocations",
            {"CommandInvocations": [_invocation(CMD["d-other"], now - timedelta(minutes=4))]},
            {
                "InstanceId": H1,
                "Filters": [
                    {"key": "DocumentName", "value": "vsa-report-paths"},
                    {"key": "InvokedAfter", "value": "2026-11-24T09:00:00Z"},
                ],
            },
        )
        stub.add_response(
            "get_command_invocation",
            {
                "CommandId": CMD["d-other"],
                "InstanceId": H1,
                "StandardOutputContent": json.dumps(newer) + "\n",
            },
            {"CommandId": CMD["d-other"], "InstanceId": H1},
        )
        report = aws_reports.last_report(
            ssm, H1, ("vsa-connect-path", "vsa-report-paths"), ARRAY, ("vsa-report-paths",), now
        )
        stub.assert_no_pending_responses()
    # Then the newest report is report-paths', which sees the path through C2 reconnecting
    assert report is not None
    assert (report.document, report.command_id) == ("report-paths", CMD["d-other"])
    assert report.body != older


def test_many_nodes_reports_are_read_side_by_side_each_its_own_in_the_order_asked() -> None:
    # Given 20 hosts, each with one connect-path report naming its own volume and path. Calls are
    # answered by request (which node, which command) through botocore's before-call event, the
    # hook Stubber uses: Stubber's queue is answered in call order, and reads side by side have none
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    now = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    hosts = [f"i-{n:017x}" for n in range(1, 21)]
    bodies = {h: host_report(h, {V1: {f"10.0.1.{n}": "live"}}).body for n, h in enumerate(hosts, 1)}

    def command(node: str) -> str:  # a CommandId is a UUID
        return f"00000000-0000-4000-8000-{node[2:][-12:]}"

    first_wave = threading.Barrier(aws_reports.READERS, timeout=10)
    lock = threading.Lock()
    seen = {"lists": 0, "in flight": 0, "most": 0}

    def answer(model: Any, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        asked = json.loads(params["body"])  # the request as serialized (SSM speaks JSON)
        node = asked["InstanceId"]
        if model.name == "ListCommandInvocations":
            with lock:
                seen["lists"] += 1
                seen["in flight"] += 1
                seen["most"] = max(seen["most"], seen["in flight"])
                waits = seen["lists"] <= aws_reports.READERS
            if waits:  # the first READERS nodes are all being read at once, or this breaks,
                first_wave.wait()
                time.sleep(0.2)  # and held a while: a reader past READERS would start meanwhile
            with lock:
                seen["in flight"] -= 1
            parsed = {"CommandInvocations": [{**_invocation(command(node), now), "InstanceId": node}]}
        else:
            assert asked["CommandId"] == command(node)
            parsed = {"StandardOutputContent": json.dumps(bodies[node]) + "\n"}
        return AWSResponse("https://ssm", 200, {}, None), parsed

    ssm.meta.events.register("before-call.ssm.*", answer)
    # When their last reports are read together
    reports = aws_reports.last_reports(ssm, [(h, ("vsa-connect-path",)) for h in hosts], ARRAY, now=now)
    # Then READERS nodes were read at once, never more, and each answer is that node's own report
    assert (seen["lists"], seen["most"]) == (len(hosts), aws_reports.READERS)
    assert [r.body if r else None for r in reports] == [bodies[h] for h in hosts]


# --- the data plane's part of a plan ---------------------------------------------------------------


def test_the_plan_of_a_spec_change_names_each_node_step() -> None:
    before = [Volume(V1, V1, None), Volume(None, "data2", 16), Volume(None, "old", 8)]
    after = [Volume(V1, V1, None), Volume(None, "data2", 32), Volume(None, "new", 4)]

    steps = dataplane.plan_changes(before, after, [H1, H2], [H1, "i-0000000000000a003"], [C2, C1])

    def field(step: dict[str, Any]) -> str:
        return ", ".join(f"{f['field']}={f['after']}" for f in step["fields"])

    assert [(s["resource"], s["action"], field(s)) for s in steps] == [
        ("volume/new", "attach", f"controllers={[C1, C2]}"),
        ("volume/new", "export", f"controllers={[C1, C2]}"),
        (f"host/{H1}", "connect", "volume=new, paths=2"),
        ("volume/data2", "revalidate", "sizeGiB=32"),
        (f"host/{H1}", "disconnect", "volume=old"),
        (f"host/{H2}", "disconnect", "volume=old"),
        ("volume/old", "unexport", f"controllers={[C1, C2]}"),
        ("volume/old", "detach", f"controllers={[C1, C2]}"),
        ("host/i-0000000000000a003", "allow", f"controllers={[C1, C2]}"),
        ("host/i-0000000000000a003", "connect", f"volumes={sorted(['data2', 'new', V1])}, paths=2"),
        (f"host/{H2}", "disconnect", f"volumes={sorted(['data2', 'old', V1])}"),
        (f"host/{H2}", "disallow", f"controllers={[C1, C2]}"),
    ]
    # with nothing serving yet, each controller's bootstrap makes all of it so: no node step
    assert dataplane.plan_changes(before, after, [H1], [H1], []) == []


def _connect_runs(
    stub: Stubber, invocations: list[dict[str, Any]], outputs: list[tuple[str, dict[str, Any], str]]
) -> None:
    """H1's connect-path invocations as ListCommandInvocations lists them, then each one read, in
    the order given: (command id, its report, its ExecutionEndDateTime)."""
    stub.add_response(
        "list_command_invocations",
        {"CommandInvocations": invocations},
        {"InstanceId": H1, "Filters": [{"key": "DocumentName", "value": "vsa-connect-path"}]},
    )
    for command_id, body, ended in outputs:
        stub.add_response(
            "get_command_invocation",
            {
                "CommandId": command_id,
                "InstanceId": H1,
                "StandardOutputContent": json.dumps(body) + "\n",
                "ExecutionEndDateTime": ended,
            },
            {"CommandId": command_id, "InstanceId": H1},
        )


def test_of_two_runs_requested_together_the_one_that_ended_last_is_the_report() -> None:
    # Given two controllers' bootstraps each running connect-path on the host 10 s apart: the
    # second requested ended first, before the first one's path to C2 was up; the first ended last
    # (reports of documents older than observedAt: the end time decides)
    ssm = boto3.client("ssm", region_name="us-east-1")
    now = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    early = host_report(H1, {V1: {ADDRESSES[C1]: "live"}}).body
    complete = host_report(H1, {V1: {ADDRESSES[C1]: "live", ADDRESSES[C2]: "live"}}).body
    with Stubber(ssm) as stub:
        _connect_runs(
            stub,
            [
                _invocation(CMD["c-old"], now - timedelta(seconds=10)),
                _invocation(CMD["c-running"], now),
                _invocation(CMD["d-other"], now - timedelta(hours=1)),
            ],
            [
                (CMD["c-running"], early, "2026-11-24T10:00:20.000Z"),
                (CMD["c-old"], complete, "2026-11-24T10:00:31.500Z"),
            ],
        )
        # When the last report is read
        report = aws_reports.last_report(ssm, H1, ("vsa-connect-path",), ARRAY)
        # Then it is the run that ended last, with both paths; the hour-old run is not read
        stub.assert_no_pending_responses()
    assert report is not None
    assert (report.command_id, report.body) == (CMD["c-old"], complete)
    assert report.as_dict()["observedAt"] is None


def test_of_two_runs_at_once_the_one_that_read_the_host_last_is_the_report() -> None:
    # Given two connect-path runs on the host at once (two controllers joining): the one to C1
    # listed the paths before C2's was up, then wrote its report while the run to C2 connected,
    # listed both and ended; the run to C1 ended last (by end time the host would show 4 paths of 5)
    ssm = boto3.client("ssm", region_name="us-east-1")
    now = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
    one, both = {ADDRESSES[C1]: "live"}, {ADDRESSES[C1]: "live", ADDRESSES[C2]: "live"}
    early = {**host_report(H1, {V1: one}).body, "observedAt": "2026-11-28T02:00:01.100000Z"}
    complete = {**host_report(H1, {V1: both}).body, "observedAt": "2026-11-28T02:00:01.400000Z"}
    with Stubber(ssm) as stub:
        _connect_runs(
            stub,
            [_invocation(CMD["c-old"], now), _invocation(CMD["c-running"], now + timedelta(milliseconds=5))],
            [
                (CMD["c-running"], complete, "2026-11-28T02:00:01.500Z"),
                (CMD["c-old"], early, "2026-11-28T02:00:01.900Z"),
            ],
        )
        # When the last report is read
        report = aws_reports.last_report(ssm, H1, ("vsa-connect-path",), ARRAY)
        stub.assert_no_pending_responses()
    # Then it is the run that listed last, with both paths, though the other one ended after it
    assert report is not None
    assert (report.command_id, report.body) == (CMD["c-running"], complete)
    assert report.as_dict()["observedAt"] == "2026-11-28T02:00:01.400000Z"
