"""Starting ReconcileArray from an apply: name the run, record it on the array (converging,
waiting for the lock), start it. A re-apply of a spec whose last run failed starts it again
under a new name (Step Functions keeps a name for 90 days). Also from BootstrapController, on an
array with fencing: the handover that gives a controller now serving its share of the volumes."""

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.naming import reconcile_execution_name
from vsa_core.reconcile import aws_record, plan
from vsa_core.waiters import execution_arn


@dataclass(frozen=True)
class ReconcileStarter:
    sfn: Any
    dynamodb: Any
    table: str
    state_machine_arn: str

    def add_volume_deletions(self, array_id: str, version: int, volume_ids: tuple[str, ...]) -> None:
        aws_record.add_volume_deletions(self.dynamodb, self.table, array_id, version, volume_ids)

    def clear_rekey_stages(self, array_id: str) -> None:
        """What a finished key rotation left of its progress, as a new one begins."""
        aws_record.set_rekey_stages(self.dynamodb, self.table, array_id, {})

    def start(self, array_id: str, version: int, work: list[str]) -> dict[str, Any]:
        """Start the run for spec ``version``; answers what the API shows of it."""
        name = reconcile_execution_name(array_id, version)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        for attempt in (name, f"{name}-r{int(time.time())}"):
            aws_record.start(self.dynamodb, self.table, array_id, attempt, version, now)
            try:
                arn = self.sfn.start_execution(
                    stateMachineArn=self.state_machine_arn,
                    name=attempt,
                    input=json.dumps({"arrayId": array_id, "version": version}),
                )["executionArn"]
            except self.sfn.exceptions.ExecutionAlreadyExists:
                continue
            return {
                "state": "converging",
                "step": aws_record.WAITING_FOR_LOCK,
                "executionName": attempt,
                "executionArn": arn,
                "remaining": work,
            }
        return {  # pragma: no cover - a name taken twice within the same second
            "state": "converging",
            "executionArn": execution_arn(self.state_machine_arn, name),
            "remaining": work,
        }


def start_handover(
    starter: ReconcileStarter, registry: ArrayRegistry, array_id: str, instance_id: str
) -> dict[str, Any]:
    """A controller of an array with fencing has just begun serving and owns nothing yet: start
    ReconcileArray (recorded as an apply's run is), whose export phase hands it its share, unless
    the recorded run still has its export phase ahead and will. Answers whether it started one
    and why. Without fencing every controller serves every volume: nothing to hand over."""
    array = registry.get(array_id)
    if array.spec.fencing != plan.RESERVATIONS:
        return {"started": False, "reason": "the array has no fencing: every controller serves every volume"}
    if plan.export_ahead(array.reconcile, (aws_record.WAITING_FOR_LOCK, aws_record.CREATING_VOLUMES)):
        running = (array.reconcile or {}).get("execution", "")
        return {
            "started": False,
            "reason": f"ReconcileArray run {running} hands the volumes over: its export phase is ahead",
        }
    run = starter.start(array_id, array.version, [f"hand {instance_id} its share of the volumes"])
    return {"started": True, "executionArn": run["executionArn"], "reason": f"{instance_id} began serving"}
