"""EC2 provider with EBS behaving as AWS documents it (work in progress: stock behaviour)."""

from localstack.services.ec2.provider import Ec2Provider
from localstack.services.moto import MotoFallbackDispatcher
from localstack.services.plugins import Service


class VsaEc2Provider(Ec2Provider):
    pass


def service() -> Service:
    return Service.for_provider(VsaEc2Provider(), dispatch_table_factory=MotoFallbackDispatcher)
