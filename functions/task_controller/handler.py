"""BootstrapController / DrainController steps that need more than one AWS call or a decision.

One function, one step per invocation (``step`` in the input): the workflows own the order,
the waiting, the retries and the compensation; each step here reads what it needs and answers.

- ``prepare``: for a launching controller, the array's volumes and hosts, the controller's
  private address, the slot it should lease (the one it holds already on a retry, else the
  lowest free), and which volumes still need attaching to it, with device names.
- ``attach``: attach the listed volumes to the controller, all in one step (AttachVolume returns
  at once; io2 Multi-Attach), skipping any a retried step attached already.
- ``attachment``: whether every array volume is attached to the controller.
- ``node``: whether the controller is an SSM managed node that is online.
- ``connect``: send one Run Command document to every host, each with its own parameters added
  to the shared ones (connect-path needs each host's own NQN), in one step.
- ``commands``: the state of every host's invocation of those commands, from one
  ListCommandInvocations call: which succeeded, which failed (with the tail of the script's
  output) and which still run.
- ``detach``: compensation, detach the array's volumes from the controller.
- ``locate``: for a leaving controller (lifecycle hook or instance lost), its array and slot,
  the array's hosts and whether it is the last serving controller.

``prepare`` and ``locate`` also answer the hosts as ``hostBatches``, batches of at most 50
(``vsa_core.controllers.batches``: SendCommand's InstanceIds limit), which the workflows' host fan-outs
(undo and drain disconnect-path) send one command each.
"""

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, RootModel

from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.plan import bootstrap_heartbeat_seconds
from vsa_core.arrays.spec import ArrayId, InstanceId
from vsa_core.clients import client
from vsa_core.controllers import slots
from vsa_core.errors import ArrayNotFoundError, ConflictError
from vsa_core.naming import slot_key
from vsa_core.observability import logger, tracer
from vsa_core.registry import ArrayRegistry
from vsa_core.settings import get_settings

ATTACHED_STATES = ("attaching", "attached")
# SendCommand calls in flight at once in the connect step (the API's own rate limits, not this,
# bound a large fleet; the clients retry throttling with backoff)
FANOUT = 8
RUNNING = ("Pending", "InProgress", "Delayed", "Cancelling")
# InvokedAfter compares with SSM's clock, not the Lambda's: look a little further back (the
# command ids pick ours out of whatever else the window holds)
CLOCK_MARGIN = timedelta(minutes=5)


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class Prepare(_Step):
    step: Literal["prepare"]
    array_id: ArrayId = Field(alias="arrayId")
    instance_id: InstanceId = Field(alias="instanceId")


class VolumeDevice(_Step):
    volume_id: str = Field(alias="VolumeId", pattern=r"^vol-[0-9a-f]{8,17}$")
    device: str = Field(alias="Device", pattern=r"^/dev/[a-z0-9]+$")


class Attach(_Step):
    step: Literal["attach"]
    instance_id: InstanceId = Field(alias="instanceId")
    volumes: tuple[VolumeDevice, ...]


class HostTarget(_Step):
    instance_id: InstanceId = Field(alias="instanceId")
    host_nqn: str = Field(alias="hostNqn", min_length=1)


class Connect(_Step):
    """One document to every host: ``parameters`` are shared, each host adds ``HostNqn``."""

    step: Literal["connect"]
    instance_id: InstanceId = Field(alias="instanceId")  # the controller the paths go to
    document: str = Field(min_length=1)
    comment: str = Field(default="", max_length=100)
    timeout_seconds: int = Field(alias="timeoutSeconds", ge=30, le=2592000)
    parameters: dict[str, list[str]]
    hosts: tuple[HostTarget, ...] = Field(min_length=1)


class SentCommand(_Step):
    instance_id: InstanceId = Field(alias="instanceId")
    command_id: str = Field(alias="commandId", min_length=1)


class Commands(_Step):
    step: Literal["commands"]
    instance_id: InstanceId = Field(alias="instanceId")
    document: str = Field(min_length=1)
    since: datetime  # the connect step's clock just before it sent them (less a margin)
    commands: tuple[SentCommand, ...] = Field(min_length=1)


class Attachment(_Step):
    step: Literal["attachment"]
    array_id: ArrayId = Field(alias="arrayId")
    instance_id: InstanceId = Field(alias="instanceId")


class Node(_Step):
    step: Literal["node"]
    instance_id: InstanceId = Field(alias="instanceId")


class Detach(_Step):
    step: Literal["detach"]
    array_id: ArrayId = Field(alias="arrayId")
    instance_id: InstanceId = Field(alias="instanceId")


class Locate(_Step):
    step: Literal["locate"]
    instance_id: InstanceId = Field(alias="instanceId")
    array_id: ArrayId | None = Field(default=None, alias="arrayId")


class Request(
    RootModel[
        Annotated[
            Prepare | Attach | Attachment | Node | Connect | Commands | Detach | Locate,
            Field(discriminator="step"),
        ]
    ]
):
    pass


class Steps:
    def __init__(self, registry: ArrayRegistry, service: ArrayService, ec2: Any, ssm: Any) -> None:
        self._registry, self._service, self._ec2, self._ssm = registry, service, ec2, ssm

    def _array_volumes(self, array_id: str) -> tuple[Any, tuple[str, ...], list[dict[str, Any]]]:
        spec = self._registry.get(array_id).spec
        ids = self._service.volume_ids(spec)
        pages = self._ec2.get_paginator("describe_volumes").paginate(VolumeIds=list(ids))
        return spec, ids, [dict(v) for page in pages for v in page["Volumes"]]

    def prepare(self, request: Prepare) -> dict[str, Any]:
        spec, ids, volumes = self._array_volumes(request.array_id)
        reservations = self._ec2.describe_instances(InstanceIds=[request.instance_id])["Reservations"]
        instance = reservations[0]["Instances"][0]
        address = instance.get("PrivateIpAddress")
        if not address:
            raise ConflictError(f"controller {request.instance_id} has no private IP address to listen on")
        if instance.get("Placement", {}).get("AvailabilityZone") not in (None, spec.availability_zone):
            raise ConflictError(
                f"controller {request.instance_id} is in {instance['Placement']['AvailabilityZone']}, the "
                f"array's volumes in {spec.availability_zone}: fix the group's subnets"
            )
        attached = {
            v["VolumeId"]
            for v in volumes
            for a in v.get("Attachments", [])
            if a["InstanceId"] == request.instance_id and a["State"] in ATTACHED_STATES
        }
        in_use = [m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])]
        todo = [v for v in ids if v not in attached]
        devices = slots.devices_for(todo, in_use)
        slot = slots.choose_slot(
            {s: item["instanceId"] for s, item in self._registry.slots(request.array_id).items()},
            request.instance_id,
        )
        return {
            "arrayId": request.array_id,
            "instanceId": request.instance_id,
            "address": address,
            "slot": slot,
            "slotKey": slot_key(slot),
            **slots.paths(spec, ids).as_dict(),
            "attach": [{"VolumeId": v, "Device": devices[v]} for v in todo],
            "volumeCount": len(ids),
            "heartbeatSeconds": bootstrap_heartbeat_seconds(spec),
        }

    def attach(self, request: Attach) -> dict[str, Any]:
        """Every listed volume to the controller in one step: AttachVolume only starts an
        attachment, so the calls return at once and the attachments proceed in parallel (the
        workflow then waits on ``attachment``). A volume already attaching or attached to this
        controller (a retried step) is skipped rather than refused."""
        wanted = {v.volume_id: v.device for v in request.volumes}
        if not wanted:
            return {"requested": [], "already": []}
        pages = self._ec2.get_paginator("describe_volumes").paginate(VolumeIds=list(wanted))
        described = [v for page in pages for v in page["Volumes"]]
        already = sorted(
            v["VolumeId"]
            for v in described
            for a in v.get("Attachments", [])
            if a["InstanceId"] == request.instance_id and a["State"] in ATTACHED_STATES
        )
        creating = sorted(v["VolumeId"] for v in described if v["State"] == "creating")
        todo = [v for v in wanted if v not in already and v not in creating]
        for volume_id in todo:
            self._ec2.attach_volume(
                VolumeId=volume_id, InstanceId=request.instance_id, Device=wanted[volume_id]
            )
        # a volume the API created moments ago may still be ``creating`` (AttachVolume would
        # refuse it): the ``attachment`` polls attach it once it is available
        return {"requested": todo, "already": already, "creating": creating}

    def connect(self, request: Connect) -> dict[str, Any]:
        """The document to every host at once, one SendCommand per host (each carries its own
        host NQN), sent side by side; answers the command ids the ``commands`` step follows, and
        since when to look for them. Re-sending after a failed step is harmless: connect-path is
        idempotent."""
        since = datetime.now(UTC) - CLOCK_MARGIN

        def send(host: HostTarget) -> dict[str, str]:
            answer = self._ssm.send_command(
                DocumentName=request.document,
                InstanceIds=[host.instance_id],
                Comment=request.comment,
                TimeoutSeconds=request.timeout_seconds,
                Parameters={**request.parameters, "HostNqn": [host.host_nqn]},
            )
            return {"instanceId": host.instance_id, "commandId": answer["Command"]["CommandId"]}

        with ThreadPoolExecutor(max_workers=min(FANOUT, len(request.hosts))) as pool:
            commands = list(pool.map(send, request.hosts))
        return {"document": request.document, "since": since.isoformat(), "commands": commands}

    def commands(self, request: Commands) -> dict[str, Any]:
        """Where every host's invocation stands, from one ListCommandInvocations (the document's
        invocations since the commands were sent; one page holds 50) however many hosts there
        are: ``done`` once all succeeded; ``failed`` lists any that ended otherwise (status and
        the tail of the script's output, to say why); ``running`` the rest, including any not
        visible yet. The commands' own TimeoutSeconds bound how long anything stays running."""
        wanted = {(c.command_id, c.instance_id) for c in request.commands}
        found: dict[tuple[str, str], dict[str, Any]] = {}
        pages = self._ssm.get_paginator("list_command_invocations").paginate(
            Details=True,
            Filters=[
                {"key": "DocumentName", "value": request.document},
                {"key": "InvokedAfter", "value": request.since.strftime("%Y-%m-%dT%H:%M:%SZ")},
            ],
        )
        for page in pages:
            for invocation in page["CommandInvocations"]:
                key = (invocation["CommandId"], invocation["InstanceId"])
                if key in wanted:
                    found[key] = invocation
            if len(found) == len(wanted):
                break
        states = []
        for command_id, instance_id in sorted(wanted, key=lambda k: k[1]):
            invocation = found.get((command_id, instance_id), {"Status": "Pending"})
            plugins = invocation.get("CommandPlugins") or []
            # the tail of a failed script's output says why (the documents print the reason last)
            error = " ".join(str(p.get("Output", ""))[-300:] for p in plugins if p.get("Status") != "Success")
            states.append({"instanceId": instance_id, "status": invocation["Status"], "error": error.strip()})
        failed = [s for s in states if s["status"] not in RUNNING and s["status"] != "Success"]
        running = [s["instanceId"] for s in states if s["status"] in RUNNING]
        return {
            "done": not failed and not running,
            "failed": failed,
            "running": running,
            "succeeded": sum(s["status"] == "Success" for s in states),
            # since the commands were sent: the workflow gives up past the commands' own timeout
            # (a bound on its loop should an invocation never be listed)
            "waitedSeconds": int((datetime.now(UTC) - request.since - CLOCK_MARGIN).total_seconds()),
        }

    def attachment(self, request: Attachment) -> dict[str, Any]:
        """Whether every array volume is attached to the controller; a volume that was still
        ``creating`` when the ``attach`` step ran (the API does not wait for new volumes) and is
        available now gets its attachment started here, so the workflow's wait loop covers both."""
        _, ids, volumes = self._array_volumes(request.array_id)
        late = [
            v["VolumeId"]
            for v in volumes
            if v["State"] in ("available", "in-use")
            and not any(a["InstanceId"] == request.instance_id for a in v.get("Attachments", []))
        ]
        if late:
            reservations = self._ec2.describe_instances(InstanceIds=[request.instance_id])["Reservations"]
            instance = reservations[0]["Instances"][0]
            in_use = [m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])]
            in_use += [
                a["Device"]
                for v in volumes
                for a in v.get("Attachments", [])
                if a["InstanceId"] == request.instance_id and a.get("Device")
            ]
            devices = slots.devices_for(late, in_use)
            for volume_id in late:
                try:
                    self._ec2.attach_volume(
                        VolumeId=volume_id, InstanceId=request.instance_id, Device=devices[volume_id]
                    )
                except ClientError as error:
                    # an attachment the attach step started and DescribeVolumes did not show yet
                    if error.response["Error"]["Code"] not in ("VolumeInUse", "IncorrectState"):
                        raise
            volumes = self._array_volumes(request.array_id)[2]
        states = {
            v["VolumeId"]: next(
                (a["State"] for a in v.get("Attachments", []) if a["InstanceId"] == request.instance_id),
                "detached",
            )
            for v in volumes
        }
        waiting = sorted(v for v in ids if states.get(v) != "attached")
        return {"attached": not waiting, "waiting": waiting, "count": len(ids)}

    def node(self, request: Node) -> dict[str, Any]:
        """Whether the controller is an online managed node; ``gone`` once its instance is
        shutting down or terminated (e.g. its lifecycle action timed out and the group abandoned
        it): no point waiting for it any longer."""
        reservations = self._ec2.describe_instances(InstanceIds=[request.instance_id])["Reservations"]
        state = next((i["State"]["Name"] for r in reservations for i in r["Instances"]), "terminated")
        found = self._ssm.describe_instance_information(
            Filters=[{"Key": "InstanceIds", "Values": [request.instance_id]}]
        )["InstanceInformationList"]
        ping = found[0]["PingStatus"] if found else "NotRegistered"
        gone = state in ("shutting-down", "terminated")
        return {
            "online": ping == "Online" and not gone,
            "pingStatus": ping,
            "instanceState": state,
            "gone": gone,
        }

    def detach(self, request: Detach) -> dict[str, Any]:
        _, _, volumes = self._array_volumes(request.array_id)
        detached = []
        for volume in volumes:
            for attachment in volume.get("Attachments", []):
                if attachment["InstanceId"] == request.instance_id and attachment["State"] in ATTACHED_STATES:
                    self._ec2.detach_volume(VolumeId=volume["VolumeId"], InstanceId=request.instance_id)
                    detached.append(volume["VolumeId"])
        return {"detached": detached}

    def locate(self, request: Locate) -> dict[str, Any]:
        found = self._registry.find_slot(request.instance_id)
        if found is None:
            return {"found": False, "instanceId": request.instance_id}
        array_id, slot, item = found
        try:
            array = self._registry.get(array_id)
        except ArrayNotFoundError:
            return {"found": False, "instanceId": request.instance_id}
        ids = self._service.volume_ids(array.spec)
        last = slots.last_serving(self._registry.slots(array_id), request.instance_id)
        deleting = array.deleting is not None
        return {
            "found": True,
            "arrayId": array_id,
            "instanceId": request.instance_id,
            "slot": slot,
            "slotKey": slot_key(slot),
            "address": item.get("address", ""),
            "state": item.get("state", ""),
            **slots.paths(array.spec, ids).as_dict(),
            "lastServing": last,
            "deleting": deleting,
            # the last serving controller's paths are only taken away when the array goes
            "allowLastPath": "true" if deleting else "false",
        }


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=Request)
def lambda_handler(event: Request, context: LambdaContext) -> dict[str, Any]:
    request = event.root
    logger.append_keys(step=request.step, instance_id=request.instance_id)
    settings = get_settings()
    steps = Steps(
        ArrayRegistry(settings.table_name),
        ArrayService(scheduler_role_arn=settings.backup_scheduler_role_arn),
        client("ec2"),
        client("ssm"),
    )
    result: dict[str, Any] = getattr(steps, request.step)(request)
    logger.info("controller step", extra={"result": result})
    return result
