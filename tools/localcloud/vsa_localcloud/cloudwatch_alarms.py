"""Alarm evaluation as CloudWatch documents it, for metric alarms (single metric or metric math)
and composite alarms; pure functions over the alarm's description, no LocalStack state.

Metric alarms ("Evaluating an alarm", "Configuring how CloudWatch alarms treat missing data"):
the alarm looks at the most recent ``EvaluationPeriods`` (N) periods, fetching a few more (the
evaluation range) so real datapoints are used before missing ones are filled; ``DatapointsToAlarm``
(M, default N) of them must breach for ALARM. Missing datapoints are treated per
``TreatMissingData``. The window slides ("Alarm evaluation window", the default
``SlidingWindow``): its newest period ends with the minute that holds the evaluation's instant, so
a datapoint stays in an alarm's newest period for a whole period, whatever the clock's 5-minute
boundaries (for a period under a minute, the newest is the one holding the instant).
"""

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from vsa_localcloud.cloudwatch_math import Series, Value, query_period, to_series

COMPARE: dict[str, tuple[Callable[[float, float], bool], str]] = {
    "GreaterThanOrEqualToThreshold": (lambda v, t: v >= t, "greater than or equal to"),
    "GreaterThanThreshold": (lambda v, t: v > t, "greater than"),
    "LessThanThreshold": (lambda v, t: v < t, "less than"),
    "LessThanOrEqualToThreshold": (lambda v, t: v <= t, "less than or equal to"),
}
Fetch = Callable[[list[dict[str, Any]], datetime, datetime], dict[str, Value]]
Outcome = tuple[str, str, dict[str, Any]]  # state, reason, reason data


def timestamp(moment: datetime) -> str:
    """CloudWatch's timestamp format in events and reason data: 2026-11-02T17:04:40.989+0000."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+0000"


def alarm_queries(alarm: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The alarm's metric data queries: its ``Metrics``, or one query built from a single-metric alarm."""
    if alarm.get("Metrics"):
        return [dict(q) for q in alarm["Metrics"]]
    metric = {"Namespace": alarm["Namespace"], "MetricName": alarm["MetricName"]}
    metric["Dimensions"] = list(alarm.get("Dimensions") or [])
    stat = {"Metric": metric, "Period": alarm["Period"], "Stat": alarm["Statistic"]}
    if alarm.get("Unit"):
        stat["Unit"] = alarm["Unit"]
    # AWS shows single-metric alarms in events with a generated id; stable per alarm here
    return [
        {"Id": str(uuid.uuid5(uuid.NAMESPACE_URL, alarm["AlarmArn"])), "MetricStat": stat, "ReturnData": True}
    ]


def event_metrics(alarm: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``detail.configuration.metrics`` of an alarm state-change event."""
    out = []
    for q in alarm_queries(alarm):
        item: dict[str, Any] = {"id": q["Id"]}
        if "Expression" in q:
            item["expression"] = q["Expression"]
        if q.get("Label"):
            item["label"] = q["Label"]
        if "MetricStat" in q:
            stat, metric = q["MetricStat"], q["MetricStat"]["Metric"]
            item["metricStat"] = {
                "metric": {
                    "namespace": metric["Namespace"],
                    "name": metric["MetricName"],
                    "dimensions": {d["Name"]: d["Value"] for d in metric.get("Dimensions") or []},
                },
                "period": int(stat["Period"]),
                "stat": stat["Stat"],
            }
            if stat.get("Unit"):
                item["metricStat"]["unit"] = stat["Unit"]
        if q.get("Period") and "Expression" in q:
            item["period"] = int(q["Period"])
        item["returnData"] = q.get("ReturnData", True)
        out.append(item)
    return out


def evaluate_metric_alarm(alarm: Mapping[str, Any], fetch: Fetch, now: datetime) -> Outcome | None:
    """The state the alarm should be in at ``now`` (None: keep the current one)."""
    queries = alarm_queries(alarm)
    period = int(alarm.get("Period") or query_period(queries))
    n = int(alarm["EvaluationPeriods"])
    m = int(alarm.get("DatapointsToAlarm") or n)
    threshold = float(alarm["Threshold"])
    breaches, words = COMPARE[alarm["ComparisonOperator"]]
    treat = alarm.get("TreatMissingData") or "missing"
    # the sliding window ends with the evaluation's minute; the evaluation range is its N
    # periods plus a few older ones (CloudWatch does not say how many)
    step = 60 if period % 60 == 0 else period
    newest = int(now.timestamp()) // step * step + step - period
    oldest = newest - (n + max(2, n // 3) - 1) * period
    results = fetch(
        queries, datetime.fromtimestamp(oldest, UTC), datetime.fromtimestamp(newest + period, UTC)
    )
    returned = next(q for q in queries if q.get("ReturnData", True))
    found = to_series(results[returned["Id"]], [], period)
    series = found[0] if found else Series({}, period)
    points = {t: v for t, v in series.points.items() if oldest <= t <= newest and not math.isnan(v)}
    window = [t for t in range(newest - (n - 1) * period, newest + period, period)]
    real = sorted(points, reverse=True)  # newest first
    evaluated = real[:n]
    values = [(t, points[t]) for t in evaluated]
    breaching = [(t, v) for t, v in values if breaches(v, threshold)]
    calm = [(t, v) for t, v in values if not breaches(v, threshold)]
    missing = 0 if len(real) >= n else n - len(real)
    data: dict[str, Any] = {
        "version": "1.0",
        "queryDate": timestamp(now),
        "startDate": timestamp(datetime.fromtimestamp(min(evaluated or window), UTC)),
    }
    if alarm.get("Statistic"):
        data["statistic"] = alarm["Statistic"]
    data |= {
        "period": period,
        "recentDatapoints": [v for _, v in reversed(values)],
        "threshold": threshold,
        "evaluatedDatapoints": [
            {"timestamp": timestamp(datetime.fromtimestamp(t, UTC)), "value": v} for t, v in values
        ],
    }
    current = alarm["StateValue"]
    if not real:
        plural = "s" if n > 1 else ""
        if treat == "missing":
            was = "s were" if n > 1 else " was"
            return "INSUFFICIENT_DATA", f"Insufficient Data: {n} datapoint{was} unknown.", data
        if treat == "ignore":
            return None
        label = "Breaching" if treat == "breaching" else "NonBreaching"
        reason = (
            f"Threshold Crossed: no datapoints were received for {n} period{plural} and {n} missing "
            f"datapoint{'s were' if n > 1 else ' was'} treated as [{label}]."
        )
        return ("ALARM" if treat == "breaching" else "OK"), reason, data
    # Fewer real datapoints than N: fill the missing ones only as often as needed (docs' table):
    # breaching / notBreaching count as such; "missing" needs only the real ones to breach
    # (min(M, real)); "ignore" keeps the state unless the real ones decide it either way.
    filled_breaching = missing if treat == "breaching" else 0
    count = len(breaching) + filled_breaching
    if treat == "missing" and missing:
        alarming = count >= min(m, len(real))
    elif treat == "ignore" and missing:
        if count >= m:
            alarming = True
        elif count == 0:
            alarming = False
        else:
            return None
    else:
        alarming = count >= m
    state = "ALARM" if alarming else "OK"
    shown = breaching if alarming else calm
    total = len(values) + (missing if treat in ("breaching", "notBreaching") else 0)
    hits = count if alarming else total - count
    minimum = m if alarming else n - m + 1
    listed = ", ".join(f"{v} ({datetime.fromtimestamp(t, UTC):%d/%m/%y %H:%M:%S})" for t, v in shown)
    reason = (
        f"Threshold Crossed: {hits} out of the last {total} datapoints [{listed}] "
        f"{'was' if hits == 1 else 'were'}{'' if alarming else ' not'} {words} the threshold ({threshold}) "
        f"(minimum {minimum} datapoint{'s' if minimum > 1 else ''} for {current} -> {state} transition)."
    )
    return state, reason, data


# --- composite alarms -------------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(\(|\)|"[^"]*"|[^\s()"]+)')
STATES = ("ALARM", "OK", "INSUFFICIENT_DATA")


def rule_tokens(rule: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(rule.rstrip()):
        match = _TOKEN.match(rule, pos)
        if not match:
            raise ValueError(f"Error in alarm rule at position {pos}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def alarm_name_of(reference: str) -> str:
    """A rule's alarm reference (name or ARN, maybe quoted) as an alarm name."""
    reference = reference.strip('"')
    return reference.split(":alarm:", 1)[1] if reference.startswith("arn:") else reference


def rule_children(rule: str) -> list[str]:
    tokens = rule_tokens(rule)
    return [
        alarm_name_of(tokens[i + 2])
        for i, t in enumerate(tokens[:-2])
        if t in STATES and tokens[i + 1] == "("
    ]


def evaluate_rule(rule: str, state_of: Callable[[str], str | None]) -> bool:
    """``AlarmRule`` with ALARM(x)/OK(x)/INSUFFICIENT_DATA(x), TRUE, FALSE, NOT, AND, OR and
    parentheses (NOT binds tightest, then AND, then OR)."""
    tokens = rule_tokens(rule)
    pos = 0

    def take(expected: str | None = None) -> str:
        nonlocal pos
        if pos >= len(tokens) or (expected and tokens[pos] != expected):
            raise ValueError(f"Error in alarm rule: expected {expected or 'more'} at token {pos + 1}")
        pos += 1
        return tokens[pos - 1]

    def disjunction() -> bool:
        value = conjunction()
        while pos < len(tokens) and tokens[pos] == "OR":
            take()
            value = conjunction() or value
        return value

    def conjunction() -> bool:
        value = factor()
        while pos < len(tokens) and tokens[pos] == "AND":
            take()
            value = factor() and value
        return value

    def factor() -> bool:
        word = take()
        if word == "NOT":
            return not factor()
        if word == "(":
            value = disjunction()
            take(")")
            return value
        if word in ("TRUE", "FALSE"):
            return word == "TRUE"
        if word in STATES:
            take("(")
            name = alarm_name_of(take())
            take(")")
            return state_of(name) == word
        raise ValueError(f"Error in alarm rule: unexpected {word!r}")

    result = disjunction()
    if pos != len(tokens):
        raise ValueError(f"Error in alarm rule: unexpected {tokens[pos]!r}")
    return result


def dumps(data: Mapping[str, Any] | Sequence[Any]) -> str:
    """JSON as CloudWatch writes reason data: compact."""
    return json.dumps(data, separators=(",", ":"))
