"""LocalStack plugins for the VSA local cloud (no Docker engine on our machines).

* ``process`` Lambda runtime executor (entry point ``localstack.lambda.runtime_executor``):
  runs every Lambda execution environment as a host subprocess speaking LocalStack's
  executor protocol.
* ``dynamodb:moto`` provider (entry point ``localstack.aws.provider``): DynamoDB served by
  moto in-process, because the default provider downloads a JDK and DynamoDB Local.
"""
