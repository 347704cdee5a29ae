"""Stopping an array's ReconcileArray runs when the array is deleted (``DELETE /arrays/{id}``).

DeleteArray tears down everything a run would converge (the controllers, their exports, the
hosts' paths to them), so a run left going only fails as the controllers and volumes vanish
under it, and its failure would raise ``workflow-failed-reconcile-array`` for nothing. The API
stops every run of the array that is still going (the recorded one, and the lock's holder when
an earlier run still holds the lock while a later apply's run waits), with the error
:data:`STOP_ERROR` in its history; a stopped run runs no Catch, so its lock and its record are
let go here: the lock released while the stopped run holds it, the record marked ``stopped``.
Stopping is idempotent (a run already ended is left alone), so a retried DELETE does it again
harmlessly."""

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_lock, lock
from vsa_core.arrays.aws_registry import array_key
from vsa_core.arrays.spec import RegisteredArray
from vsa_core.waiters import execution_arn

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

STOP_ERROR = "ArrayDeleted"
RUN_PREFIX = "reconcile-"


def runs_to_stop(array: RegisteredArray, lock_holder: str | None) -> list[str]:
    """The runs that may still be going: the recorded one while it is converging, and the
    lock's holder when it is a ReconcileArray run (ScaleArray's runs end by themselves)."""
    names = []
    record = array.reconcile or {}
    if record.get("state") == "converging" and record.get("execution"):
        names.append(record["execution"])
    if lock_holder and lock_holder.startswith(RUN_PREFIX) and lock_holder not in names:
        names.append(lock_holder)
    return names


def stop_runs(
    sfn: Any, dynamodb: "DynamoDBClient", table: str, state_machine_arn: str, array: RegisteredArray
) -> list[str]:
    """Stop the array's running ReconcileArray runs; the names of those stopped."""
    array_id = array.spec.array_id
    lease = aws_lock.read(dynamodb, table, array_id)
    stopped = []
    for name in runs_to_stop(array, lease.holder):
        arn = execution_arn(state_machine_arn, name)
        try:
            running = sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
        except sfn.exceptions.ExecutionDoesNotExist:
            running = False
        if running:
            sfn.stop_execution(
                executionArn=arn,
                error=STOP_ERROR,
                cause=f"array {array_id} is being deleted: DeleteArray tears down what this run converges",
            )
            stopped.append(name)
        # a run that ended without letting go (stopped by hand, or just now) lets go here
        _let_go(dynamodb, table, array_id, name)
    return stopped


def _let_go(dynamodb: "DynamoDBClient", table: str, array_id: str, name: str) -> None:
    """Release the lock if ``name`` holds it; mark its record stopped if it is the recorded run."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    writes = (
        (lock.RELEASE_UPDATE, lock.RELEASE_CONDITION, {":me": {"S": name}}),
        (
            "SET reconcileState = :stopped, reconcileError = :why, reconcileUpdatedAt = :now",
            "reconcileExecution = :me AND reconcileState = :converging",
            {
                ":me": {"S": name},
                ":stopped": {"S": "stopped"},
                ":converging": {"S": "converging"},
                ":why": {"S": f"{STOP_ERROR}: stopped by DELETE /arrays/{array_id}"},
                ":now": {"S": now},
            },
        ),
    )
    for update, condition, values in writes:
        try:
            dynamodb.update_item(
                TableName=table,
                Key=array_key(array_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
