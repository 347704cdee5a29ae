"""EC2 Auto Scaling for the local cloud (work in progress: moto's backend unchanged)."""

from localstack.aws.skeleton import Skeleton
from localstack.aws.spec import load_service
from localstack.services.moto import _proxy_moto
from localstack.services.plugins import Service


class AutoscalingProvider:
    service = "autoscaling"


def service() -> Service:
    provider = AutoscalingProvider()
    model = load_service("autoscaling")
    table = {op: _proxy_moto for op in model.operation_names}
    svc = Service(name="autoscaling", skeleton=Skeleton(model, table))
    svc._provider = provider
    return svc
