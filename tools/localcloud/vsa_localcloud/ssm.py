"""SSM provider with Run Command on local managed nodes (work in progress: stock behaviour)."""

from localstack.services.moto import MotoFallbackDispatcher
from localstack.services.plugins import Service
from localstack.services.ssm.provider import SsmProvider


class VsaSsmProvider(SsmProvider):
    pass


def service() -> Service:
    return Service.for_provider(VsaSsmProvider(), dispatch_table_factory=MotoFallbackDispatcher)
