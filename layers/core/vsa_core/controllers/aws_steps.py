"""The BootstrapController / DrainController steps that need more than one AWS call or a decision.

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

from typing import Any

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.controllers import aws_bootstrap, aws_commands, aws_drain
from vsa_core.controllers.aws_context import ControllerContext
from vsa_core.controllers.steps import Attach, Attachment, Commands, Connect, Detach, Locate, Node, Prepare
from vsa_core.steps import on_context

StepRequest = Prepare | Attach | Attachment | Node | Connect | Commands | Detach | Locate


class Steps:
    """Each step one function of ``aws_bootstrap`` / ``aws_commands`` / ``aws_drain``, given the
    clients this object holds."""

    def __init__(self, registry: ArrayRegistry, service: ArrayService, ec2: Any, ssm: Any) -> None:
        self.ctx = ControllerContext(registry=registry, arrays=service, ec2=ec2, ssm=ssm)

    def run(self, request: StepRequest) -> dict[str, Any]:
        result: dict[str, Any] = getattr(self, request.step)(request)
        return result

    prepare = on_context(aws_bootstrap.prepare)
    attach = on_context(aws_bootstrap.attach)
    attachment = on_context(aws_bootstrap.attachment)
    node = on_context(aws_bootstrap.node)
    detach = on_context(aws_bootstrap.detach)
    connect = on_context(aws_commands.connect)
    commands = on_context(aws_commands.commands)
    locate = on_context(aws_drain.locate)
