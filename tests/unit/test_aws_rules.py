"""vsa_core.arrays.limits: AWS's documented rules for what the control plane sends to AWS.

The valid examples are the AWS pages' own (EventBridge Scheduler user guide, "Schedule types on
EventBridge Scheduler"; EventBridge "Cron expressions reference" and "Rate expressions
reference"), as are the invalid ones the pages call invalid; the rest are each rule's edges."""

import pytest
from aws_croniter import AwsCroniter

from vsa_core.arrays import limits
from vsa_core.arrays.limits import schedule_problem

AWS_VALID = [
    # Cron expressions reference: its examples table
    "cron(0 10 * * ? *)",
    "cron(15 12 * * ? *)",
    "cron(0 18 ? * MON-FRI *)",
    "cron(0 8 1 * ? *)",
    "cron(0/15 * * * ? *)",
    "cron(0/10 * ? * MON-FRI *)",
    "cron(0/5 8-17 ? * MON-FRI *)",
    "cron(0/30 20-2 ? * MON-FRI *)",
    "cron(15 10 ? * 6L 2019-2022)",  # the last Friday of each month, 2019-2022
    "cron(0 9 ? * 3#2 *)",  # the second Tuesday
    "cron(0 0 3W * ? *)",  # the weekday nearest the third
    "cron(0 0 L * ? *)",  # the last day of the month
    "cron(0 12 * JAN,FEB,MAR ? *)",
    "cron(0 12 1-15 * ? *)",
    "cron(1/10 * * * ? *)",
    # Rate expressions reference and the Scheduler guide's create-schedule examples
    "rate(1 minute)",
    "rate(5 minutes)",
    "rate(1 hour)",
    "rate(1 day)",
    "rate(15 minutes)",
    # One-time schedules
    "at(2022-11-20T13:00:00)",
]

AWS_INVALID = {
    "rate(1 hours)": "rate(1 hour)",  # the Rate expressions reference's own invalid examples
    "rate(5 hour)": "rate(N hours)",
    "rate(0 minutes)": "whole number",
    "rate(-1 days)": "whole number",
    "rate(1.5 hours)": "whole number",
    "rate(30 seconds)": "minute(s)",
    "rate(2 weeks)": "minute(s)",
    "rate(5  minutes)": "whole number",
    "rate(1000000 days)": "at most 999,999",
    "cron(0 9 * * MON-FRI *)": "exactly one",  # both day fields specified
    "cron(0 9 * * * *)": "exactly one",
    "cron(0 9 ? * ? *)": "exactly one",
    "cron(0 3 * * ?)": "six fields",
    "cron(0 3 * * ? * *)": "six fields",
    "cron(0  3 * * ? *)": "six fields",
    "cron( 0 3 * * ? *)": "six fields",
    "cron(60 3 * * ? *)": "minutes field takes 0-59",
    "cron(0 24 * * ? *)": "hours field takes 0-23",
    "cron(0 3 0 * ? *)": "day-of-month field takes 1-31",
    "cron(0 3 32 * ? *)": "day-of-month field takes 1-31",
    "cron(0 3 * 13 ? *)": "month field takes 1-12 or JAN-DEC",
    "cron(0 3 * 0 ? *)": "month field",
    "cron(0 3 ? * 0 *)": "day-of-week field takes 1-7 or SUN-SAT",
    "cron(0 3 ? * 8 *)": "day-of-week field",
    "cron(0 3 * * ? 1969)": "year field takes 1970-2199",
    "cron(0 3 * * ? 2200)": "year field takes 1970-2199",
    "cron(0 3 ? * 3#1,6#3 *)": "one expression alone",  # the reference's own invalid '#' example
    "cron(0 3 ? * 3#6 *)": "n 1-5",
    "cron(0 3 ? * 9L *)": "L in the day-of-week",
    "cron(0 3 32W * ? *)": "W in the day-of-month",
    "cron(0/0 3 * * ? *)": "increment",
    "cron(0/60 3 * * ? *)": "increment",
    "cron(0 3 ? * MON/2 *)": "day-of-week field takes no increments",
    "cron(0 3 * * ? 2020/2)": "year field takes no increments",
    "cron(0 3 * * ? 2030-2020)": "lower value to the higher",
    "cron(*,5 3 * * ? *)": "stands alone",
    "cron(? 3 * * ? *)": "minutes field",
    "cron(0 3 * jan ? *)": "month field",  # names as the pages write them: upper case
    "cron(005 3 * * ? *)": "minutes field",
    "cron(0 3 * * ? *) ": "rate(value unit), cron(six fields)",
    "CRON(0 3 * * ? *)": "rate(value unit), cron(six fields)",
    "cron(0 3 * * ? *)\n": "rate(value unit), cron(six fields)",
    "every day": "rate(value unit), cron(six fields)",
    "": "1 to 256 characters",
    "cron(" + " ".join(["0,1,2,3,4,5,6,7,8,9"] * 30) + ")": "1 to 256 characters",
    "at(2022-11-20 13:00:00)": "at(yyyy-mm-ddThh:mm:ss)",
    "at(2022-02-30T13:00:00)": "not a date and time",
}


@pytest.mark.parametrize("expression", AWS_VALID)
def test_the_aws_pages_examples_are_valid(expression: str) -> None:
    assert schedule_problem(expression) is None


@pytest.mark.parametrize(("expression", "why"), AWS_INVALID.items())
def test_what_aws_refuses_is_refused_saying_why(expression: str, why: str) -> None:
    problem = schedule_problem(expression)
    assert problem is not None
    assert why in problem


@pytest.mark.parametrize("expression", [e for e in AWS_VALID if e.startswith("cron(")])
def test_every_valid_cron_is_one_the_health_check_can_read(expression: str) -> None:
    # the health check reads a stored schedule with aws-croniter (vsa_core.health.rules)
    AwsCroniter(expression[5:-1])


@pytest.mark.parametrize(
    "fields",
    [
        "0 3 * * ? */2",  # AWS documents / in the year field; aws-croniter cannot read it
        "0 3 LW * ? *",  # undocumented forms aws-croniter takes: refused
        "0 3 L-2 * ? *",
        "*-5 3 * * ? *",
    ],
)
def test_forms_aws_does_not_document_or_the_health_check_cannot_read_are_refused(fields: str) -> None:
    assert limits.cron_problem(fields) is not None


@pytest.mark.parametrize(
    ("rule", "value", "ok"),
    [
        (limits.SCHEDULE_NAME, "vsa-" + "a" * 60, True),
        (limits.SCHEDULE_NAME, "vsa-" + "a" * 61, False),
        (limits.SCHEDULE_NAME, "vsa:x", False),
        (limits.SCHEDULE_NAME, "", False),
        (limits.LAUNCH_TEMPLATE_NAME, "ab", False),
        (limits.LAUNCH_TEMPLATE_NAME, "a(b)/c_d.e-f", True),
        (limits.LAUNCH_TEMPLATE_NAME, "a" * 129, False),
        (limits.LIFECYCLE_HOOK_NAME, "vsa-x-drain", True),
        (limits.LIFECYCLE_HOOK_NAME, "vsa.x", False),
        (limits.AUTO_SCALING_GROUP_NAME, "a" * 255, True),
        (limits.AUTO_SCALING_GROUP_NAME, "a" * 256, False),
        (limits.ALARM_NAME, "vsa-x-iops-high", True),
        (limits.ALARM_NAME, "a\x07", False),
        (limits.EXECUTION_NAME, "a" * 80, True),
        (limits.EXECUTION_NAME, "a" * 81, False),
        (limits.EXECUTION_NAME, "a b", False),
        (limits.TAG_VALUE, "", True),
        (limits.TAG_VALUE, "a" * 257, False),
        (limits.TAG_VALUE, "a;b", False),
        (limits.SECRET_NAME, "vsa/x/keys", True),
        (limits.SECRET_NAME, "vsa x", False),
        (limits.COMMAND_COMMENT, "c" * 101, False),
    ],
)
def test_name_rules_hold_their_length_and_characters(rule: limits.NameRule, value: str, ok: bool) -> None:
    problem = rule.problem(value)
    assert (problem is None) == ok, problem
    if not ok:
        assert rule.what in str(problem)
