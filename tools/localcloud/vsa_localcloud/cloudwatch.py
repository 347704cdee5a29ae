"""CloudWatch provider with alarm events and metric math (work in progress: stock behaviour)."""

from localstack.services.cloudwatch.provider_v2 import CloudwatchProvider
from localstack.services.plugins import Service


class VsaCloudwatchProvider(CloudwatchProvider):
    pass


def service() -> Service:
    return Service.for_provider(VsaCloudwatchProvider())
