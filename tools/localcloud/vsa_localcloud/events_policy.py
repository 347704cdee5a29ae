"""EventBridge PutEvents refused where AWS refuses it: an event bus's resource-based policy, and
the event sources reserved for AWS services.

Community LocalStack evaluates no event bus policy and accepts any source, so on the local cloud
any principal could forge the product's own events on a bus whose policy reserves it to one role,
or forge the ``aws.autoscaling`` lifecycle actions and ``aws.cloudwatch`` alarm state changes the
product acts on. Two patches of LocalStack's EventBridge provider (``install``, from
``patches.py``) close both:

1. **The bus's resource-based policy**, for every entry's bus (``EventBusName`` as a name or an
   ARN; the default bus when absent), before any entry is processed. The statements whose
   ``Principal`` (or ``NotPrincipal``) names the caller are evaluated with ``iam_policy.evaluate``
   for ``events:PutEvents`` on the bus's ARN. "Policy evaluation logic" (IAM user guide,
   https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
   an explicit ``Deny`` in a resource-based policy refuses the request whatever the identity
   policies allow, the account root included; a principal of another account also needs an
   ``Allow`` in it ("Permissions for event buses in Amazon EventBridge", EventBridge user guide,
   https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-bus-perms.html). The refusal
   is the call's, as EventBridge refuses a PutEvents its identity policies do not allow:
   ``AccessDeniedException`` (HTTP 400, EventBridge API reference, Common Errors) with IAM's
   message ("User: <principal> is not authorized to perform: events:PutEvents on resource: <bus>
   with an explicit deny in a resource-based policy": IAM user guide, "Troubleshoot access denied
   error messages", https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_access-denied.html).
   PutEventsResultEntry also lists ``AccessDeniedException`` as a per-entry error; which of the
   two AWS answers for a resource policy's deny is not documented, and the call's error is the
   one the IAM authorization of the request gives.
2. **Reserved sources.** An entry whose ``Source`` starts with ``aws.`` fails on its own,
   ``NotAuthorizedForSourceException`` ("You do not have permissions to publish events with this
   source onto this event bus", PutEventsResultEntry in the EventBridge API reference,
   https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsResultEntry.html;
   AWS answers it with the message "Not authorized for the source."); the other entries of the
   call go on. Only AWS's own services put such events: here the local cloud's service emitters
   (``eventbus.emit``: an internal call with no role session) and rules forwarding an event to
   another bus (an internal call naming the ``events`` service principal) are those services.
   Tests that need a service's event use ``POST /_localcloud/events/emit`` (``CONTROL``).

Who calls: a role session's access key is looked up in LocalStack's STS store
(``iam_enforcement.identify``): ``aws:PrincipalArn`` is the role's ARN, the session's ARN names
it in the message. Plain access keys (``test``: tests, the operator, ``sam deploy``) are the
account root, ``arn:aws:iam::<account>:root``. An internal call naming a service principal (a
rule's target) is that service, with ``aws:SourceArn``/``aws:SourceAccount`` of the rule; the
local cloud's own service emitters are not evaluated (AWS delivers its services' events to the
default bus whatever its policy allows). Context keys: ``aws:PrincipalArn``,
``aws:PrincipalAccount``, ``aws:PrincipalType``, ``aws:userid``, ``aws:SourceAccount`` and
``aws:SourceArn`` for a service, ``aws:CurrentTime``, ``aws:SecureTransport``.

Decisions are logged and listed as IAM's are (``IAM allow``/``IAM DENY``, ``/_localcloud/iam/
decisions``) and follow IAM enforcement's mode: ``off`` evaluates no bus policy, ``record``
logs refusals without refusing. Reserved sources are refused in every mode (that is EventBridge's
rule, not a policy). Known limits: a same-account ``Allow`` in a bus policy does not make up for
an identity policy that does not allow (IAM enforcement refuses first); ``events:source`` and
``events:detail-type`` conditions are not set (the Service Authorization Reference lists them for
identity policies); IAM users' access keys are taken as the account root.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vsa_localcloud import iam_enforcement, iam_policy

LOG = logging.getLogger(__name__)

ACTION = "events:PutEvents"
RESERVED_SOURCE_PREFIX = "aws."
NOT_AUTHORIZED_FOR_SOURCE = {
    "ErrorCode": "NotAuthorizedForSourceException",
    "ErrorMessage": "Not authorized for the source.",
}


@dataclass(frozen=True)
class Principal:
    """Who puts the events, as a bus policy's ``Principal`` and condition keys see it."""

    arn: str  # the role's ARN, the account root's, or the service principal's name
    account: str
    name_in_message: str  # IAM's "User: ..." (a role session's ARN)
    kind: str  # aws:PrincipalType: AssumedRole | Account | Service
    user_id: str
    source_arn: str | None = None  # a service's aws:SourceArn (the rule forwarding the event)

    def context(self, region: str) -> dict[str, list[str]]:
        now = datetime.now(UTC)
        keys = {
            "aws:principaltype": [self.kind],
            "aws:requestedregion": [region],
            "aws:currenttime": [now.strftime("%Y-%m-%dT%H:%M:%SZ")],
            "aws:epochtime": [str(int(now.timestamp()))],
            "aws:securetransport": ["true"],
        }
        if self.kind == "Service":
            # "AWS global condition context keys": a service principal's request carries
            # aws:PrincipalServiceName, and aws:SourceArn/aws:SourceAccount of the resource it
            # acts for; aws:PrincipalArn and aws:PrincipalAccount are absent.
            keys["aws:principalservicename"] = [self.arn]
            if self.source_arn:
                keys["aws:sourcearn"] = [self.source_arn]
                keys["aws:sourceaccount"] = [self.source_arn.split(":")[4]]
            return keys
        keys.update(
            {
                "aws:principalarn": [self.arn],
                "aws:principalaccount": [self.account],
                "aws:userid": [self.user_id],
            }
        )
        return keys


def principal_of(context: Any) -> Principal | None:
    """The caller of a PutEvents request; None for the local cloud's own service emitters."""
    caller = iam_enforcement.identify(context.account_id, context.request)
    if caller is not None:
        return Principal(
            arn=caller.role_arn,
            account=caller.account,
            name_in_message=caller.session_arn,
            kind="AssumedRole",
            user_id=caller.user_id,
        )
    internal = context.internal_request_params
    if internal is not None:
        service = internal.get("service_principal")
        if not service:
            return None
        name = f"{service}.amazonaws.com"
        return Principal(name, context.account_id, name, "Service", name, internal.get("source_arn"))
    root = f"arn:aws:iam::{context.account_id}:root"
    return Principal(root, context.account_id, root, "Account", context.account_id)


def is_reserved_source(entry: dict[str, Any], context: Any) -> bool:
    """An entry AWS refuses: an ``aws.`` source put by anyone but an AWS service."""
    source = entry.get("Source")
    if not isinstance(source, str) or not source.startswith(RESERVED_SOURCE_PREFIX):
        return False
    internal = context.internal_request_params
    if internal is None:
        return True
    if internal.get("service_principal") == "events":
        return False  # a rule forwarding an event to another bus keeps its source
    return iam_enforcement.identify(context.account_id, context.request) is not None


# --- the bus's policy ------------------------------------------------------------------------------


def _values(spec: Any) -> list[str]:
    return [spec] if isinstance(spec, str) else [v for v in spec or [] if isinstance(v, str)]


def names(spec: Any, who: Principal) -> bool:
    """Whether a policy's ``Principal`` element names the caller ("AWS JSON policy elements:
    Principal", IAM user guide): ``"*"`` everyone; an account (its id or ``:root`` ARN) every
    principal of that account; a role's ARN the role and its sessions; ``Service`` a service."""
    if spec == "*":
        return True
    if not isinstance(spec, dict):
        return False
    if who.kind == "Service":
        return who.arn in _values(spec.get("Service"))
    for value in _values(spec.get("AWS")):
        if value in ("*", who.account, f"arn:aws:iam::{who.account}:root", who.arn, who.name_in_message):
            return True
    return False


def applicable_statements(policy: Any, bus_name: str, who: Principal) -> list[iam_policy.Statement]:
    """The policy's statements whose Principal (or NotPrincipal) applies to the caller."""
    raw = policy.get("Statement", []) if isinstance(policy, dict) else []
    raw = [raw] if isinstance(raw, dict) else list(raw)
    parsed = iam_policy.parse_policy({"Statement": raw}, f"event-bus/{bus_name} policy")
    kept = []
    for statement, item in zip(parsed, raw, strict=True):
        if "Principal" in item:
            applies = names(item["Principal"], who)
        else:
            applies = "NotPrincipal" in item and not names(item["NotPrincipal"], who)
        if applies:
            kept.append(statement)
    return kept


def _bus(name_or_arn: str, context: Any) -> Any | None:
    """The event bus an entry names, from LocalStack's events store; None when there is none."""
    from localstack.services.events.models import events_stores

    region, account = context.region, context.account_id
    name = name_or_arn
    if name_or_arn.startswith("arn:"):
        parts = name_or_arn.split(":", 5)
        region, account = parts[3] or region, parts[4] or account
        name = parts[5].split("/", 1)[-1]
    try:
        return events_stores[account][region].event_buses.get(name)
    except KeyError:  # a Region LocalStack does not know holds no buses
        return None


def decide(bus: Any, who: Principal) -> iam_policy.Decision | None:
    """The bus policy's refusal of the caller, or None when it does not refuse."""
    statements = applicable_statements(bus.policy or {}, bus.name, who)
    decision = iam_policy.evaluate(statements, ACTION, [(bus.arn, who.context(bus.region))])
    if decision.reason == "explicit deny":
        return decision
    if decision.allowed or who.account == bus.account_id:
        return None  # same account: the identity policies decide (IAM enforcement, the root)
    return decision  # another account's principal needs the bus policy's Allow


def _record(who: Principal, bus: Any, decision: iam_policy.Decision | None) -> None:
    allowed = decision is None
    described = "resource-based policy: " + (decision.describe() if decision is not None else "no deny")
    with iam_enforcement._LOCK:  # the decisions IAM enforcement lists
        iam_enforcement.DECISIONS.append(
            {
                "time": time.time(),
                "role": who.arn,
                "action": ACTION,
                "resources": [bus.arn],
                "allowed": allowed,
                "decided_by": described,
            }
        )
    if allowed:
        LOG.info("IAM allow %s %s on %s: %s", who.name_in_message, ACTION, bus.arn, described)
    else:
        LOG.warning(
            "IAM DENY %s %s on %s: %s%s",
            who.name_in_message,
            ACTION,
            bus.arn,
            described,
            " (record mode: not refused)" if iam_enforcement.STATE["mode"] == "record" else "",
        )


def message(who: Principal, bus_arn: str, decision: iam_policy.Decision) -> str:
    why = (
        "with an explicit deny in a resource-based policy"
        if decision.reason == "explicit deny"
        else f"because no resource-based policy allows the {ACTION} action"
    )
    return f"User: {who.name_in_message} is not authorized to perform: {ACTION} on resource: {bus_arn} {why}"


def refuse_denied_buses(context: Any, entries: list[dict[str, Any]]) -> None:
    """Raise AccessDeniedException when a bus an entry goes to refuses the caller."""
    mode = iam_enforcement.STATE["mode"]
    if mode == "off":
        return
    who = principal_of(context)
    if who is None:
        return
    seen: set[str] = set()
    for entry in entries:
        bus = _bus(str(entry.get("EventBusName") or "default"), context)
        if bus is None or bus.arn in seen:
            continue  # the provider answers a bus that does not exist as before
        seen.add(bus.arn)
        decision = decide(bus, who)
        _record(who, bus, decision)
        if decision is not None and mode == "enforce":
            from localstack.aws.api.events import AccessDeniedException

            raise AccessDeniedException(message(who, bus.arn, decision))


# --- the hooks -------------------------------------------------------------------------------------


def install() -> None:
    """Patch LocalStack's EventBridge provider: PutEvents authorizes each entry's bus against
    its policy, and each entry with a reserved source fails on its own."""
    from localstack.services.events.provider import EventsProvider
    from localstack.utils.patch import patch

    if getattr(EventsProvider.put_events, "vsa_bus_policy", False):
        return

    @patch(EventsProvider.put_events)
    def put_events(fn: Any, self: Any, context: Any, entries: Any, *args: Any, **kwargs: Any) -> Any:
        refuse_denied_buses(context, list(entries or []))
        return fn(self, context, entries, *args, **kwargs)

    @patch(EventsProvider._process_entry)
    def process_entry(
        fn: Any, self: Any, entry: Any, processed: list[Any], failed: dict[str, int], context: Any
    ) -> Any:
        if is_reserved_source(entry, context):
            LOG.warning("EventBridge: entry with source %r refused (reserved for AWS)", entry.get("Source"))
            processed.append(dict(NOT_AUTHORIZED_FOR_SOURCE))
            failed["count"] += 1
            return None
        return fn(self, entry, processed, failed, context)

    EventsProvider.put_events.vsa_bus_policy = True  # type: ignore[attr-defined]
    _event_bus_policy_property()


def _event_bus_policy_property() -> None:
    """CloudFormation's AWS::Events::EventBus ``Policy`` ("The permissions policy of the event
    bus, describing which other AWS accounts can write events to this event bus", updatable with
    no interruption: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-events-eventbus.html).
    LocalStack's provider creates the bus by name only and raises NotImplementedError on update,
    so a template's bus policy was silently absent. Here create puts it (PutPermission with the
    whole document) and update puts the new one, or removes it when the template no longer has
    one. AWS::Events::EventBusPolicy is LocalStack's own and works as it is."""
    from localstack.services.cloudformation.resource_provider import OperationStatus, ProgressEvent
    from localstack.services.events.resource_providers.aws_events_eventbus import EventsEventBusProvider
    from localstack.utils.patch import patch

    def put_policy(request: Any, model: dict[str, Any]) -> None:
        events, policy = request.aws_client_factory.events, model.get("Policy")
        if policy:
            text = policy if isinstance(policy, str) else json.dumps(policy)
            events.put_permission(EventBusName=model["Name"], Policy=text)
        else:
            events.remove_permission(EventBusName=model["Name"], RemoveAllPermissions=True)

    @patch(EventsEventBusProvider.create)
    def create(fn: Any, self: Any, request: Any) -> Any:
        result = fn(self, request)
        if result.status == OperationStatus.SUCCESS and request.desired_state.get("Policy"):
            put_policy(request, request.desired_state)
        return result

    @patch(EventsEventBusProvider.update)
    def update(fn: Any, self: Any, request: Any) -> Any:
        model = {**(request.previous_state or {}), **request.desired_state}
        if not request.desired_state.get("Policy"):
            model.pop("Policy", None)
        put_policy(request, model)
        return ProgressEvent(status=OperationStatus.SUCCESS, resource_model=model)


# --- control endpoint (POST /_localcloud/events/<action>) ------------------------------------------


def _emit(body: dict[str, Any]) -> dict[str, Any]:
    """``{"Entries": [...], "Account"?, "Region"?}``: put events as the AWS service that emits
    them (an ``aws.autoscaling`` lifecycle action, an ``aws.cloudwatch`` alarm state change), as
    the local cloud's own services do; the PutEvents answer."""
    from localstack.aws.connect import connect_to

    entries = body["Entries"]
    if not isinstance(entries, list) or not entries:
        raise ValueError("Entries must be a non-empty list of PutEvents entries")
    account = str(body.get("Account", "000000000000"))
    events = connect_to(aws_access_key_id=account, region_name=str(body.get("Region", "us-east-1"))).events
    reply: dict[str, Any] = events.put_events(Entries=entries)
    reply.pop("ResponseMetadata", None)
    return reply


CONTROL = {"emit": _emit}
