"""One boto3 client factory with the shared retry configuration.

Endpoints come from the environment (``AWS_ENDPOINT_URL``, which the local cloud sets for
every Lambda), never from code."""

from functools import cache
from typing import Any

import boto3
from botocore.config import Config

RETRY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)


@cache
def client(service: str) -> Any:
    """A cached client for ``service`` (typed at the call site with mypy-boto3 stubs)."""
    return boto3.client(service, config=RETRY_CONFIG)  # type: ignore[call-overload]


@cache
def regional_client(service: str, region: str) -> Any:
    """A cached client for ``service`` in another Region (a backup copy's destination)."""
    return boto3.client(service, region_name=region, config=RETRY_CONFIG)  # type: ignore[call-overload]
