"""boto3-style waiters that AWS does not ship, in botocore's own waiter format.

Step Functions has no waiter for an execution. Clients (tests, the demo, the CLI) wait the
AWS way with these instead of sleeping; Lambdas never wait (Step Functions does).
"""

from typing import TYPE_CHECKING

from botocore.waiter import Waiter, WaiterModel, create_waiter_with_client

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

FINAL_EXECUTION_STATES = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")

_MODEL = WaiterModel(
    {
        "version": 2,
        "waiters": {
            "ExecutionFinished": {
                "operation": "DescribeExecution",
                "delay": 1,
                "maxAttempts": 120,
                "acceptors": [
                    # an execution started asynchronously (EventBridge -> Lambda) may not exist yet
                    {"matcher": "error", "expected": "ExecutionDoesNotExist", "state": "retry"},
                    *(
                        {"matcher": "path", "argument": "status", "expected": state, "state": "success"}
                        for state in FINAL_EXECUTION_STATES
                    ),
                ],
            }
        },
    }
)


def execution_finished(sfn: "SFNClient") -> Waiter:
    """Waits until ``DescribeExecution(executionArn=…)`` reports a final status."""
    return create_waiter_with_client("ExecutionFinished", _MODEL, sfn)


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN an execution called ``name`` of ``state_machine_arn`` has (or will have)."""
    return state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"
