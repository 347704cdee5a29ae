"""AWS::CloudWatch::Dashboard: ``Ref`` is the dashboard name (LocalStack has no provider for it,
though its CloudWatch keeps dashboards: PutDashboard, GetDashboard, DeleteDashboards).

``DashboardName`` is create-only (a new name replaces the resource). The body must be a JSON
object with a ``widgets`` list, as CloudWatch's PutDashboard requires ("DashboardBody ... a
JSON string ... must include at least one widgets element"); LocalStack's PutDashboard stores
any string, so the check is here, where a template's body reaches it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from localstack.services.cloudformation.provider_utils import get_schema_path
from localstack.services.cloudformation.resource_provider import (
    ProgressEvent,
    ResourceProvider,
    ResourceRequest,
)

from vsa_localcloud.cfn._util import Model, failed, not_found, physical_name, success, unsupported_properties

SUPPORTED = ("DashboardName", "DashboardBody")


def invalid_body(body: object) -> str | None:
    """Why CloudWatch would refuse ``body`` (None: it would take it)."""
    try:
        parsed = json.loads(body) if isinstance(body, str) else None
    except json.JSONDecodeError as error:
        return f"DashboardBody is not valid JSON: {error}"
    if not isinstance(parsed, dict) or not isinstance(parsed.get("widgets"), list):
        return "DashboardBody must be a JSON object with a 'widgets' list"
    return None


class CloudWatchDashboardProvider(ResourceProvider[Model]):
    TYPE = "AWS::CloudWatch::Dashboard"
    SCHEMA = get_schema_path(Path(__file__))

    def create(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED) or invalid_body(
            model.get("DashboardBody")
        ):
            return failed(message, "InvalidParameterInput")
        model["DashboardName"] = physical_name(request, model.get("DashboardName"), 255)
        request.aws_client_factory.cloudwatch.put_dashboard(
            DashboardName=model["DashboardName"], DashboardBody=model["DashboardBody"]
        )
        return success(model, request)

    def read(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        cloudwatch = request.aws_client_factory.cloudwatch
        name = request.desired_state["DashboardName"]
        try:
            body = cloudwatch.get_dashboard(DashboardName=name)["DashboardBody"]
        except cloudwatch.exceptions.ClientError:
            return not_found(self.TYPE, name)
        return success({**request.desired_state, "DashboardBody": body}, request)

    def update(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED) or invalid_body(
            model.get("DashboardBody")
        ):
            return failed(message, "InvalidParameterInput")
        model["DashboardName"] = (request.previous_state or {}).get("DashboardName") or model["DashboardName"]
        request.aws_client_factory.cloudwatch.put_dashboard(
            DashboardName=model["DashboardName"], DashboardBody=model["DashboardBody"]
        )
        return success(model, request)

    def delete(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        cloudwatch = request.aws_client_factory.cloudwatch
        with contextlib.suppress(cloudwatch.exceptions.ClientError):
            cloudwatch.delete_dashboards(DashboardNames=[request.desired_state["DashboardName"]])
        return success({}, request)
