"""Which CloudFormation resource types the local cloud supports, answered from its runtime.

Why this exists: with ``CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=0`` (so a template using a type
nobody implements fails instead of reporting a fake CREATE_COMPLETE), LocalStack's
``ChangeSetResourceSupportChecker`` asks ``localstack.utils.catalog.plugins.get_aws_catalog()``
about every resource of a change set. That prefers the plugin named
``aws-catalog-remote-state-with-license``, then ``aws-catalog-remote-state`` (which downloads
LocalStack's catalog from its platform API); without internet the download fails and it falls
back to ``aws-catalog-runtime-only``, whose answer is ``None`` for every type — so every
resource, even the ``AWS::S3::Bucket`` of SAM's managed stack, is reported unsupported and each
deployment fails.

This plugin takes the first name ``get_aws_catalog`` tries, so the answer never depends on the
network: a resource type is AVAILABLE exactly when a resource provider plugin for it is
installed (LocalStack's or ours), otherwise NOT_SUPPORTED (the checker then names the type in
the stack's status reason). Service-level questions (``get_aws_service_status``, used only to
word "not implemented" errors) keep the runtime-only catalog's answer, ``None``.
"""

from localstack.utils.catalog.catalog import (
    AwsServicesSupportStatus,
    CatalogPlugin,
    CfnResourceSupportStatus,
)
from localstack.utils.catalog.common import (
    AwsServicesSupportInLatest,
    CloudFormationResourcesSupportAtRuntime,
    CloudFormationResourcesSupportInLatest,
)


class RuntimeCfnCatalog(CatalogPlugin):
    # The plugin name get_aws_catalog() looks up first (see the module docstring).
    name = "aws-catalog-remote-state-with-license"

    def __init__(self) -> None:
        self._resources: set[str] | None = None
        self._services: set[str] | None = None

    def get_aws_service_status(
        self, service_name: str, operation_name: str | None = None
    ) -> AwsServicesSupportStatus | None:
        return None

    def get_cloudformation_resource_status(
        self, resource_name: str, service_name: str, is_pro_resource: bool = False
    ) -> CfnResourceSupportStatus | AwsServicesSupportInLatest | None:
        if self._resources is None:
            self._resources = self._get_cfn_resources_available_at_runtime()
            self._services = self._get_services_at_runtime()
        if resource_name in self._resources:
            return CloudFormationResourcesSupportAtRuntime.AVAILABLE
        if service_name in (self._services or set()):
            return CloudFormationResourcesSupportInLatest.NOT_SUPPORTED
        return AwsServicesSupportInLatest.NOT_SUPPORTED
