"""CloudWatch as stock LocalStack (``provider_v2``), made to behave as AWS documents where the
product relies on it:

* every alarm state change (evaluation, SetAlarmState, composite) puts a ``CloudWatch Alarm State
  Change`` event (source ``aws.cloudwatch``) on the default EventBridge bus, in AWS's shape;
* metric alarms, single-metric and metric-math (``Metrics=[...]``), are evaluated every minute by
  ``cloudwatch_alarms`` (LocalStack's scheduler skips metric-math alarms and evaluates the others
  only every EvaluationPeriods x Period);
* GetMetricData answers ``Expression`` queries (``cloudwatch_math``);
* composite alarms evaluate their full ``AlarmRule`` (LocalStack: only ``ALARM(arn) OR ...``);
* PutMetricData refuses the ``AWS/`` namespaces, which only AWS services publish to.

Control actions (``POST /_localcloud/cloudwatch/<action>``), for what AWS has no API for:
``publish`` puts datapoints as an AWS service would (any namespace, ``AWS/EBS`` included);
``evaluate`` evaluates one metric alarm (``AlarmName``) or all of them now, optionally as of a
time (``At``, ISO 8601), instead of waiting for the next minute; ``hold`` / ``release`` take the
alarms whose names start with ``AlarmNamePrefix`` out of (back into) the periodic evaluation, for
a test that plays those alarms' state changes itself: a test's synthetic array carries no
workload, so its alarms, evaluated on the minute as on AWS, would see no IO and fire on their own
schedule in the middle of the scripted demand (``evaluate`` still evaluates a held alarm).
"""

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from localstack.aws.api import RequestContext, handler
from localstack.aws.api.cloudwatch import (
    GetMetricDataMaxDatapoints,
    GetMetricDataOutput,
    InvalidParameterValueException,
    LabelOptions,
    MetricDataQueries,
    NextToken,
    PutCompositeAlarmInput,
    PutMetricAlarmInput,
    ScanBy,
    StateReason,
    StateReasonData,
    StateValue,
    Timestamp,
)
from localstack.constants import DEFAULT_AWS_ACCOUNT_ID
from localstack.services.cloudwatch.alarm_scheduler import AlarmScheduler
from localstack.services.cloudwatch.models import LocalStackCompositeAlarm, LocalStackMetricAlarm
from localstack.services.cloudwatch.provider_v2 import (
    _STORE_LOCK,
    CloudwatchProvider,
    ValidationException,
    _validate_parameters_for_put_metric_data,
)
from localstack.services.plugins import SERVICE_PLUGINS, Service
from localstack.utils.aws import arns

from vsa_localcloud import eventbus
from vsa_localcloud.cloudwatch_alarms import (
    dumps,
    evaluate_metric_alarm,
    evaluate_rule,
    event_metrics,
    rule_children,
    timestamp,
)
from vsa_localcloud.cloudwatch_math import (
    MetricMathError,
    Value,
    compute,
    metric_data_results,
    query_period,
    rounded_start,
)

LOG = logging.getLogger(__name__)
STATE_KEYS = (
    "StateValue",
    "StateReason",
    "StateReasonData",
    "StateUpdatedTimestamp",
    "StateTransitionedTimestamp",
)
# Events leave in order on one thread, outside the store lock the state change holds.
_EVENTS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cloudwatch-events")
# SetAlarmState's StateReasonData exactly as given: LocalStack's set_alarm_state rewrites it
# ("startDate" := "queryDate", adds "version") before storing it.
_RAW_REASON_DATA: ContextVar[str | None] = ContextVar("raw_reason_data", default=None)
_PROVIDER: "VsaCloudwatchProvider | None" = None


def _context(account_id: str, region: str) -> RequestContext:
    """A request context for calling the provider in-process (evaluation, control actions)."""
    context = RequestContext(None)  # type: ignore[arg-type]
    context.account_id, context.region = account_id, region
    return context


class _AlarmScheduler(AlarmScheduler):
    """LocalStack's scheduler thread; each alarm's task is the provider's (``schedule``)."""

    def schedule_metric_alarm(self, alarm_arn: str) -> None:
        if _PROVIDER is not None:
            _PROVIDER.schedule(alarm_arn)


class VsaCloudwatchProvider(CloudwatchProvider):
    def __init__(self) -> None:
        super().__init__()
        self.alarm_scheduler = _AlarmScheduler()
        global _PROVIDER
        _PROVIDER = self

    # --- metrics ------------------------------------------------------------------------------

    def put_metric_data(
        self, context: RequestContext, namespace: str, metric_data: Any = None, **kwargs: Any
    ) -> None:
        # LocalStack accepts any namespace; AWS reserves AWS/ for its services. The local cloud's
        # own services (LocalStack's Lambda publishing AWS/Lambda Invocations/Errors) call in
        # through internal clients, which stand for AWS itself: those may.
        if namespace.startswith("AWS/") and not context.is_internal_call:
            raise InvalidParameterValueException(f"The value {namespace} for parameter Namespace is invalid.")
        super().put_metric_data(context, namespace, metric_data, **kwargs)

    def get_metric_data(
        self,
        context: RequestContext,
        metric_data_queries: MetricDataQueries,
        start_time: Timestamp,
        end_time: Timestamp,
        next_token: NextToken | None = None,
        scan_by: ScanBy | None = None,
        max_datapoints: GetMetricDataMaxDatapoints | None = None,
        label_options: LabelOptions | None = None,
        **kwargs: Any,
    ) -> GetMetricDataOutput:
        # LocalStack reads q["MetricStat"] of every query (InternalError 'MetricStat' on an
        # Expression) and returns ReturnData=False queries too: those requests are answered here.
        if all("MetricStat" in q and q.get("ReturnData", True) for q in metric_data_queries):
            # LocalStack counts the periods from StartTime to the second; CloudWatch rounds it first
            rounded = datetime.fromtimestamp(
                rounded_start(start_time, query_period(metric_data_queries)), UTC
            )
            return super().get_metric_data(
                context,
                metric_data_queries,
                rounded,
                end_time,
                next_token,
                scan_by,
                max_datapoints,
                label_options,
            )
        try:
            results = metric_data_results(
                self.cloudwatch_database,
                context.account_id,
                context.region,
                metric_data_queries,
                start_time,
                end_time,
                scan_by,
            )
        except MetricMathError as exc:
            raise ValidationException(str(exc)) from exc
        return GetMetricDataOutput(MetricDataResults=results, Messages=[])  # type: ignore[typeddict-item]

    def _fetch(self, account_id: str, region: str) -> Any:
        def fetch(queries: list[dict[str, Any]], start: datetime, end: datetime) -> dict[str, Value]:
            return compute(self.cloudwatch_database, account_id, region, queries, start, end)

        return fetch

    # --- metric alarms ------------------------------------------------------------------------

    @handler("PutMetricAlarm", expand=False)
    def put_metric_alarm(self, context: RequestContext, request: PutMetricAlarmInput) -> None:
        queries = request.get("Metrics") or []
        if queries and sum(1 for q in queries if q.get("ReturnData", True)) != 1:
            raise ValidationException("Exactly one element of the metrics list should return data.")
        arn = arns.cloudwatch_alarm_arn(
            request["AlarmName"], account_id=context.account_id, region_name=context.region
        )
        with _STORE_LOCK:
            previous = self.get_store(context.account_id, context.region).alarms.get(arn)
            super().put_metric_alarm(context, request)
            # LocalStack replaces an updated alarm with a new one in INSUFFICIENT_DATA; AWS keeps
            # its state (and re-evaluates it)
            if previous:
                alarm = self.get_store(context.account_id, context.region).alarms[arn].alarm
                alarm.update({k: previous.alarm[k] for k in STATE_KEYS if k in previous.alarm})  # type: ignore[literal-required]

    def schedule(self, arn: str) -> None:
        """Evaluate every minute (every 10 s for high-resolution periods), as CloudWatch does.
        Replaces LocalStack's task, which runs only every EvaluationPeriods x Period and not at all
        for metric-math alarms. An alarm updated by PutMetricAlarm keeps its cadence: LocalStack
        starts the task again a full interval later at each put, so an alarm put more often than
        every minute was never evaluated; CloudWatch evaluates an alarm every period whoever
        updated it last ("Evaluating an alarm")."""
        parts = arns.parse_arn(arn)
        account_id, region = parts["account"], parts["region"]
        alarm = self.get_store(account_id, region).alarms.get(arn)
        if not isinstance(alarm, LocalStackMetricAlarm):
            self.alarm_scheduler.delete_scheduler_for_alarm(arn)
            return
        period = int(alarm.alarm.get("Period") or query_period(alarm.alarm.get("Metrics") or []))
        interval = 10 if period < 60 else 60
        running = self.alarm_scheduler.scheduled_alarms.get(arn)
        if running is not None and not running.is_cancelled and running.period == interval:
            return  # the task reads the alarm by name at each run: it evaluates the new definition
        self.alarm_scheduler.delete_scheduler_for_alarm(arn)

        def on_error(exc: Exception) -> None:
            LOG.warning("evaluating alarm %s failed: %s", arn, exc)

        task = self.alarm_scheduler.scheduler.schedule(
            func=self.evaluate_scheduled,
            period=interval,
            start=time.time() + interval,
            args=[account_id, region, alarm.alarm["AlarmName"]],
            on_error=on_error,
        )
        self.alarm_scheduler.scheduled_alarms[arn] = task

    def evaluate_scheduled(self, account_id: str, region: str, name: str) -> str | None:
        """The periodic evaluation: skips a held alarm (control ``hold``)."""
        if any(name.startswith(prefix) for prefix in HELD):
            return None
        return self.evaluate_alarm(account_id, region, name)

    def evaluate_alarm(self, account_id: str, region: str, name: str, at: datetime | None = None) -> str:
        """Evaluate one metric alarm now (or as of ``at``); answers its resulting state."""
        arn = arns.cloudwatch_alarm_arn(name, account_id=account_id, region_name=region)
        alarm = self.get_store(account_id, region).alarms.get(arn)
        if not isinstance(alarm, LocalStackMetricAlarm):
            raise KeyError(f"no metric alarm {name!r} in {account_id}/{region}")
        if not alarm.alarm.get("Metrics") and not alarm.alarm.get("Statistic"):
            LOG.warning("alarm %s: percentile (ExtendedStatistic) alarms are not evaluated", name)
            unevaluated: str = alarm.alarm["StateValue"]
            return unevaluated
        outcome = evaluate_metric_alarm(alarm.alarm, self._fetch(account_id, region), at or datetime.now(UTC))
        if outcome:
            state, reason, data = outcome
            self.set_alarm_state(_context(account_id, region), name, state, reason, dumps(data))
        evaluated: str = alarm.alarm["StateValue"]
        return evaluated

    def set_alarm_state(
        self,
        context: RequestContext,
        alarm_name: str,
        state_value: StateValue,
        state_reason: StateReason,
        state_reason_data: StateReasonData | None = None,
        **kwargs: Any,
    ) -> None:
        token = _RAW_REASON_DATA.set(state_reason_data)
        try:
            super().set_alarm_state(
                context, alarm_name, state_value, state_reason, state_reason_data, **kwargs
            )
        finally:
            _RAW_REASON_DATA.reset(token)

    # --- every state change: store it as AWS does, and emit the event -------------------------

    def _update_state(
        self,
        context: RequestContext,
        alarm: Any,
        state_value: StateValue,
        state_reason: str,
        state_reason_data: dict[str, Any] | None = None,
    ) -> None:
        previous = _event_state(alarm.alarm)
        raw = _RAW_REASON_DATA.get()
        _RAW_REASON_DATA.set(None)  # consumed: composite alarms updated next bring their own
        now = datetime.now(UTC)
        # LocalStack stamps the history item it appends with StateUpdatedTimestamp as it was
        # before this update (the previous change's time); AWS stamps it with this change's (the
        # same time as the alarm's StateUpdatedTimestamp and the event's state.timestamp).
        alarm.alarm["StateUpdatedTimestamp"] = now
        super()._update_state(context, alarm, state_value, state_reason, state_reason_data)
        # LocalStack stores a naive local time, and keeps the old reason data when none is given
        alarm.alarm["StateUpdatedTimestamp"] = alarm.alarm["StateTransitionedTimestamp"] = now
        if raw:
            alarm.alarm["StateReasonData"] = raw
        elif not state_reason_data:
            alarm.alarm.pop("StateReasonData", None)
        detail = {
            "alarmName": alarm.alarm["AlarmName"],
            "state": _event_state(alarm.alarm),
            "previousState": previous,
            "configuration": _event_configuration(alarm),
        }
        _EVENTS.submit(
            eventbus.emit,
            account_id=alarm.account_id,
            region=alarm.region,
            source="aws.cloudwatch",
            detail_type="CloudWatch Alarm State Change",
            detail=detail,
            resources=[alarm.alarm["AlarmArn"]],
            time=now,
        )

    # --- composite alarms ---------------------------------------------------------------------

    def _validate_alarm_rule_expression(self, alarm_rule: str) -> list[str]:
        try:
            evaluate_rule(alarm_rule, lambda _: None)
        except ValueError as exc:
            return [str(exc)]
        return []

    @handler("PutCompositeAlarm", expand=False)
    def put_composite_alarm(self, context: RequestContext, request: PutCompositeAlarmInput) -> None:
        if problems := self._validate_alarm_rule_expression(request["AlarmRule"]):
            raise ValidationException(problems[0])
        arn = arns.cloudwatch_alarm_arn(
            request["AlarmName"], account_id=context.account_id, region_name=context.region
        )
        with _STORE_LOCK:
            store = self.get_store(context.account_id, context.region)
            previous = store.alarms.get(arn)
            super().put_composite_alarm(context, request)
            if previous:  # an update keeps the state, as for metric alarms
                store.alarms[arn].alarm.update(
                    {k: previous.alarm[k] for k in STATE_KEYS if k in previous.alarm}
                )  # type: ignore[literal-required]
            # AWS evaluates a composite alarm when it is created or updated, not only on a child's change
            self._evaluate_composite_alarm(context, store.alarms[arn], None)

    def _evaluate_composite_alarms(self, context: RequestContext, triggering_alarm: Any) -> None:
        store = self.get_store(context.account_id, context.region)
        name = triggering_alarm.alarm["AlarmName"]
        for composite in list(store.alarms.values()):
            if isinstance(composite, LocalStackCompositeAlarm) and name in rule_children(
                composite.alarm["AlarmRule"]
            ):
                self._evaluate_composite_alarm(context, composite, triggering_alarm)

    def _evaluate_composite_alarm(
        self, context: RequestContext, composite_alarm: Any, triggering_alarm: Any
    ) -> None:
        """LocalStack supports only ``ALARM(arn) OR ALARM(arn)``; this evaluates the whole rule.
        ALARM when the rule is true; otherwise INSUFFICIENT_DATA while every child still is, else OK."""
        store = self.get_store(context.account_id, context.region)

        def child(name: str) -> Any:
            return store.alarms.get(
                arns.cloudwatch_alarm_arn(name, account_id=context.account_id, region_name=context.region)
            )

        def state_of(name: str) -> str | None:
            alarm = child(name)
            return alarm.alarm["StateValue"] if alarm else None

        rule = composite_alarm.alarm["AlarmRule"]
        children = [c for c in (child(n) for n in rule_children(rule)) if c]
        if evaluate_rule(rule, state_of):
            new_state = "ALARM"
        elif children and all(c.alarm["StateValue"] == "INSUFFICIENT_DATA" for c in children):
            new_state = "INSUFFICIENT_DATA"
        else:
            new_state = "OK"
        old_state = composite_alarm.alarm["StateValue"]
        if new_state == old_state:
            return
        trigger = triggering_alarm or (children[0] if children else None)
        if trigger:
            changed: datetime = trigger.alarm["StateUpdatedTimestamp"]
            changed = changed if changed.tzinfo else changed.replace(tzinfo=UTC)
            reason = (
                f"{trigger.alarm['AlarmArn']} transitioned to {trigger.alarm['StateValue']} at "
                f"{changed:%A %d %B, %Y %H:%M:%S} UTC"
            )
            triggering = {
                "arn": trigger.alarm["AlarmArn"],
                "state": {"value": trigger.alarm["StateValue"], "timestamp": timestamp(changed)},
            }
            data: dict[str, Any] | None = {"triggeringAlarms": [triggering]}
        else:
            reason, data = f"Alarm rule evaluated to {new_state == 'ALARM'}", None
        self._update_state(context, composite_alarm, new_state, reason, data)  # type: ignore[arg-type]
        if composite_alarm.alarm["ActionsEnabled"] and trigger:
            self._run_composite_alarm_actions(context, composite_alarm, old_state, trigger)
        self._evaluate_composite_alarms(context, composite_alarm)  # composites of composites


def _event_state(alarm: Mapping[str, Any]) -> dict[str, Any]:
    state = {"value": alarm["StateValue"], "reason": alarm["StateReason"]}
    if alarm.get("StateReasonData"):
        state["reasonData"] = alarm["StateReasonData"]
    return state | {"timestamp": timestamp(alarm["StateUpdatedTimestamp"])}


def _event_configuration(alarm: Any) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if alarm.alarm.get("AlarmDescription"):
        config["description"] = alarm.alarm["AlarmDescription"]
    if isinstance(alarm, LocalStackCompositeAlarm):
        config["alarmRule"] = alarm.alarm["AlarmRule"]
        for key in ("ActionsSuppressor", "ActionsSuppressorWaitPeriod", "ActionsSuppressorExtensionPeriod"):
            if key in alarm.alarm:
                config[key[0].lower() + key[1:]] = alarm.alarm[key]
    else:
        config["metrics"] = event_metrics(alarm.alarm)
    return config


def service() -> Service:
    return Service.for_provider(VsaCloudwatchProvider())


# --- control actions --------------------------------------------------------------------------


def _provider() -> VsaCloudwatchProvider:
    if _PROVIDER is None:
        SERVICE_PLUGINS.require("cloudwatch")  # LocalStack loads providers on first use
    assert _PROVIDER is not None
    return _PROVIDER


def _time(value: Any) -> datetime:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    moment = datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _unattached_volume(account: str, region: str, datum: dict[str, Any]) -> str | None:
    """The datum's volume when it exists in the local cloud's EC2 and is attached to no instance.

    "Amazon EBS sends data points to CloudWatch … only when the volume is attached to an
    instance" (Amazon EBS metrics): EBS publishes nothing for an available volume, so a volume
    just created or detached has gaps the product's metric math must survive. A volume id the
    local cloud does not know (a test's synthetic series) is published as given."""
    volume_id = next((d["Value"] for d in datum.get("Dimensions", []) if d.get("Name") == "VolumeId"), None)
    if volume_id is None:
        return None
    from moto.ec2.models import ec2_backends

    try:
        volume = ec2_backends[account][region].volumes.get(volume_id)
    except Exception:  # noqa: BLE001 - a region moto cannot create holds no volumes
        return None
    if volume is None or getattr(volume, "attachments", None):
        return None
    return str(volume_id)


def publish(body: dict[str, Any]) -> dict[str, Any]:
    """Datapoints published as the AWS service itself would (``AWS/`` namespaces allowed); for
    ``AWS/EBS``, nothing for a volume attached to no instance (answered under ``dropped``)."""
    namespace, data = body["Namespace"], [dict(d) for d in body["MetricData"]]
    for datum in data:
        if "Timestamp" in datum:
            datum["Timestamp"] = _time(datum["Timestamp"])
    _validate_parameters_for_put_metric_data(data)  # type: ignore[arg-type]
    account, region = body.get("AccountId", DEFAULT_AWS_ACCOUNT_ID), body.get("Region", "us-east-1")
    dropped: set[str] = set()
    if namespace == "AWS/EBS":
        kept = []
        for datum in data:
            unattached = _unattached_volume(account, region, datum)
            if unattached is None:
                kept.append(datum)
            else:
                dropped.add(unattached)
        data = kept
    if data:
        _provider().cloudwatch_database.add_metric_data(account, region, namespace, data)  # type: ignore[arg-type]
    return {"published": len(data), "dropped": sorted(dropped)}


def evaluate(body: dict[str, Any]) -> dict[str, Any]:
    """Evaluate ``AlarmName`` (default: every metric alarm of the account/Region) now, or as of
    ``At``; answers each alarm's resulting state. The periodic evaluation keeps running."""
    account, region = body.get("AccountId", DEFAULT_AWS_ACCOUNT_ID), body.get("Region", "us-east-1")
    provider = _provider()
    at = _time(body["At"]) if body.get("At") else None
    names = (
        [body["AlarmName"]]
        if body.get("AlarmName")
        else [
            a.alarm["AlarmName"]
            for a in provider.get_store(account, region).alarms.values()
            if isinstance(a, LocalStackMetricAlarm)
        ]
    )
    return {"States": {name: provider.evaluate_alarm(account, region, name, at) for name in names}}


HELD: set[str] = set()
"""Alarm name prefixes the periodic evaluation skips (control ``hold``)."""


def hold(body: dict[str, Any]) -> dict[str, Any]:
    """Take the alarms named ``AlarmNamePrefix``... out of the periodic evaluation."""
    prefix = str(body["AlarmNamePrefix"])
    if not prefix:
        raise ValueError("AlarmNamePrefix must not be empty: holding every alarm is not a test's business")
    HELD.add(prefix)
    return {"Held": sorted(HELD)}


def release(body: dict[str, Any]) -> dict[str, Any]:
    """Put the alarms named ``AlarmNamePrefix``... back into the periodic evaluation."""
    HELD.discard(str(body["AlarmNamePrefix"]))
    return {"Held": sorted(HELD)}


CONTROL = {"publish": publish, "evaluate": evaluate, "hold": hold, "release": release}
