"""SSM provider with Run Command that really runs documents on local managed nodes.

Stock LocalStack answers Run Command with moto, whose ``SendCommand`` reports Success at once
without running anything, validates neither document nor instances, and with ``InstanceIds``
and no ``Targets`` sends the command to every instance of the region (an empty ``Targets``
becomes an EC2 filter that matches everything); ``ListCommandInvocations``, ``CancelCommand``
and ``DescribeInstanceInformation`` are missing. Here those operations are answered from the
local managed nodes (``ssm_nodes``) and the commands run on them (``ssm_commands``); everything
else (parameters, documents, ...) is stock LocalStack/moto.

Control endpoint (``POST /_localcloud/ssm/<action>``): ``register_node``, ``set_ping``,
``deregister_node``, ``configure {"auto_register": true}`` (see ``ssm_nodes``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from localstack.aws.api import CommonServiceException, RequestContext, handler
from localstack.aws.api.ssm import (
    InvalidCommandId,
    InvalidFilterKey,
    InvalidFilterValue,
    InvalidInstanceId,
    InvalidPluginName,
    InvocationDoesNotExist,
)
from localstack.services.moto import MotoFallbackDispatcher
from localstack.services.plugins import Service, ServiceLifecycleHook
from localstack.services.ssm.provider import SsmProvider
from moto.ec2.models import ec2_backends

from vsa_localcloud import ssm_commands, ssm_documents, ssm_nodes
from vsa_localcloud.ssm_commands import COMMANDS, Command
from vsa_localcloud.ssm_nodes import LOCK

DEFAULT_TIMEOUT_SECONDS = 3600
INFORMATION_FILTER_KEYS = ("InstanceIds", "PingStatus", "PlatformTypes", "ResourceType", "AgentVersion")


MAX_COMMAND_INSTANCE_IDS = 50
"""SendCommand's InstanceIds: "Array Members: Minimum number of 0 items. Maximum number of 50 items."
(SSM API Reference, SendCommand); a larger fleet is addressed through Targets or several calls."""


class ValidationException(CommonServiceException):
    def __init__(self, message: str) -> None:
        super().__init__("ValidationException", message, 400, True)


def _page(
    items: list[Any], max_results: int | None, next_token: str | None, default: int = 50
) -> tuple[list[Any], str]:
    start = int(next_token) if next_token and next_token.isdigit() else 0
    size = max_results or default
    end = start + size
    return items[start:end], (str(end) if end < len(items) else "")


class VsaSsmProvider(SsmProvider, ServiceLifecycleHook):
    def on_before_stop(self) -> None:
        # LocalStack is shutting down: no script it started may outlive it. Done as the provider's
        # own lifecycle hook (SsmProvider is not a ServiceLifecycleHook; the mix-in makes it one)
        # because an on_infra_shutdown hook would need a new entry point in pyproject.toml.
        ssm_commands.stop_all()

    # --- managed nodes ----------------------------------------------------------------------
    @handler("DescribeInstanceInformation", expand=False)
    def describe_instance_information(
        self, context: RequestContext, request: dict[str, Any]
    ) -> dict[str, Any]:
        wanted: dict[str, list[str]] = {}
        for item in request.get("InstanceInformationFilterList") or []:
            wanted[item["key"]] = item["valueSet"]
        for item in request.get("Filters") or []:
            wanted[item["Key"]] = item["Values"]
        for key in wanted:
            if key not in INFORMATION_FILTER_KEYS and not key.startswith("tag:"):
                raise InvalidFilterKey(f"The filter key {key} is not valid.")
        with LOCK:
            # nodes whose instance is terminated are no longer listed
            found = [n.information() for n in ssm_nodes.nodes(context.account_id, context.region) if n.ping()]
        ec2 = ec2_backends[context.account_id][context.region]
        for key, values in wanted.items():
            if key.startswith("tag:"):
                tagged = {
                    t["resource_id"] for t in ec2.describe_tags(filters={"key": [key[4:]], "value": values})
                }
                found = [i for i in found if i["InstanceId"] in tagged]
                continue
            field = {"InstanceIds": "InstanceId", "PlatformTypes": "PlatformType"}.get(key, key)
            found = [i for i in found if str(i[field]) in values]
        page, token = _page(found, request.get("MaxResults"), request.get("NextToken"))
        return {"InstanceInformationList": page, **({"NextToken": token} if token else {})}

    # --- Run Command ------------------------------------------------------------------------
    def _targets(self, context: RequestContext, targets: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
        """Managed nodes a Targets list selects, and the instance ids it names that are not
        managed (their invocations end Undeliverable, as AWS reports them)."""
        account, region = context.account_id, context.region
        chosen: list[str] = []
        undeliverable: list[str] = []
        with LOCK:
            managed = {n.instance_id for n in ssm_nodes.nodes(account, region)}
        ec2 = ec2_backends[account][region]
        for target in targets:
            key, values = target["Key"], target.get("Values") or []
            if key.lower() == "instanceids":
                for instance_id in values:
                    usable = instance_id in managed and not ssm_nodes.instance_gone(
                        account, region, instance_id
                    )
                    (chosen if usable else undeliverable).append(instance_id)
            elif key.startswith("tag:") or key == "tag-key":
                tag_filter = {"key": [key[4:]], "value": values} if key != "tag-key" else {"key": values}
                tagged = {t["resource_id"] for t in ec2.describe_tags(filters=tag_filter)}
                chosen.extend(
                    sorted(i for i in managed & tagged if not ssm_nodes.instance_gone(account, region, i))
                )
            else:
                raise ValidationException(f"Target key {key} is not supported by the local cloud.")
        return list(dict.fromkeys(chosen)), list(dict.fromkeys(undeliverable))

    @handler("SendCommand", expand=False)
    def send_command(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        account, region = context.account_id, context.region
        given = request.get("InstanceIds") or []
        if len(given) > MAX_COMMAND_INSTANCE_IDS:
            # the input constraint is checked before anything else, in the JSON protocol's words
            raise ValidationException(
                f"1 validation error detected: Value '[{', '.join(given)}]' at 'instanceIds' failed "
                "to satisfy constraint: Member must have length less than or equal to "
                f"{MAX_COMMAND_INSTANCE_IDS}"
            )
        instance_ids: list[str] = list(dict.fromkeys(given))
        targets: list[dict[str, Any]] = request.get("Targets") or []
        if bool(instance_ids) == bool(targets):
            raise ValidationException("Specify either InstanceIds or Targets (exactly one of them).")
        document = ssm_documents.resolve(
            account, region, request["DocumentName"], request.get("DocumentVersion")
        )
        values = ssm_documents.parameters(document, request.get("Parameters"))
        # InstanceIds must all be managed nodes whose instance is not shutting down or terminated
        # (SendCommand: InvalidInstanceId); Targets resolve to managed nodes instead.
        invalid = [
            i
            for i in instance_ids
            if ssm_nodes.node(account, region, i) is None or ssm_nodes.instance_gone(account, region, i)
        ]
        if invalid:
            raise InvalidInstanceId(
                f"Instances [[{', '.join(invalid)}]] not in a valid state for account {account}"
            )
        undeliverable: list[str] = []
        chosen = instance_ids
        if targets:
            chosen, undeliverable = self._targets(context, targets)
        command = Command(
            account_id=account,
            region=region,
            document_name=document.name,
            document_version=document.version,
            steps=ssm_documents.steps(document, values),
            parameters=request.get("Parameters") or {},
            instance_ids=chosen,
            targets=targets,
            timeout_seconds=int(request.get("TimeoutSeconds") or DEFAULT_TIMEOUT_SECONDS),
            comment=request.get("Comment") or "",
            max_concurrency=request.get("MaxConcurrency") or "50",
            max_errors=request.get("MaxErrors") or "0",
        )
        if request.get("NotificationConfig"):
            command.notification_config = request["NotificationConfig"]
        described = ssm_commands.start(command, undeliverable)
        if targets:
            described["InstanceIds"] = []  # AWS echoes only the InstanceIds the request gave
        return {"Command": described}

    def _command(self, context: RequestContext, command_id: str) -> Command | None:
        command = COMMANDS.get(command_id)
        if command is None or (command.account_id, command.region) != (context.account_id, context.region):
            return None
        return command

    @handler("CancelCommand", expand=False)
    def cancel_command(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        command = self._command(context, request["CommandId"])
        if command is None:
            raise InvalidCommandId("Invalid command id.")
        ssm_commands.cancel(command, request.get("InstanceIds"))
        return {}

    @handler("GetCommandInvocation", expand=False)
    def get_command_invocation(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        command = self._command(context, request["CommandId"])
        invocation = command.invocations.get(request["InstanceId"]) if command else None
        if invocation is None:
            raise InvocationDoesNotExist()
        plugin = None
        if request.get("PluginName"):
            plugin = next((p for p in invocation.plugins if p.name == request["PluginName"]), None)
            if plugin is None:
                raise InvalidPluginName()
        with LOCK:
            return invocation.result(plugin)

    def _filtered(self, context: RequestContext, request: dict[str, Any]) -> list[Command]:
        commands = [
            c for c in COMMANDS.values() if (c.account_id, c.region) == (context.account_id, context.region)
        ]
        if request.get("CommandId"):
            commands = [c for c in commands if c.command_id == request["CommandId"]]
            if not commands:
                raise InvalidCommandId("Invalid command id.")
        if request.get("InstanceId"):
            commands = [c for c in commands if request["InstanceId"] in c.invocations]
        for item in request.get("Filters") or []:
            key, value = item["key"], item["value"]
            if key == "DocumentName":
                commands = [c for c in commands if c.document_name == value]
            elif key in ("InvokedAfter", "InvokedBefore"):
                # AWS: "2024-07-07T00:00:00Z", the command's RequestedDateTime at or after/before
                try:
                    when = datetime.fromisoformat(value)
                except ValueError:
                    raise InvalidFilterValue(f"The filter value {value} is not a valid timestamp.") from None
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                after = key == "InvokedAfter"
                commands = [c for c in commands if (c.requested >= when if after else c.requested <= when)]
            elif key not in ("Status", "ExecutionStage"):
                raise InvalidFilterKey(f"The filter key {key} is not valid.")
        return sorted(commands, key=lambda c: c.requested, reverse=True)

    @staticmethod
    def _status_filter(request: dict[str, Any]) -> str | None:
        return next((f["value"] for f in request.get("Filters") or [] if f["key"] == "Status"), None)

    @handler("ListCommands", expand=False)
    def list_commands(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        status = self._status_filter(request)
        with LOCK:
            found = [c.describe() for c in self._filtered(context, request)]
        found = [c for c in found if status is None or c["Status"] == status]
        page, token = _page(found, request.get("MaxResults"), request.get("NextToken"))
        return {"Commands": page, **({"NextToken": token} if token else {})}

    @handler("ListCommandInvocations", expand=False)
    def list_command_invocations(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        status = self._status_filter(request)
        details = bool(request.get("Details"))
        with LOCK:
            found = [
                i.describe(details)
                for c in self._filtered(context, request)
                for i in c.invocations.values()
                if not request.get("InstanceId") or i.instance_id == request["InstanceId"]
            ]
        found = [i for i in found if status is None or i["Status"] == status]
        page, token = _page(found, request.get("MaxResults"), request.get("NextToken"))
        return {"CommandInvocations": page, **({"NextToken": token} if token else {})}


# instance ids look like i-0123456789abcdef0 (moto) or mi-... (hybrid): only those are nodes
_INSTANCE_ID = re.compile(r"^(i|mi)-[0-9a-f]{8,17}$")


def _checked(action: Any) -> Any:
    def call(body: dict[str, Any]) -> dict[str, Any]:
        if not _INSTANCE_ID.match(str(body.get("InstanceId", ""))):
            raise ValueError(f"InstanceId {body.get('InstanceId')!r} is not an instance id")
        result: dict[str, Any] = action(body)
        return result

    return call


CONTROL = {
    "register_node": _checked(ssm_nodes.register_node),
    "set_ping": _checked(ssm_nodes.set_ping),
    "deregister_node": _checked(ssm_nodes.deregister_node),
    # {"auto_register": true}: every running EC2 instance is a managed node (ssm_nodes)
    "configure": ssm_nodes.configure,
}


def service() -> Service:
    return Service.for_provider(VsaSsmProvider(), dispatch_table_factory=MotoFallbackDispatcher)
