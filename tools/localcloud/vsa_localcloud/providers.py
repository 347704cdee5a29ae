"""AWS service providers added to community LocalStack through its plugin entry points."""

from localstack.services.plugins import Service, aws_provider


@aws_provider(api="dynamodb", name="moto")
def dynamodb_moto() -> Service:
    """DynamoDB answered entirely by moto, in the LocalStack process.

    Why: the default provider fetches JDK 21 and DynamoDB Local from the internet at first
    use and fails after ~60 s on a machine without internet access. Every operation of the
    generated ``DynamodbApi`` raises ``NotImplementedError``, so the moto fallback
    dispatcher forwards each one to moto's DynamoDB backend unchanged.
    """
    from localstack.aws.api.dynamodb import DynamodbApi
    from localstack.services.moto import MotoFallbackDispatcher

    return Service.for_provider(DynamodbApi(), dispatch_table_factory=MotoFallbackDispatcher)
