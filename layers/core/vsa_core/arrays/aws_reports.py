"""Where a node's last report lives: the output of the last node document it ran, in SSM Run
Command's history (``ListCommandInvocations`` for the node and document, then
``GetCommandInvocation`` for its stdout: ListCommandInvocations' ``Output`` holds only 2,500
characters, GetCommandInvocation's ``StandardOutputContent`` 24,000).

Why there and not in the registry: every document already prints its report as its last stdout
line, SSM keeps it (30 days), and reading it needs no workflow to copy it anywhere (a copy would
be one more write in every workflow that runs a document, and one more thing to go stale). The
reports are as fresh as the last document run on the node: ``at`` says when, and the status
shows it.
"""

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from vsa_core.arrays.dataplane import Report, parse_report
from vsa_core.settings import NodeDocumentNames

ENDED = ("Success", "Failed")
"""Invocations whose script ran to its end: a document prints its report on success and on a
failure it reports (a connect-path that found a path missing still reports every path)."""
TRIES = 5
"""Reports read at most per node, newest first, to find one of the array (a host of several
arrays runs the documents of each)."""


RECENT = timedelta(hours=1)
"""report-paths (report-exports) runs on every host (serving controller) at every health
check, every few minutes: thousands of invocations a month per node. So their invocations are
listed for the last hour only (``InvokedAfter``): a report older than that is stale for the
health check anyway, and a GET reads one page, not SSM's 30 days. The documents that change
paths and exports run rarely: read in full."""


@dataclass(frozen=True)
class NodeDocuments:
    """The node documents' names (the stack's SSM documents): whose reports say what a
    controller and a host see."""

    configure_target: str
    connect_path: str
    disconnect_path: str
    report_paths: str = ""
    """the health check's read-only host report (empty: not deployed)"""
    report_exports: str = ""
    """the health check's read-only controller report (empty: not deployed)"""

    @classmethod
    def of(cls, settings: NodeDocumentNames) -> "NodeDocuments":
        """The deployed documents, as the stack names them (the functions' settings)."""
        return cls(
            configure_target=settings.configure_target_document,
            connect_path=settings.connect_path_document,
            disconnect_path=settings.disconnect_path_document,
            report_paths=settings.report_paths_document,
            report_exports=settings.report_exports_document,
        )

    @property
    def controller(self) -> tuple[str, ...]:
        return tuple(d for d in (self.configure_target, self.report_exports) if d)

    @property
    def host(self) -> tuple[str, ...]:
        return tuple(d for d in (self.connect_path, self.disconnect_path, self.report_paths) if d)

    @property
    def recent(self) -> tuple[str, ...]:
        """The documents read for the last ``RECENT`` only."""
        return tuple(d for d in (self.report_paths, self.report_exports) if d)


REPORT_KEY = {
    "configure-target": "exports",
    "connect-path": "subsystems",
    "disconnect-path": "subsystems",
    "report-paths": "subsystems",
    "report-exports": "exports",
}
"""The key a full report of each document carries (a report of a script that failed early
holds only ``error``)."""


def _when(invocation: dict[str, Any]) -> datetime | None:
    value = invocation.get("RequestedDateTime")
    return value if isinstance(value, datetime) else None


def last_report(
    ssm: Any,
    instance_id: str,
    documents: tuple[str, ...],
    array_id: str,
    recent: tuple[str, ...] = (),
    now: datetime | None = None,
) -> Report | None:
    """The newest full report of ``array_id`` that any of ``documents`` printed on the node;
    those also in ``recent`` are read for the last ``RECENT`` only."""
    ended: list[dict[str, Any]] = []
    since = (now or datetime.now(UTC)) - RECENT
    for document in documents:
        filters = [{"key": "DocumentName", "value": document}]
        if document in recent:
            filters.append({"key": "InvokedAfter", "value": since.strftime("%Y-%m-%dT%H:%M:%SZ")})
        pages = ssm.get_paginator("list_command_invocations").paginate(
            InstanceId=instance_id, Filters=filters
        )
        ended += [i for page in pages for i in page["CommandInvocations"] if i.get("Status") in ENDED]
    ended.sort(key=lambda i: (_when(i) is not None, _when(i) or datetime.min), reverse=True)
    found: list[tuple[datetime, Report]] = []
    newest: datetime | None = None
    for invocation in ended[:TRIES]:
        when = _when(invocation)
        if found and (when is None or newest is None or when <= newest - OVERLAP):
            break  # requested so long before the newest report that it ended before that one began
        answer = ssm.get_command_invocation(CommandId=invocation["CommandId"], InstanceId=instance_id)
        body = parse_report(str(answer.get("StandardOutputContent", "")))
        if body is None or body.get("arrayId") != array_id:
            continue
        if REPORT_KEY.get(str(body.get("document")), "") not in body:
            continue
        report = Report(
            document=str(body.get("document")),
            command_id=str(invocation["CommandId"]),
            at=when.isoformat() if when is not None else None,
            status=str(invocation.get("Status")),
            body=body,
        )
        found.append((_observed(body, answer.get("ExecutionEndDateTime")), report))
        newest = newest or when
    if not found:
        return None
    # Runs requested close together (two controllers' bootstraps each connecting the host) can end
    # in the other order than they were requested, and even than they read the node: a run lists
    # the paths, then spends a while writing its report, while the other connects its path, lists
    # and ends. So the report that read the node last says what the node has now
    return max(found, key=lambda f: (f[0], -found.index(f)))[1]


OVERLAP = timedelta(seconds=300)
"""The longest a report document runs (connect-path's timeoutSeconds): a report requested longer
than this before another ended before the other one began."""


def _observed(body: dict[str, Any], ended: object) -> datetime:
    """When the report read the node: its ``observedAt`` (the documents take it on the node as
    they begin to read it), else (a report of an older document) GetCommandInvocation's
    ExecutionEndDateTime (both ISO 8601); the earliest time when neither can be read."""
    for value in (body.get("observedAt"), ended):
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            continue
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)


READERS = 8
"""Nodes whose reports are read at once. Each node's report is 2-6 Run Command calls in a row
(a list per document, then the newest invocations' output); read one node after another, a
16-controller array with a dozen hosts is over a hundred calls in a row, near API Gateway's 29 s
for GET on a slow day. Eight at once stays within botocore's 10 pooled connections per client;
a throttled call is retried by the clients' standard retry mode (``clients.RETRY_CONFIG``; SSM's
own request rates were not measured here); a boto3 client is safe to share between threads."""


def last_reports(
    ssm: Any,
    wanted: Sequence[tuple[str, tuple[str, ...]]],
    array_id: str,
    recent: tuple[str, ...] = (),
    now: datetime | None = None,
) -> list[Report | None]:
    """``last_report`` of each (instance id, documents) in ``wanted``, in that order, up to
    ``READERS`` nodes at once (one node is read inline)."""
    if len(wanted) <= 1:
        return [last_report(ssm, node, documents, array_id, recent, now) for node, documents in wanted]
    with ThreadPoolExecutor(max_workers=min(READERS, len(wanted)), thread_name_prefix="reports") as pool:
        return list(pool.map(lambda w: last_report(ssm, w[0], w[1], array_id, recent, now), wanted))
