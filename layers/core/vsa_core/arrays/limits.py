"""AWS's documented rules and limits for the values an array's spec sends to AWS (pure: no boto3).

The spec model (``vsa_core.arrays.spec``) checks what an operator declares against these, so a
spec the API stores is one the AWS service it goes to accepts, or the API refuses it (422 naming
the field). Each rule cites the AWS page that states it. Where AWS's documentation leaves a form
open (an undocumented wildcard, a whitespace variant), the rule takes only the documented form:
refusing something AWS might have taken costs the operator one edit; storing something AWS
refuses fails an apply after the 2xx.
"""

import re
from dataclasses import dataclass
from datetime import datetime

# --- EventBridge Scheduler schedule expressions ---------------------------------------------

SCHEDULE_EXPRESSION_MAX = 256
"""CreateSchedule ``ScheduleExpression``: 1 to 256 characters (EventBridge Scheduler API
reference, CreateSchedule)."""

RATE_VALUE_MAX = 999_999
"""Ours, not AWS's (the API reference says only "a positive integer"): a rate of a million days
and more is a typo, and the health check adds the rate to a date."""

SCHEDULE_EXAMPLES = "cron(0 3 * * ? *) (03:00 UTC every day), cron(0 3 ? * SUN *) or rate(12 hours)"


@dataclass(frozen=True)
class CronField:
    """One of a cron expression's six fields: its values, the names it also takes, and the
    wildcards beyond , - * / it allows (field table of "Cron-based schedules")."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    steps: bool = True
    """whether ``/`` (increments) is allowed"""
    wraps: bool = True
    """whether a range may run from a higher value to a lower one (``20-2``: 20..23, 0..2)"""

    def value(self, text: str) -> int | None:
        """``text`` as one of the field's values, or None."""
        if text in self.names:
            return self.low + self.names.index(text)
        digits = len(str(self.high))  # 05 for 5, not 005: what aws-croniter reads too
        if re.fullmatch(rf"[0-9]{{1,{digits}}}", text) and self.low <= int(text) <= self.high:
            return int(text)
        return None

    def allowed(self) -> str:
        named = f" or {self.names[0]}-{self.names[-1]}" if self.names else ""
        return f"{self.low}-{self.high}{named}"


CRON_FIELDS = (
    CronField("minutes", 0, 59),
    CronField("hours", 0, 23),
    CronField("day-of-month", 1, 31),
    CronField(
        "month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
    ),
    CronField("day-of-week", 1, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), steps=False),
    CronField("year", 1970, 2199, steps=False, wraps=False),
)
"""The six fields of ``cron(minutes hours day-of-month month day-of-week year)``, as the
EventBridge Scheduler user guide's "Schedule types on EventBridge Scheduler"
(https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#cron-based) and
EventBridge's "Cron expressions reference" give them: minutes 0-59, hours 0-23, day-of-month
1-31, month 1-12 or JAN-DEC, day-of-week 1-7 or SUN-SAT (1 is Sunday), year 1970-2199.

Day-of-week takes no ``/`` (its wildcards are , - * ? L #). The year field's ``/`` is documented
but refused here: the health check reads a stored schedule with aws-croniter (``vsa_core.health
.rules.next_backup_due``), which takes a year increment only as a year (``*/2`` fails). A year
range runs from the lower year to the higher: unlike the hours of ``20-2``, years do not wrap."""


def _item(field: CronField, item: str) -> str | None:
    """Why one comma-separated item of ``field`` is not valid, or None: a value, a range
    ``a-b``, ``*``, or an increment ``start/step`` whose start is ``*``, a value or a range."""
    base, slash, step = item.partition("/")
    if slash:
        if not field.steps:
            return f"the {field.name} field takes no increments (/)"
        digits = len(str(field.high))
        if not re.fullmatch(rf"[0-9]{{1,{digits}}}", step) or not 1 <= int(step) <= field.high:
            return f"an increment (/n) in the {field.name} field is a whole number 1-{field.high}"
    if base == "*":
        return None
    first, dash, last = base.partition("-")
    start, end = field.value(first), field.value(last) if dash else None
    if start is None or (dash and end is None):
        return f"the {field.name} field takes {field.allowed()}, not {base!r}"
    if dash and end is not None and end < start and not field.wraps:
        return f"a {field.name} range runs from the lower value to the higher, not {base!r}"
    return None


def _is_special_day(field: CronField, value: str) -> bool:
    """Whether ``value`` is one of the day fields' own forms rather than a list."""
    if field.name == "day-of-month":
        return value in {"?", "L"} or value.endswith("W")
    if field.name == "day-of-week":
        return value in {"?", "L"} or value.endswith("L") or "#" in value
    return False


def _special_day(field: CronField, value: str) -> str | None:
    """Why a day field's own form is not valid, or None: ``?`` and ``L`` in either;
    day-of-month ``nW``; day-of-week ``nL`` and ``n#m`` (the only expression its field holds)."""
    if value in {"?", "L"}:
        return None
    if value.endswith("W"):
        if field.value(value[:-1]) is None:
            return "W in the day-of-month field follows a day 1-31 (15W: the weekday nearest the 15th)"
        return None
    if value.endswith("L"):
        if field.value(value[:-1]) is None:
            return "L in the day-of-week field stands alone or follows a day 1-7 or SUN-SAT (6L: last Friday)"
        return None
    day, _, nth = value.partition("#")
    if field.value(day) is None or nth not in {"1", "2", "3", "4", "5"}:
        return "# in the day-of-week field is day#n, one expression alone, n 1-5 (3#2: the second Tuesday)"
    return None


def _field(field: CronField, value: str) -> str | None:
    """Why one cron field is not valid, or None. ``*`` stands alone or starts an increment
    (``*/15``): never one item of a list."""
    if _is_special_day(field, value):
        return _special_day(field, value)
    items = value.split(",")
    if len(items) > 1 and "*" in items:
        return f"* in the {field.name} field stands alone, not in a list"
    for item in items:
        problem = _item(field, item)
        if problem is not None:
            return problem
    return None


def cron_problem(fields: str) -> str | None:
    """Why ``cron(<fields>)`` is not an expression EventBridge Scheduler takes, or None.

    Six fields separated by one space each (CRON_FIELDS gives each one's values and
    wildcards). Day-of-month and day-of-week cannot both be specified: exactly one of them is
    ``?`` ("You can't specify the Day-of-month and Day-of-week fields in the same cron
    expression. If you specify a value or a * (asterisk) in one of the fields, you must use a ?
    (question mark) in the other": Cron-based schedules, EventBridge Scheduler user guide). A
    cron expression cannot fire more often than once a minute (its finest field is minutes),
    so the guide's "rates faster than 1 minute are not supported" needs no check of its own.

    Not aws-croniter's own check (the library the health check reads schedules with): it takes
    forms AWS does not document (``*-5``, ``L-2``, ``LW``) and refuses the year increments AWS
    does; every expression this takes, aws-croniter reads (tests/unit/test_spec_properties.py).
    """
    parts = fields.split(" ")
    if len(parts) != len(CRON_FIELDS) or "" in parts:
        return (
            "a cron expression has six fields separated by single spaces: minutes hours day-of-month "
            "month day-of-week year"
        )
    for field, value in zip(CRON_FIELDS, parts, strict=True):
        problem = _field(field, value)
        if problem is not None:
            return problem
    day_of_month, day_of_week = parts[2], parts[4]
    if (day_of_month == "?") == (day_of_week == "?"):
        return (
            "exactly one of day-of-month and day-of-week is ? (AWS cannot take both, nor neither): "
            "cron(0 3 * * ? *) every day, cron(0 3 ? * MON *) every Monday"
        )
    return None


def rate_problem(inside: str) -> str | None:
    """Why ``rate(<inside>)`` is not an expression EventBridge Scheduler takes, or None.

    ``rate(value unit)``: value a positive integer, unit minute|minutes|hour|hours|day|days
    (EventBridge Scheduler API reference, CreateSchedule ``ScheduleExpression``), the singular
    for 1 and the plural above ("If the value is equal to 1, then the unit must be singular. If
    the value is greater than 1, the unit must be plural": EventBridge "Rate expressions
    reference"). The shortest rate is one minute (rate(1 minute)): Scheduler's precision is 60
    seconds (Schedule types on EventBridge Scheduler).
    """
    match = re.fullmatch(r"([1-9][0-9]*) (minute|hour|day)(s?)", inside)
    if match is None:
        return "a rate is rate(<whole number> <unit>), unit minute(s), hour(s) or day(s): rate(12 hours)"
    value, unit, plural = int(match[1]), match[2], match[3]
    if value > RATE_VALUE_MAX:
        return f"a rate's value is at most {RATE_VALUE_MAX:,}"
    if (value == 1) == bool(plural):
        return f"AWS takes rate(1 {unit}) for one and rate(N {unit}s) for more: not rate({inside})"
    return None


def at_problem(inside: str) -> str | None:
    """Why ``at(<inside>)`` is not a one-time schedule EventBridge Scheduler takes, or None:
    ``at(yyyy-mm-ddThh:mm:ss)``, a date and time (One-time schedules, EventBridge Scheduler
    user guide)."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}", inside):
        return "a one-time schedule is at(yyyy-mm-ddThh:mm:ss)"
    try:
        datetime.strptime(inside, "%Y-%m-%dT%H:%M:%S")  # a wall time: the zone is given apart
    except ValueError:
        return f"at({inside}) is not a date and time"
    return None


def schedule_kind(expression: str) -> str | None:
    """``rate``, ``cron`` or ``at`` as ``expression`` is written, else None."""
    match = re.fullmatch(r"(rate|cron|at)\((.*)\)", expression, flags=re.DOTALL)
    return match[1] if match else None


def schedule_problem(expression: str) -> str | None:
    """Why ``expression`` is not a ScheduleExpression EventBridge Scheduler takes, or None."""
    if not 1 <= len(expression) <= SCHEDULE_EXPRESSION_MAX:
        return f"a schedule expression is 1 to {SCHEDULE_EXPRESSION_MAX} characters"
    kind = schedule_kind(expression)
    if kind is None:
        return "a schedule expression is rate(value unit), cron(six fields) or at(yyyy-mm-ddThh:mm:ss)"
    inside = expression[len(kind) + 1 : -1]
    if kind == "rate":
        return rate_problem(inside)
    if kind == "cron":
        return cron_problem(inside)
    return at_problem(inside)


# --- names and tags ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NameRule:
    """A length range and a character pattern an AWS API takes a name (or tag value) in."""

    what: str
    min_length: int
    max_length: int
    pattern: str
    """a Python regular expression every character of the value matches (fullmatch)"""
    source: str
    """where AWS says so"""

    def problem(self, value: str) -> str | None:
        """Why ``value`` is not one, or None."""
        if not self.min_length <= len(value) <= self.max_length:
            return f"a {self.what} is {self.min_length} to {self.max_length} characters, not {len(value)}"
        if re.fullmatch(self.pattern, value) is None:
            return f"a {self.what} has characters outside {self.pattern}"
        return None


SCHEDULE_NAME = NameRule(
    "EventBridge Scheduler schedule name",
    1,
    64,
    r"[0-9a-zA-Z_.-]*",
    "EventBridge Scheduler API reference, CreateSchedule Name",
)
LAUNCH_TEMPLATE_NAME = NameRule(
    "launch template name",
    3,
    128,
    r"[a-zA-Z0-9().\-/_]*",
    "EC2 API reference, CreateLaunchTemplate LaunchTemplateName",
)
AUTO_SCALING_GROUP_NAME = NameRule(
    "Auto Scaling group name",
    1,
    255,
    "[\u0020-\ud7ff\ue000-\ufffd\t\n\r]*",
    "Auto Scaling API reference, CreateAutoScalingGroup AutoScalingGroupName (XmlStringMaxLen255)",
)
LIFECYCLE_HOOK_NAME = NameRule(
    "lifecycle hook name",
    1,
    255,
    r"[A-Za-z0-9\-_/]*",
    "Auto Scaling API reference, PutLifecycleHook LifecycleHookName",
)
ALARM_NAME = NameRule(
    "CloudWatch alarm name",
    1,
    255,
    r"[\x20-\x7e]*",
    "CloudWatch API reference, PutMetricAlarm AlarmName: 1-255 UTF-8 characters, no ASCII control characters",
)
"""Narrowed to printable ASCII: an alarm name is also part of the alarm's ARN."""
EXECUTION_NAME = NameRule(
    "Step Functions execution name",
    1,
    80,
    r"[A-Za-z0-9_-]*",
    "Step Functions API reference, StartExecution name: 1-80, no white space, brackets, "
    "wildcards, special characters or control characters; ASCII for CloudWatch logging",
)
"""Narrowed to letters, digits, - and _: every other character is either refused or breaks
CloudWatch logging of the execution."""
SECRET_NAME = NameRule(
    "Secrets Manager secret name",
    1,
    512,
    r"[A-Za-z0-9/_+=.@-]*",
    "Secrets Manager API reference, CreateSecret Name",
)
TAG_VALUE = NameRule(
    "tag value",
    0,
    256,
    r"[A-Za-z0-9 +\-=._:/@]*",
    "Tagging AWS resources, tag naming limits: values 0-256 Unicode characters; letters, "
    "numbers, spaces and + - = . _ : / @ across AWS services",
)
"""Narrowed to ASCII letters and digits (the cross-service set also takes other Unicode
letters)."""
COMMAND_COMMENT = NameRule("Run Command comment", 0, 100, r".*", "SSM API reference, SendCommand Comment")

# --- EBS io2 Block Express ----------------------------------------------------------------------

IO2_MIN_GIB = 4
IO2_MAX_GIB = 65_536
IO2_MIN_IOPS = 100
IO2_MAX_IOPS = 256_000
IO2_IOPS_PER_GIB = 1_000
"""io2 Block Express volumes: 4 GiB to 64 TiB, 100 to 256,000 IOPS, at most 1,000 IOPS per GiB
(Amazon EBS volume types, Provisioned IOPS SSD volumes, EBS user guide)."""

# --- CloudWatch -----------------------------------------------------------------------------------

NAMESPACE_MAX = 255
"""A custom metric namespace: 1-255 characters, not starting with ':' (CloudWatch API reference,
Metric Namespace: pattern [^:].*); AWS/ is AWS's own."""
