"""AWS::SSM::Document: ``Ref`` is the document name.

Updates follow ``UpdateMethod``: ``Replace`` (the default) deletes the document and creates it
again under the same name (versions restart at 1), ``NewVersion`` adds a version with the new
content and makes it the default version. ``Name`` is create-only (a new name replaces the
resource).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import yaml
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
    tag_diff,
    tag_list,
    unsupported_properties,
)

SUPPORTED = (
    "Content",
    "Attachments",
    "Name",
    "VersionName",
    "DocumentType",
    "DocumentFormat",
    "TargetType",
    "Tags",
    "Requires",
    "UpdateMethod",
)
# What a new version (or a replacement) carries; Tags are applied separately.
CONTENT_KEYS = (
    "Content",
    "Attachments",
    "VersionName",
    "DocumentType",
    "DocumentFormat",
    "TargetType",
    "Requires",
)


def content_string(content: Any, document_format: str) -> str:
    """``Content`` may be a JSON object in the template (AWS serializes it in the document's
    format) or already a JSON/YAML string."""
    if isinstance(content, str):
        return content
    if document_format == "YAML":
        return yaml.safe_dump(content, sort_keys=False)
    return json.dumps(content)


class SSMDocumentProvider(ResourceProvider[Model]):
    TYPE = "AWS::SSM::Document"
    SCHEMA = get_schema_path(Path(__file__))

    @staticmethod
    def _document_params(model: Model) -> Model:
        fmt = model.get("DocumentFormat") or "JSON"
        params = present(model, ("Attachments", "VersionName", "DocumentType", "TargetType", "Requires"))
        params.update(Name=model["Name"], Content=content_string(model["Content"], fmt), DocumentFormat=fmt)
        return params

    def create(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED):
            return failed(message)
        ssm = request.aws_client_factory.ssm
        model["Name"] = physical_name(request, model.get("Name"), 128)
        params = self._document_params(model)
        if tags := tag_list(model.get("Tags")):
            params["Tags"] = tags
        ssm.create_document(**params)
        return success(model, request)

    def read(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        ssm = request.aws_client_factory.ssm
        name = request.desired_state["Name"]
        try:
            doc = ssm.describe_document(Name=name)["Document"]
        except ssm.exceptions.InvalidDocument:
            return not_found(self.TYPE, name)
        content = ssm.get_document(Name=name, DocumentFormat=doc.get("DocumentFormat", "JSON"))["Content"]
        model = {**request.desired_state, "Content": content}
        model.update(present(doc, ("DocumentType", "DocumentFormat", "TargetType", "VersionName")))
        return success(model, request)

    def update(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED):
            return failed(message)
        previous = request.previous_state or {}
        model["Name"] = previous["Name"]
        ssm = request.aws_client_factory.ssm
        if changed(previous, model, CONTENT_KEYS):
            if model.get("UpdateMethod") == "NewVersion":
                if changed(previous, model, ("DocumentType",)):
                    return failed(f"{self.TYPE}: DocumentType cannot change with UpdateMethod NewVersion")
                params = self._document_params(model)
                params.pop("DocumentType", None)
                params.pop("Requires", None)
                version = ssm.update_document(DocumentVersion="$LATEST", **params)["DocumentDescription"][
                    "DocumentVersion"
                ]
                ssm.update_document_default_version(Name=model["Name"], DocumentVersion=version)
            else:
                ssm.delete_document(Name=model["Name"])
                params = self._document_params(model)
                if tags := tag_list(model.get("Tags")):
                    params["Tags"] = tags
                ssm.create_document(**params)
                return success(model, request)
        to_set, to_remove = tag_diff(previous.get("Tags"), model.get("Tags"))
        if to_set:
            ssm.add_tags_to_resource(
                ResourceType="Document",
                ResourceId=model["Name"],
                Tags=[{"Key": k, "Value": v} for k, v in to_set.items()],
            )
        if to_remove:
            ssm.remove_tags_from_resource(
                ResourceType="Document", ResourceId=model["Name"], TagKeys=to_remove
            )
        return success(model, request)

    def delete(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        ssm = request.aws_client_factory.ssm
        with contextlib.suppress(ssm.exceptions.InvalidDocument):
            ssm.delete_document(Name=request.desired_state["Name"])
        return success({}, request)
