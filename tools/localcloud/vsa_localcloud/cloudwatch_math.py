"""GetMetricData over LocalStack's metric store, with metric math (``Expression`` queries).

Stock LocalStack answers GetMetricData only for ``MetricStat`` queries (an ``Expression`` query
fails with ``InternalError 'MetricStat'``) and returns every query, ``ReturnData=False`` ones too.
Here each ``MetricStat`` query is read from LocalStack's SQLite store, then the expressions are
evaluated on those series, as CloudWatch does:

* arithmetic ``+ - * / ^`` (and unary minus) between series and scalars; two series combine on the
  timestamps both have (CloudWatch drops the others; ``FILL`` exists for that), a division by zero
  gives no datapoint;
* ``PERIOD(m)`` (a scalar: the metric's period, datapoints or not), ``METRICS()``/
  ``METRICS("prefix")``, arrays ``[m1, m2]``, ``SUM``/``AVG``/``MIN``/``MAX`` (of an array: a
  series, datapoint by datapoint; of one series: a scalar), ``ABS``, ``FILL(m, value)`` (a series
  for a series, an array for an array; the filler a scalar or a series) over the whole range,
  and ``FILL(m, REPEAT)`` / ``FILL(m, LINEAR)``.

The expression is parsed with Python's ``ast`` (its grammar covers this subset once ``^`` becomes
``**``) and walked by a whitelist: nothing is ever ``eval``-ed.
"""

import ast
import itertools
import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from localstack.services.cloudwatch.cloudwatch_database_helper import CloudwatchDatabase


class MetricMathError(ValueError):
    """An expression CloudWatch would refuse (answered as a ValidationError)."""


@dataclass
class Series:
    points: dict[int, float]  # period start (epoch seconds) -> value
    period: int
    label: str = ""


Value = float | Series | list[Series]


def read_series(
    db: CloudwatchDatabase, account_id: str, region: str, metric_stat: Mapping[str, Any], grid: Sequence[int]
) -> dict[int, float]:
    """One ``MetricStat`` aggregated into the periods starting at ``grid``.

    Own query instead of ``CloudwatchDatabase.get_metric_data_stat``: that one matches dimensions
    with ``LIKE '%VolumeId=vol-1%'`` (so ``vol-1`` also matches ``vol-10``, and a metric with extra
    dimensions matches too), while CloudWatch matches the exact dimension set."""
    if not grid:
        return {}
    metric, period, stat = metric_stat["Metric"], int(metric_stat["Period"]), metric_stat["Stat"]
    dims = db._get_ordered_dimensions_with_separator([dict(d) for d in metric.get("Dimensions") or []])
    where = "account_id = ? AND region = ? AND namespace = ? AND metric_name = ?"
    where += " AND timestamp >= ? AND timestamp < ?"
    params: list[Any] = [
        account_id,
        region,
        metric["Namespace"],
        metric["MetricName"],
        grid[0],
        grid[-1] + period,
    ]
    where += " AND dimensions IS NULL" if dims is None else " AND dimensions = ?"
    params += [] if dims is None else [dims]
    if unit := metric_stat.get("Unit"):
        where += " AND unit = ?"
        params.append(unit)
    # table names are constants, values are bound parameters
    single = f"SELECT timestamp, value, 1, value, value FROM {db.TABLE_SINGLE_METRICS} WHERE {where}"  # noqa: S608
    aggregated = (
        f"SELECT timestamp, sum, sample_count, min, max FROM {db.TABLE_AGGREGATED_METRICS} WHERE {where}"  # noqa: S608
    )
    sql = f"{single} UNION ALL {aggregated}"
    with db.DATABASE_LOCK, sqlite3.connect(db.METRICS_DB_READ_ONLY, uri=True) as conn:
        rows = conn.execute(sql, params + params).fetchall()
    buckets: dict[int, list[tuple[float, float, float, float]]] = {}
    for ts, total, count, low, high in rows:
        start = grid[0] + (int(ts) - grid[0]) // period * period
        buckets.setdefault(start, []).append((float(total), float(count), float(low), float(high)))
    aggregate: dict[str, Callable[[list[tuple[float, float, float, float]]], float]] = {
        "Sum": lambda r: sum(x[0] for x in r),
        "SampleCount": lambda r: sum(x[1] for x in r),
        "Average": lambda r: sum(x[0] for x in r) / sum(x[1] for x in r),
        "Minimum": lambda r: min(x[2] for x in r),
        "Maximum": lambda r: max(x[3] for x in r),
    }
    if stat not in aggregate:
        raise MetricMathError(f"The value {stat} for parameter MetricStat.Stat is not supported here.")
    return {start: aggregate[stat](rows_) for start, rows_ in sorted(buckets.items())}


def rounded_start(start: datetime, period: int, now: datetime | None = None) -> int:
    """StartTime (epoch seconds) as CloudWatch rounds it (GetMetricData API reference, StartTime):
    with a period of 5, 10, 20 or 30 s, down to that division of a minute; otherwise down to the
    minute when less than 15 days ago, to the 5 minutes when 15 to 63 days ago, to the hour when
    older. The periods are counted from there, not from multiples of the period."""
    if period < 60:
        unit = period if 60 % period == 0 else 1
    else:
        age = (now or datetime.now(UTC)) - start
        unit = 60 if age < timedelta(days=15) else 300 if age < timedelta(days=63) else 3600
    return math.floor(start.timestamp()) // unit * unit


def time_grid(start: datetime, end: datetime, period: int) -> list[int]:
    """Period starts from StartTime (rounded as CloudWatch rounds it) to before EndTime."""
    first = rounded_start(start, period)
    return list(range(first, math.ceil(end.timestamp()), period))


def query_period(queries: Sequence[Mapping[str, Any]]) -> int:
    """The period of an expression: that of the metrics it is computed from (CloudWatch takes the
    query's own ``Period`` when given)."""
    periods = [int(q["MetricStat"]["Period"]) for q in queries if "MetricStat" in q]
    periods += [int(q["Period"]) for q in queries if q.get("Period")]
    return min(periods) if periods else 60


def compute(
    db: CloudwatchDatabase,
    account_id: str,
    region: str,
    queries: Sequence[Mapping[str, Any]],
    start: datetime,
    end: datetime,
) -> dict[str, Value]:
    """Every query's result by Id (metrics and expressions alike)."""
    by_id = {q["Id"]: q for q in queries}
    period = query_period(queries)
    grid = time_grid(start, end, period)
    results: dict[str, Value] = {}
    metrics: dict[str, Series] = {}
    for q in queries:
        if "MetricStat" in q:
            stat = q["MetricStat"]
            own_grid = grid if int(stat["Period"]) == period else time_grid(start, end, int(stat["Period"]))
            points = read_series(db, account_id, region, stat, own_grid)
            series = Series(points, int(stat["Period"]), q.get("Label") or stat["Metric"]["MetricName"])
            results[q["Id"]] = metrics[q["Id"]] = series
    evaluating: set[str] = set()

    def resolve(name: str) -> Value:
        if name in results:
            return results[name]
        if name not in by_id or "Expression" not in by_id[name]:
            raise MetricMathError(f"Unrecognized id {name!r} in the expression.")
        if name in evaluating:
            raise MetricMathError(f"Circular dependency on {name!r}.")
        evaluating.add(name)
        results[name] = _Evaluator(resolve, metrics, grid, period).run(by_id[name]["Expression"])
        return results[name]

    for q in queries:
        if "Expression" in q:
            resolve(q["Id"])
    return results


def to_series(value: Value, grid: Sequence[int], period: int) -> list[Series]:
    """An expression's result as the time series GetMetricData returns (a scalar fills the range)."""
    if isinstance(value, list):
        return value
    if isinstance(value, Series):
        return [value]
    return [Series({t: float(value) for t in grid}, period)]


def metric_data_results(
    db: CloudwatchDatabase,
    account_id: str,
    region: str,
    queries: Sequence[Mapping[str, Any]],
    start: datetime,
    end: datetime,
    scan_by: str | None,
) -> list[dict[str, Any]]:
    """GetMetricData's ``MetricDataResults``: one per query with ``ReturnData`` (default true)."""
    values = compute(db, account_id, region, queries, start, end)
    period = query_period(queries)
    grid = time_grid(start, end, period)
    out: list[dict[str, Any]] = []
    for q in queries:
        if q.get("ReturnData") is False:
            continue
        for series in to_series(values[q["Id"]], grid, period):
            stamps = sorted(series.points, reverse=scan_by != "TimestampAscending")
            label = q.get("Label") or series.label or q["Id"]
            out.append(
                {
                    "Id": q["Id"],
                    "Label": label,
                    "Timestamps": [datetime.fromtimestamp(t, UTC) for t in stamps],
                    "Values": [series.points[t] for t in stamps],
                    "StatusCode": "Complete",
                }
            )
    return out


_OPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
}


def _repeat(series: Series, grid: Sequence[int]) -> Series:
    """``FILL(m, REPEAT)``: each missing value takes the most recent actual value before it, to
    the end of the range; those before the first actual value stay missing."""
    points: dict[int, float] = {}
    last: float | None = None
    for t in sorted(set(grid) | set(series.points)):
        if t in series.points:
            last = series.points[t]
        if last is not None:
            points[t] = last
    return Series(points, series.period, series.label)


def _linear(series: Series, grid: Sequence[int]) -> Series:
    """``FILL(m, LINEAR)``: a gap between two actual values is interpolated linearly between
    them; missing values before the first and after the last stay missing."""
    known = sorted(series.points)
    points = dict(series.points)
    for before, after in itertools.pairwise(known):
        low, high = series.points[before], series.points[after]
        for t in grid:
            if before < t < after:
                points[t] = low + (high - low) * (t - before) / (after - before)
    return Series(dict(sorted(points.items())), series.period, series.label)


# "Metric math syntax and functions", FILL: "FILL(m1, REPEAT)" fills each missing value with the
# most recent actual value before it; "FILL(m1, LINEAR)" with a linear interpolation between the
# values at the beginning and the end of the gap.
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html
FILL_KEYWORDS: dict[str, Callable[[Series, Sequence[int]], Series]] = {"REPEAT": _repeat, "LINEAR": _linear}


class _Evaluator:
    def __init__(
        self, resolve: Callable[[str], Value], metrics: dict[str, Series], grid: Sequence[int], period: int
    ) -> None:
        self.resolve, self.metrics, self.grid, self.period = resolve, metrics, grid, period

    def run(self, expression: str) -> Value:
        try:
            tree = ast.parse(expression.replace("^", "**"), mode="eval")
        except SyntaxError as exc:
            raise MetricMathError(f"Syntax error in expression {expression!r}: {exc.msg}") from exc
        return self.eval(tree.body)

    def eval(self, node: ast.expr) -> Value:
        match node:
            case ast.Constant(value=int() | float() as number) if not isinstance(number, bool):
                return float(number)
            case ast.Name(id=name):
                return self.resolve(name)
            case ast.List(elts=items):
                return [s for item in items for s in self._series_list(self.eval(item))]
            case ast.UnaryOp(op=ast.USub(), operand=operand):
                return self.binary(-1.0, self.eval(operand), _OPS[ast.Mult])
            case ast.BinOp(left=left, op=op, right=right) if type(op) in _OPS:
                return self.binary(self.eval(left), self.eval(right), _OPS[type(op)])
            case ast.Call(func=ast.Name(id=function), args=args, keywords=[]):
                return self.call(function, args)
        raise MetricMathError(f"Unsupported expression element: {ast.unparse(node)!r}")

    def _series_list(self, value: Value) -> list[Series]:
        if isinstance(value, float):
            raise MetricMathError("An array may hold only time series.")
        return value if isinstance(value, list) else [value]

    def binary(self, a: Value, b: Value, op: Callable[[float, float], float]) -> Value:
        if isinstance(a, list):
            return [s for x in a for s in self._series_list(self.binary(x, b, op))]
        if isinstance(b, list):
            return [s for x in b for s in self._series_list(self.binary(a, x, op))]
        if isinstance(a, float) and isinstance(b, float):
            return op(a, b)
        if isinstance(a, Series) and isinstance(b, Series):
            pairs = {t: (a.points[t], b.points[t]) for t in a.points if t in b.points}
            period = a.period
        elif isinstance(a, Series):
            pairs, period = {t: (v, float(b)) for t, v in a.points.items()}, a.period  # type: ignore[arg-type]
        else:
            pairs, period = {t: (float(a), v) for t, v in b.points.items()}, b.period  # type: ignore[union-attr,arg-type]
        points: dict[int, float] = {}
        for t, (x, y) in pairs.items():
            try:
                points[t] = op(x, y)
            except ZeroDivisionError:
                continue  # CloudWatch returns no datapoint for a division by zero
        return Series(points, period)

    def call(self, function: str, args: list[ast.expr]) -> Value:
        name = function.upper()
        if name == "METRICS":
            # METRICS("x"): the metrics whose Id starts with "x"
            prefix = str(args[0].value) if args and isinstance(args[0], ast.Constant) else ""
            return [m for id_, m in self.metrics.items() if id_.startswith(prefix)]
        keyword = args[1].id.upper() if len(args) == 2 and isinstance(args[1], ast.Name) else ""
        if name == "FILL" and keyword in FILL_KEYWORDS:
            filled = self.eval(args[0])
            if isinstance(filled, float):
                raise MetricMathError("FILL takes a time series or an array of time series.")
            method = FILL_KEYWORDS[keyword]
            if isinstance(filled, Series):
                return method(filled, self.grid)
            return [method(s, self.grid) for s in filled]
        values = [self.eval(a) for a in args]
        if name == "PERIOD" and len(values) == 1 and isinstance(values[0], Series):
            # TS -> S: the metric's period, a scalar (with or without datapoints)
            return float(values[0].period)
        if name == "ABS" and len(values) == 1:
            return self.binary(values[0], 0.0, lambda x, _: abs(x))
        if name == "FILL" and len(values) == 2 and not isinstance(values[1], list):
            # TS, TS/S -> TS and TS[], TS/S -> TS[]: every period of the range gets a value, the
            # filler's (a scalar, or the filler series' value at that time) where one is missing
            filler = values[1]

            def fill(s: Series) -> Series:
                points = dict(s.points)
                for t in self.grid:
                    if t in points:
                        continue
                    if isinstance(filler, float):
                        points[t] = filler
                    elif t in filler.points:
                        points[t] = filler.points[t]
                return Series(dict(sorted(points.items())), s.period, s.label)

            if isinstance(values[0], Series):
                return fill(values[0])
            return [fill(s) for s in self._series_list(values[0])]
        reducers: dict[str, Callable[[list[float]], float]] = {
            "SUM": sum,
            "AVG": lambda v: sum(v) / len(v),
            "MIN": min,
            "MAX": max,
        }
        if name in reducers and len(values) == 1:
            reduce, value = reducers[name], values[0]
            if isinstance(value, Series):  # one series: a scalar over all its datapoints
                return reduce(list(value.points.values())) if value.points else math.nan
            if isinstance(value, list):  # an array: a series, each timestamp over the series having it
                stamps = sorted({t for s in value for t in s.points})
                period = value[0].period if value else self.period
                return Series(
                    {t: reduce([s.points[t] for s in value if t in s.points]) for t in stamps}, period
                )
        raise MetricMathError(f"Unsupported function call {function}() with these arguments.")
