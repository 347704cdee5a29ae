"""AWS service providers added to community LocalStack through its plugin entry points.

Each factory imports its implementation lazily: LocalStack loads a provider only when the
service is first used (or at start for those it preloads).
"""

import threading
from typing import Any

from localstack.services.plugins import Service, aws_provider


@aws_provider(api="dynamodb", name="moto")
def dynamodb_moto() -> Service:
    """DynamoDB answered entirely by moto, in the LocalStack process.

    Why: the default provider fetches JDK 21 and DynamoDB Local from the internet at first
    use and fails after ~60 s on a machine without internet access. Every operation of the
    generated ``DynamodbApi`` raises ``NotImplementedError``, so the moto fallback
    dispatcher forwards each one to moto's DynamoDB backend, whose Query reads the queried
    partition only (``dynamodb_keyed``: moto walked and sorted the whole table).
    """
    from localstack.aws.api.dynamodb import DynamodbApi
    from localstack.services.moto import MotoFallbackDispatcher

    from vsa_localcloud import dynamodb_keyed

    dynamodb_keyed.apply()

    return Service.for_provider(DynamodbApi(), dispatch_table_factory=_serialised(MotoFallbackDispatcher))


def _serialised(factory: Any) -> Any:
    """A dispatch table whose operations run one at a time.

    Why: DynamoDB applies each write atomically, condition included: of two concurrent
    conditional writes on one item, one fails. moto's backend is not thread-safe and LocalStack
    serves requests on several threads, so two concurrent UpdateItems could both pass the same
    condition. One lock around every operation restores the guarantee. Without it, the 100-event
    burst of tests/integration/test_scaling.py can leave two ScaleArray runs holding one scaling
    lock; tests/localcloud/test_dynamodb.py races 32 conditional writers (that alone does not
    reproduce the race without this lock, so the burst test is the evidence).
    """
    lock = threading.RLock()

    def build(provider: Any) -> Any:
        table = factory(provider)

        def guard(handler: Any) -> Any:
            def call(context: Any, request: Any) -> Any:
                with lock:
                    return handler(context, request)

            return call

        return {operation: guard(handler) for operation, handler in table.items()}

    return build


@aws_provider(api="autoscaling", name="vsa")
def autoscaling_vsa() -> Service:
    """EC2 Auto Scaling, which community LocalStack lacks: moto's backend in this process (so
    its instances are the local cloud's EC2 instances) plus lifecycle-hook emulation."""
    from vsa_localcloud.autoscaling import service

    return service()


@aws_provider(api="ec2", name="vsa")
def ec2_vsa() -> Service:
    """EC2 as stock LocalStack (moto underneath), with EBS made to behave as AWS documents:
    Multi-Attach, multi-volume snapshots with a real lifecycle, per-volume snapshot limits."""
    from vsa_localcloud.ebs import service

    return service()


@aws_provider(api="cloudwatch", name="vsa")
def cloudwatch_vsa() -> Service:
    """CloudWatch as stock LocalStack, plus alarm state-change events on EventBridge and the
    metric-math alarms and GetMetricData expressions the product uses."""
    from vsa_localcloud.cloudwatch import service

    return service()


@aws_provider(api="ssm", name="vsa")
def ssm_vsa() -> Service:
    """SSM as stock LocalStack, with Run Command that really runs documents on local managed
    nodes (a sandbox directory each)."""
    from vsa_localcloud.ssm import service

    return service()
