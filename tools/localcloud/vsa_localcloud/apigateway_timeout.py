"""API Gateway's integration timeout on REST APIs, which community LocalStack does not enforce.

AWS (Amazon API Gateway developer guide, "Amazon API Gateway quotas", quotas for configuring and
running a REST API: "Integration timeout: 50 milliseconds - 29 seconds for all integration types,
including Lambda, Lambda proxy, HTTP, HTTP proxy, and AWS integrations"; the integration's
``timeoutInMillis``, 29,000 when it sets none): when the integration has not answered within its
timeout, API Gateway answers the caller itself with the ``INTEGRATION_TIMEOUT`` gateway response
(default status 504, "Gateway response types for API Gateway"):

    HTTP 504, Content-Type: application/json, x-amzn-ErrorType: InternalServerErrorException
    {"message": "Endpoint request timed out"}

(the execution log says "Execution failed due to a timeout error"). The integration is not
stopped: a Lambda function keeps running to its own timeout, and whatever it writes after the
caller got the 504 is written all the same. That is why the product keeps every function behind
the API within 29 s (tests/infra/test_api_timeouts.py).

Community LocalStack (2026.3) waits for the integration as long as it takes (its HTTP
integrations leave the timeout as a TODO; a Lambda proxy integration waits for the function).
The next-gen REST API invocation chain (``localstack.services.apigateway.next_gen.execute_api``)
runs the integration through ``IntegrationHandler``, which looks the integration type up in
``integrations.REST_API_INTEGRATIONS`` on every request. ``enforce_integration_timeout`` (called
from ``patches.apply_localcloud_patches``) replaces each entry of that table, except ``MOCK``
(answered by API Gateway itself), by a wrapper that runs the original ``invoke`` in a thread
and, if it has not returned within the integration's timeout, raises LocalStack's own
``IntegrationTimeoutError`` with AWS's message: the chain's exception handler then renders the
gateway response above (status, body, ``x-amzn-ErrorType``) as it does every other one. The
thread is left to finish on its own, as the Lambda does on AWS. Nothing of LocalStack is
replaced but the table's entries.

Pinned by tests/localcloud/test_apigateway_timeout.py.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from localstack.services.apigateway.next_gen.execute_api.gateway_response import IntegrationTimeoutError
from localstack.services.apigateway.next_gen.execute_api.integrations import REST_API_INTEGRATIONS
from localstack.services.apigateway.next_gen.execute_api.integrations.core import RestApiIntegration

LOG = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MILLIS = 29_000
"""An integration's timeout when it sets no ``timeoutInMillis`` (API Gateway quotas: 29 s)."""
TIMED_OUT = "Endpoint request timed out"
"""The message of API Gateway's INTEGRATION_TIMEOUT gateway response."""
UNBOUNDED = ("MOCK",)
"""Integration types API Gateway answers itself, at once: nothing to time."""


def timeout_seconds(integration: dict[str, Any]) -> float:
    """The integration's timeout: its ``timeoutInMillis`` (a string or a number once imported
    from OpenAPI or put through the API; absent or null means the default)."""
    millis = integration.get("timeoutInMillis") or DEFAULT_TIMEOUT_MILLIS
    return int(millis) / 1000


class TimeBoundIntegration(RestApiIntegration):
    """An integration whose answer API Gateway waits for at most its timeout."""

    def __init__(self, inner: RestApiIntegration) -> None:
        self.inner = inner
        self.name = inner.name

    def invoke(self, context: Any) -> Any:
        timeout = timeout_seconds(context.integration or {})
        outcome: dict[str, Any] = {}
        finished = threading.Event()

        def run() -> None:
            try:
                outcome["response"] = self.inner.invoke(context)
            except Exception as error:  # noqa: BLE001 (not swallowed: raised in the request's thread)
                outcome["error"] = error
            finally:
                finished.set()

        threading.Thread(target=run, name=f"apigw-{self.name.lower()}-integration", daemon=True).start()
        if not finished.wait(timeout):
            LOG.info(
                "execute-api: %s %s: execution failed due to a timeout error (integration %s, %.3f s)",
                context.request.method,
                context.request.path,
                self.name,
                timeout,
            )
            raise IntegrationTimeoutError(TIMED_OUT)
        if "error" in outcome:
            raise outcome["error"]
        return outcome["response"]


def enforce_integration_timeout() -> None:
    """Wrap every timed integration type of the REST API invocation chain (idempotent)."""
    for name, integration in list(REST_API_INTEGRATIONS.items()):
        if name not in UNBOUNDED and not isinstance(integration, TimeBoundIntegration):
            REST_API_INTEGRATIONS[name] = TimeBoundIntegration(integration)
