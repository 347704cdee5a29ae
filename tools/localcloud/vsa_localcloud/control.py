"""The local cloud's control endpoint: what a test needs to steer that AWS has no API for.

``POST /_localcloud/<area>/<action>`` with a JSON body calls ``CONTROL[action](body)`` of the
module ``vsa_localcloud.<area>`` and answers its result as JSON. Examples: register an EC2
instance as an SSM managed node, take a node offline, send a snapshot to ``error``. These
endpoints exist only in the local cloud; the product never calls them.
"""

import importlib
import json
import logging
from collections.abc import Callable
from typing import Any

from localstack.http import Request, Response, route
from localstack.runtime import hooks

LOG = logging.getLogger(__name__)

AREAS = ("autoscaling", "ebs", "cloudwatch", "ssm", "iam", "timings", "events")
MODULES = {"iam": "iam_enforcement", "events": "events_policy"}  # areas whose module is named otherwise
Handler = Callable[[dict[str, Any]], dict[str, Any]]


class ControlEndpoints:
    @route("/_localcloud/<area>/<action>", methods=["POST"])
    def control(self, request: Request, area: str, action: str) -> Response:
        if area not in AREAS:
            return _error(404, f"unknown area {area!r}; one of {', '.join(AREAS)}")
        module = importlib.import_module(f"vsa_localcloud.{MODULES.get(area, area)}")
        handlers: dict[str, Handler] = getattr(module, "CONTROL", {})
        if action not in handlers:
            return _error(404, f"unknown action {action!r} for {area}; one of {', '.join(sorted(handlers))}")
        try:
            body = json.loads(request.get_data() or b"{}")
        except ValueError as exc:
            return _error(400, f"body is not JSON: {exc}")
        try:
            return Response(json.dumps(handlers[action](body), default=str), 200, mimetype="application/json")
        except (KeyError, ValueError) as exc:
            return _error(400, str(exc))


def _error(status: int, message: str) -> Response:
    return Response(json.dumps({"error": message}), status, mimetype="application/json")


@hooks.on_infra_start()
def register_control_endpoints() -> None:
    from localstack.services.edge import ROUTER

    ROUTER.add(ControlEndpoints())
    LOG.info("local-cloud control endpoints at /_localcloud/<area>/<action>")
