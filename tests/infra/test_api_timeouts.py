"""No function behind API Gateway outlives the caller's wait.

AWS, Amazon API Gateway developer guide, "Amazon API Gateway quotas"
(https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html), quotas for
configuring and running a REST API: "Integration timeout: 50 milliseconds - 29 seconds for all
integration types, including Lambda, Lambda proxy, HTTP, HTTP proxy, and AWS integrations" (an
integration's ``TimeoutInMillis``, 29,000 when unset). Past it the caller gets 504 "Endpoint
request timed out" while the function runs on to its own timeout: a function allowed longer than
its integration can go on writing (create volumes, start a workflow, record a spec) after the
caller was told the request failed, and a retry then meets half its effects. So every function an
``Api`` event invokes has a Lambda ``Timeout`` (its own, else ``Globals``) of at most its
integration's timeout. The local cloud answers the 504 as AWS does
(tools/localcloud/vsa_localcloud/apigateway_timeout.py, tests/localcloud/test_apigateway_timeout.py).

Not covered by this rule: a cold start's init phase (up to 10 s, Lambda's own limit) runs before the
function's timeout starts counting, so a handler that uses all of its ``Timeout`` after a slow init
can still end after the 504; the handlers keep their work well inside the timeout.
"""

from typing import Any

import pytest

from tests.infra.test_statemachine_definitions import load_template

DEFAULT_INTEGRATION_TIMEOUT_MS = 29_000
"""API Gateway's REST API integration timeout when the integration sets none (API Gateway quotas)."""
SAM_DEFAULT_FUNCTION_TIMEOUT = 3
"""AWS::Serverless::Function's Timeout when neither the function nor Globals sets one (SAM spec)."""


def api_functions(template: dict[str, Any]) -> list[tuple[str, int, str, int]]:
    """(function, its Lambda timeout in s, the event, its integration timeout in ms) for every
    ``Api`` (REST API) event of every function."""
    globals_timeout = (
        template.get("Globals", {}).get("Function", {}).get("Timeout", SAM_DEFAULT_FUNCTION_TIMEOUT)
    )
    found = []
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        props = resource.get("Properties", {})
        timeout = int(props.get("Timeout", globals_timeout))
        for event_name, event in props.get("Events", {}).items():
            if event["Type"] == "Api":
                integration = int(
                    event.get("Properties", {}).get("TimeoutInMillis", DEFAULT_INTEGRATION_TIMEOUT_MS)
                )
                found.append((name, timeout, event_name, integration))
    return found


def too_long(template: dict[str, Any]) -> list[str]:
    return [
        f"{function} ({timeout} s) behind {event} (integration {integration} ms)"
        for function, timeout, event, integration in api_functions(template)
        if timeout * 1000 > integration
    ]


TEMPLATE = load_template()


def test_the_api_has_functions_behind_it() -> None:
    # the rule below looks at something: both API functions, through every one of their routes
    functions = {function for function, *_ in api_functions(TEMPLATE)}
    assert {"ApiArraysFunction", "ApiBackupsFunction"} <= functions


def test_no_api_function_runs_longer_than_its_integration_waits() -> None:
    # Given every function an API Gateway REST API method invokes
    # Then none may run past the integration timeout (the caller's 504)
    assert too_long(TEMPLATE) == [], (
        "a function behind API Gateway must time out within 29 s (API Gateway quotas)"
    )


def test_the_apis_own_resources_are_sam_api_events() -> None:
    # The rule reads SAM Api events; a hand-written API Gateway method or an HTTP API would escape it
    kinds = {resource["Type"] for resource in TEMPLATE["Resources"].values()}
    assert not kinds & {"AWS::ApiGateway::Method", "AWS::Serverless::HttpApi", "AWS::ApiGatewayV2::Api"}
    events = {
        event["Type"]
        for resource in TEMPLATE["Resources"].values()
        if resource["Type"] == "AWS::Serverless::Function"
        for event in resource.get("Properties", {}).get("Events", {}).values()
    }
    assert "HttpApi" not in events


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        ({"Events": {"Get": {"Type": "Api", "Properties": {"Path": "/x", "Method": "get"}}}}, ["F (30 s)"]),
        (
            {
                "Timeout": 29,
                "Events": {"Get": {"Type": "Api", "Properties": {"Path": "/x", "Method": "get"}}},
            },
            [],
        ),
        (
            {
                "Timeout": 20,
                "Events": {"Get": {"Type": "Api", "Properties": {"Path": "/x", "TimeoutInMillis": 10000}}},
            },
            ["F (20 s)"],
        ),
        ({"Events": {"Rule": {"Type": "EventBridgeRule", "Properties": {}}}}, []),
    ],
    ids=["inherits-globals-30", "own-29", "past-a-shorter-integration", "not-behind-the-api"],
)
def test_a_function_allowed_past_its_integration_is_refused(
    function: dict[str, Any], expected: list[str]
) -> None:
    # Given a function inheriting Globals' 30 s, or with its own timeout, behind an Api event or not
    template = {
        "Globals": {"Function": {"Timeout": 30}},
        "Resources": {"F": {"Type": "AWS::Serverless::Function", "Properties": function}},
    }
    # Then the rule names exactly those allowed longer than their integration waits
    assert [r.split(" behind")[0] for r in too_long(template)] == expected
