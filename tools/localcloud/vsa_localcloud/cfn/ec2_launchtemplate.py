"""AWS::EC2::LaunchTemplate: ``Ref`` is the launch template id; ``Fn::GetAtt`` gives
``LaunchTemplateId``, ``LatestVersionNumber`` and ``DefaultVersionNumber`` (strings, as on AWS).

Launch templates are immutable: a change to ``LaunchTemplateData`` (or ``VersionDescription``)
creates a new version, which becomes the default version. The name and the template's own tags
are create-only.
"""

from __future__ import annotations

from pathlib import Path

from botocore.exceptions import ClientError
from localstack.services.cloudformation.provider_utils import get_schema_path
from localstack.services.cloudformation.resource_provider import (
    ProgressEvent,
    ResourceProvider,
    ResourceRequest,
)

from vsa_localcloud.cfn._util import (
    Model,
    changed,
    failed,
    not_found,
    physical_name,
    present,
    success,
    unsupported_properties,
)

SUPPORTED = (
    "LaunchTemplateName",
    "LaunchTemplateData",
    "VersionDescription",
    "TagSpecifications",
    "LaunchTemplateId",
    "DefaultVersionNumber",
    "LatestVersionNumber",
)
NOT_FOUND = ("InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateName.NotFoundException")


class EC2LaunchTemplateProvider(ResourceProvider[Model]):
    TYPE = "AWS::EC2::LaunchTemplate"
    SCHEMA = get_schema_path(Path(__file__))

    @staticmethod
    def _with_versions(model: Model, template: Model) -> Model:
        model["LaunchTemplateId"] = template["LaunchTemplateId"]
        model["LaunchTemplateName"] = template["LaunchTemplateName"]
        # Fn::GetAtt returns strings (and LocalStack's engine refuses non-string attribute values).
        model["LatestVersionNumber"] = str(template["LatestVersionNumber"])
        model["DefaultVersionNumber"] = str(template["DefaultVersionNumber"])
        return model

    def create(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED):
            return failed(message)
        ec2 = request.aws_client_factory.ec2
        params = present(model, ("LaunchTemplateData", "VersionDescription", "TagSpecifications"))
        params["LaunchTemplateName"] = physical_name(request, model.get("LaunchTemplateName"), 128)
        template = ec2.create_launch_template(**params)["LaunchTemplate"]
        return success(self._with_versions(model, template), request)

    def read(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        ec2 = request.aws_client_factory.ec2
        template_id = request.desired_state["LaunchTemplateId"]
        try:
            templates = ec2.describe_launch_templates(LaunchTemplateIds=[template_id])["LaunchTemplates"]
        except ClientError as e:
            if e.response["Error"]["Code"] in NOT_FOUND:
                return not_found(self.TYPE, template_id)
            raise
        if not templates:  # moto answers an unknown id with an empty list, AWS with NotFound
            return not_found(self.TYPE, template_id)
        return success(self._with_versions(dict(request.desired_state), templates[0]), request)

    def update(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED):
            return failed(message)
        previous = request.previous_state or {}
        template_id = previous["LaunchTemplateId"]
        ec2 = request.aws_client_factory.ec2
        if changed(previous, model, ("LaunchTemplateData", "VersionDescription")):
            params = present(model, ("LaunchTemplateData", "VersionDescription"))
            version = ec2.create_launch_template_version(LaunchTemplateId=template_id, **params)[
                "LaunchTemplateVersion"
            ]["VersionNumber"]
            ec2.modify_launch_template(LaunchTemplateId=template_id, DefaultVersion=str(version))
        template = ec2.describe_launch_templates(LaunchTemplateIds=[template_id])["LaunchTemplates"][0]
        return success(self._with_versions(model, template), request)

    def delete(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        ec2 = request.aws_client_factory.ec2
        template_id = request.desired_state.get("LaunchTemplateId")
        if template_id:
            try:
                ec2.delete_launch_template(LaunchTemplateId=template_id)
            except ClientError as e:
                if e.response["Error"]["Code"] not in NOT_FOUND:
                    raise
        return success({}, request)
