"""Plugin classes LocalStack discovers (entry-point group
``localstack.cloudformation.resource_providers``). plux names a plugin by the class attribute
``name``, which the CloudFormation engine looks up by the template's resource type; ``load``
imports the provider module only when a stack first uses the type."""

from localstack.services.cloudformation.resource_provider import (
    CloudFormationResourceProviderPlugin,
    ResourceProvider,
)


class _Plugin(CloudFormationResourceProviderPlugin):
    def __init__(self) -> None:
        self.factory: type[ResourceProvider] | None = None


class SSMDocumentPlugin(_Plugin):
    name = "AWS::SSM::Document"

    def load(self) -> None:
        from vsa_localcloud.cfn.ssm_document import SSMDocumentProvider

        self.factory = SSMDocumentProvider


class EC2VolumePlugin(_Plugin):
    name = "AWS::EC2::Volume"

    def load(self) -> None:
        from vsa_localcloud.cfn.ec2_volume import EC2VolumeProvider

        self.factory = EC2VolumeProvider


class EC2LaunchTemplatePlugin(_Plugin):
    name = "AWS::EC2::LaunchTemplate"

    def load(self) -> None:
        from vsa_localcloud.cfn.ec2_launchtemplate import EC2LaunchTemplateProvider

        self.factory = EC2LaunchTemplateProvider


class AutoScalingGroupPlugin(_Plugin):
    name = "AWS::AutoScaling::AutoScalingGroup"

    def load(self) -> None:
        from vsa_localcloud.cfn.autoscaling_group import AutoScalingGroupProvider

        self.factory = AutoScalingGroupProvider


class LifecycleHookPlugin(_Plugin):
    name = "AWS::AutoScaling::LifecycleHook"

    def load(self) -> None:
        from vsa_localcloud.cfn.autoscaling_lifecyclehook import LifecycleHookProvider

        self.factory = LifecycleHookProvider


class CloudWatchDashboardPlugin(_Plugin):
    name = "AWS::CloudWatch::Dashboard"

    def load(self) -> None:
        from vsa_localcloud.cfn.cloudwatch_dashboard import CloudWatchDashboardProvider

        self.factory = CloudWatchDashboardProvider
