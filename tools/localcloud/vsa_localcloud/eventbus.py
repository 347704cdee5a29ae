"""Deliver AWS service events to EventBridge's default bus, as the real services do.

AWS services put their events (Auto Scaling lifecycle actions, CloudWatch alarm state changes,
EC2 snapshot notifications, SSM command status changes) on the default event bus of the
account and Region the resource lives in. The local cloud does the same through an internal
client, so rules, targets, retries and dead-letter queues all behave as configured.
"""

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from localstack.aws.connect import connect_to

LOG = logging.getLogger(__name__)


def emit(
    *,
    account_id: str,
    region: str,
    source: str,
    detail_type: str,
    detail: Mapping[str, Any],
    resources: Sequence[str] = (),
    time: datetime | None = None,
) -> None:
    """Put one event on the default bus of ``account_id``/``region``; failures are logged, never
    raised (a service does not fail an API call because its event could not be delivered)."""
    entry: dict[str, Any] = {
        "Source": source,
        "DetailType": detail_type,
        "Detail": json.dumps(detail, default=str),
        "Resources": list(resources),
        "EventBusName": "default",
        "Time": time or datetime.now(UTC),
    }
    try:
        events = connect_to(aws_access_key_id=account_id, region_name=region).events
        reply = events.put_events(Entries=[entry])
        if reply.get("FailedEntryCount"):
            LOG.warning("event %s/%s not delivered: %s", source, detail_type, reply["Entries"])
    except Exception:
        LOG.exception("event %s/%s not delivered", source, detail_type)
