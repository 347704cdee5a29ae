"""Small, targeted fixes to LocalStack itself, applied when the local cloud starts.

Each patch names the gap it closes and the test that pins it. Keep this list short: a patch
here is a LocalStack bug we had to work around, not a feature.
"""

import logging
from types import SimpleNamespace
from typing import Any

from localstack.runtime import hooks
from localstack.utils.patch import patch

LOG = logging.getLogger(__name__)


def _mocked_dynamodb_throw_keeps_its_error_name() -> None:
    """Step Functions mock config (``SFN_MOCK_CONFIG``): a ``Throw`` mocked for a DynamoDB
    task (``arn:aws:states:::dynamodb:*``) reaches the workflow as the generic
    ``DynamoDB.AmazonDynamoDBException`` with an empty cause, because the DynamoDB task's error
    mapper turns every non-``ClientError`` into that name. Step Functions Local (whose mock
    format LocalStack implements) raises the mocked error as written, and so do LocalStack's
    Lambda and aws-sdk tasks. Pinned by
    tests/workflows/test_scale_array_workflow.py::test_decision_already_recorded_still_sets_the_desired_count.
    """
    from localstack.services.stepfunctions.asl.component.common.error_name.failure_event import (
        FailureEventException,
    )
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_task.service.state_task_service_dynamodb import (  # noqa: E501
        StateTaskServiceDynamoDB,
    )

    @patch(StateTaskServiceDynamoDB._from_error)
    def _from_error(fn: Any, self: Any, env: Any, ex: Exception) -> Any:
        if isinstance(ex, FailureEventException):
            return ex.failure_event
        return fn(self, env, ex)


def _a_stopped_execution_stays_stopped() -> None:
    """StopExecution: on AWS an execution is stopped when the call answers (its ``stopDate`` is
    "the date the execution is stopped"; DescribeExecution then says ``ABORTED``), and nothing
    the state that was running does afterwards changes that. LocalStack's engine lets the
    running state finish first, and when that state then fails (a Lambda task raising, as a
    reconcile step's AttachVolume does once the array's controllers are being terminated), its
    ``set_error`` replaces the stop and the execution ends ``FAILED``: a workflow-failed alarm
    for a run that was stopped on purpose. A stopped program keeps its stop here (an error or a
    timeout after it is ignored). Pinned by
    tests/localcloud/test_stepfunctions.py::test_a_stopped_execution_is_aborted_even_when_its_running_task_then_fails.
    """
    from localstack.services.stepfunctions.asl.eval.environment import Environment
    from localstack.services.stepfunctions.asl.eval.program_state import ProgramStopped

    def keeps_stop(method: Any) -> None:
        @patch(method)
        def after_stop(fn: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(self._program_state, ProgramStopped):
                return None
            return fn(self, *args, **kwargs)

    keeps_stop(Environment.set_error)
    keeps_stop(Environment.set_timed_out)


def _jsonpath_parsed_once() -> None:
    """Step Functions' JSONPath: LocalStack parses every path (``InputPath``, each
    ``Parameters`` ``.$`` field, ``ResultSelector``, ``ResultPath``, Choice variables) at every
    evaluation with jsonpath-ng, whose ``parse`` builds its LALR parser (``ply.yacc``) anew each
    time. Sampled with py-spy during the integration tests, that was about half of the local
    cloud's CPU, and the local cloud is the bottleneck when tests run side by side. A parsed path
    is an immutable expression tree (``find`` reads it, never changes it), so parsing each path
    text once and reusing the tree changes no result. Speed only: the workflow tests (every
    state's paths) pin the behaviour."""
    import functools

    from localstack.services.stepfunctions.asl.component.common.path import result_path
    from localstack.services.stepfunctions.asl.utils import json_path

    for module in (json_path, result_path):
        if not hasattr(module.parse, "cache_info"):
            module.parse = functools.lru_cache(maxsize=4096)(module.parse)


def _asl_parse_tree_reused() -> None:
    """Step Functions' definitions: LocalStack parses the whole definition with ANTLR at every
    execution's start (``AmazonStateLanguageParser.parse``, called by ``ExecutionWorker``) and
    at every CreateStateMachine/UpdateStateMachine (its static analysers), then turns the parse
    tree into the program the execution runs (``Preprocessor``). Sampled with py-spy during the
    scaling and health tests, the ANTLR parse was about a quarter of the local cloud's busy
    CPU: each ScaleArray, DrainController or health check execution re-parsed the same text.
    Measured on the six deployed definitions (CPU per execution start): 27-178 ms before,
    6-72 ms with the tree kept (2.3-4.5x less); the Preprocessor is what is left.
    Here the parse tree of each definition text is kept (a failed parse raises, as before, and
    is not kept) and the program is still built afresh for every call, so no execution shares
    a program with another. What they share is the tree, read only: the Preprocessor is a
    visitor that reads the tree's contexts and keeps its one piece of state (its query-language
    scope stack) on itself; the static analysers were not read line by line, but are visitors of
    the same kind. The same steps as LocalStack's ``parse`` (pinned version:
    requirements/localcloud.txt), the tree kept in between. Speed only: the workflow tests and
    tests/localcloud/test_stepfunctions.py::test_one_definition_run_side_by_side_keeps_each_executions_own_state
    pin the behaviour (that test also passes with whole programs shared: LocalStack keeps an
    execution's retry counts and variables in its Environment, so it cannot show that a fresh
    program is needed; it is built anyway, the cautious choice)."""
    import functools

    from antlr4 import CommonTokenStream, InputStream
    from localstack.services.stepfunctions.asl.parse import asl_parser

    parser = asl_parser.AmazonStateLanguageParser
    if getattr(parser.parse, "vsa_tree_reused", False):
        return

    @functools.lru_cache(maxsize=512)
    def tree_of(definition: str) -> Any:
        errors = asl_parser.SyntaxErrorListener()
        antlr = asl_parser.ASLParser(CommonTokenStream(asl_parser.ASLLexer(InputStream(definition))))
        antlr.removeErrorListeners()
        antlr.addErrorListener(errors)
        tree = antlr.state_machine()
        if errors.errors:
            raise asl_parser.ASLParserException(errors=errors.errors)
        return tree

    def parse(definition: str) -> tuple[Any, Any]:
        tree = tree_of(definition)
        return asl_parser.Preprocessor().visit(tree), tree

    parse.vsa_tree_reused = True  # type: ignore[attr-defined]
    parser.parse = staticmethod(parse)  # type: ignore[method-assign,assignment]


def _metric_stat_read_in_one_query() -> None:
    """GetMetricData of ``MetricStat`` queries: LocalStack's ``get_metric_data_stat`` runs one SQL
    sub-query per period, 500 of them UNION-ed into each statement, so the health check's 14 days
    at 300 s (4,032 periods, per array) compiled and ran nine such statements: 2.3 s of CPU per
    array per check, measured on the integration tests' own metric store, under the store's one
    lock that PutMetricData and the alarms' evaluation wait on too. Sampled with py-spy during the
    integration tests it was the local cloud's largest single cost. Here the same rows (the same
    filters: LocalStack's dimension ``LIKE``, its unit rule) are read once and grouped by period
    (``(timestamp - start) / period``, periods from StartTime as LocalStack counts them, the last
    one running past EndTime as its loop does); a period without samples gives no datapoint, an
    ``Average`` is the sum over the samples' count. Speed only; pinned by
    tests/localcloud/test_cloudwatch.py::test_metric_stat_queries_aggregate_each_period_from_start_time.
    """
    import math
    import sqlite3

    from localstack.services.cloudwatch import cloudwatch_database_helper as helper

    database = helper.CloudwatchDatabase
    if getattr(database.get_metric_data_stat, "vsa_one_query", False):
        return
    original = database.get_metric_data_stat

    def get_metric_data_stat(
        self: Any, account_id: str, region: str, query: Any, start_time: Any, end_time: Any, scan_by: Any
    ) -> dict[str, list[Any]]:
        metric_stat = query.get("MetricStat")
        metric = metric_stat.get("Metric")
        period, stat = metric_stat.get("Period"), metric_stat.get("Stat")
        if not isinstance(period, int) or period <= 0 or stat not in helper.STAT_TO_SQLITE_AGGREGATION_FUNC:
            return dict(original(self, account_id, region, query, start_time, end_time, scan_by))
        dimensions, unit = metric.get("Dimensions", []), metric_stat.get("Unit")
        start = self._convert_timestamp_to_unix(start_time)
        end = self._convert_timestamp_to_unix(end_time)
        if start >= end:
            return {"timestamps": [], "values": []}
        stop = start + math.ceil((end - start) / period) * period
        data: tuple[Any, ...] = (account_id, region, metric.get("Namespace"), metric.get("MetricName"))
        dimension_filter = "AND dimensions is null " if not dimensions else "AND dimensions LIKE ? "
        if dimensions:
            data += (self._get_ordered_dimensions_with_separator(dimensions, for_search=True),)
        unit_filter = ""
        if unit == "NULL_VALUE":
            unit_filter = "AND unit IS NULL"
        elif unit:
            unit_filter = "AND unit = ? "
            data += (unit,)
        # table names and aggregates are LocalStack's constants; values are bound parameters
        sql = f"""
        SELECT
            CAST((timestamp - ?) / ? AS INTEGER) AS period_index,
            {helper.STAT_TO_SQLITE_AGGREGATION_FUNC[stat]},
            SUM(count)
        FROM (
            SELECT value, 1 as count, account_id, region, metric_name, namespace, timestamp,
                dimensions, unit, storage_resolution
            FROM {self.TABLE_SINGLE_METRICS}
            UNION ALL
            SELECT {helper.STAT_TO_SQLITE_COL_NAME_HELPER[stat]} as value, sample_count as count,
                account_id, region, metric_name, namespace, timestamp, dimensions, unit, storage_resolution
            FROM {self.TABLE_AGGREGATED_METRICS}
        ) AS combined
        WHERE account_id = ? AND region = ?
        AND namespace = ? AND metric_name = ?
        {dimension_filter}
        {unit_filter}
        AND timestamp >= ? AND timestamp < ?
        GROUP BY period_index
        ORDER BY period_index ASC
        """  # noqa: S608
        with self.DATABASE_LOCK, sqlite3.connect(self.METRICS_DB_READ_ONLY, uri=True) as conn:
            rows = conn.execute(sql, (start, period, *data, start, stop)).fetchall()
        timestamps, values = [], []
        for index, aggregate, count in rows:
            if count:
                timestamps.append(start + int(index) * period)
                values.append(aggregate / count if stat == "Average" else aggregate)
        if scan_by is None or scan_by == "TimestampDescending":
            timestamps, values = timestamps[::-1], values[::-1]
        return {"timestamps": timestamps, "values": values}

    get_metric_data_stat.vsa_one_query = True  # type: ignore[attr-defined]
    database.get_metric_data_stat = get_metric_data_stat  # type: ignore[method-assign]


def _assumed_roles_reused() -> None:
    """Service-to-service calls: LocalStack assumes the caller's role anew for every Step
    Functions task, every Lambda invocation's log upload, every EventBridge target and every API
    Gateway integration (``connect_to.with_assumed_role``: an internal STS AssumeRole request),
    and the fresh credentials then miss its boto client cache, so each call also builds a new
    boto client. Sampled with py-spy while integration tests run side by side, client creation
    is the largest cost after JSONPath parsing without this patch. AWS's services reuse a role session while
    its credentials are valid (an hour by default); here a session is reused for 10 minutes. The
    role, its service principal and so IAM enforcement (which evaluates the role's policies at
    each request) are unchanged; only an explicitly named session is never reused."""
    import threading
    import time

    from localstack.aws.connect import ClientFactory

    if getattr(ClientFactory.with_assumed_role, "_vsa_reused", False):
        return
    original = ClientFactory.with_assumed_role
    sessions: dict[tuple[Any, ...], tuple[float, Any]] = {}
    lock = threading.Lock()
    reuse_seconds = 600.0

    def with_assumed_role(self: Any, *, role_arn: str, session_name: str | None = None, **kw: Any) -> Any:
        if session_name is not None:
            return original(self, role_arn=role_arn, session_name=session_name, **kw)
        key = (id(self), role_arn, *sorted((k, id(v) if k == "config" else v) for k, v in kw.items()))
        now = time.monotonic()
        with lock:
            cached = sessions.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        factory = original(self, role_arn=role_arn, **kw)
        with lock:
            sessions[key] = (now + reuse_seconds, factory)
        return factory

    with_assumed_role._vsa_reused = True  # type: ignore[attr-defined]
    ClientFactory.with_assumed_role = with_assumed_role  # type: ignore[method-assign]


def _lambda_logs_use_current_sessions() -> None:
    """A function's log lines are delivered with a current session of its execution role, however
    long its execution environment lives. LocalStack's Lambda log handler assumes the role once,
    when the environment's log loop starts, and keeps that client: after the session's hour its
    PutLogEvents are refused as expired (IAM enforcement checks expiry, as AWS does), and every
    later line of a warm environment is lost ("Error saving logs ... ExpiredTokenException"). On
    AWS "Lambda automatically assumes your execution role when you invoke your function"
    (https://docs.aws.amazon.com/lambda/latest/dg/lambda-intro-execution-role.html) and its logs
    keep arriving. Here the handler's client asks for the role's session at each call (a reused
    session, ``_assumed_roles_reused``: never older than its 10 minutes). Pinned by
    tests/localcloud/test_lambda_logs.py."""
    from localstack.services.lambda_.invocation import logs as lambda_logs

    if getattr(lambda_logs.connect_to, "_vsa_current", False):
        return

    class CurrentLogs:
        """The logs client of the role's current session, looked up at each attribute."""

        def __init__(self, connect: Any, kwargs: dict[str, Any]) -> None:
            self._connect, self._kwargs = connect, kwargs

        def __getattr__(self, name: str) -> Any:
            return getattr(self._connect.with_assumed_role(**self._kwargs).logs, name)

    class Connect:
        _vsa_current = True

        def __init__(self, connect: Any) -> None:
            self._connect = connect

        def with_assumed_role(self, **kwargs: Any) -> Any:
            return SimpleNamespace(logs=CurrentLogs(self._connect, kwargs))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._connect, name)

    lambda_logs.connect_to = Connect(lambda_logs.connect_to)


def _role_update_puts_its_inline_policies() -> None:
    """CloudFormation's AWS::IAM::Role: a stack update that changes a role's ``Policies`` (its
    inline policies) changes them on AWS ("Update requires: No interruption", AWS::IAM::Role in
    the CloudFormation User Guide: https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-iam-role.html).
    LocalStack's provider compares only the name, trust policy and managed policy ARNs and
    otherwise reports success with the old state, so a redeployed stack keeps the role's old
    statements and IAM enforcement refuses what the new template grants. Here an update also
    puts every desired inline policy (PutRolePolicy) and deletes those no longer declared
    (DeleteRolePolicy). Pinned by tests/localcloud/test_cfn_resources.py::
    test_a_stack_update_changes_a_role_s_inline_policies."""
    import json

    from localstack.services.cloudformation.resource_provider import OperationStatus, ProgressEvent
    from localstack.services.iam.resource_providers.aws_iam_role import IAMRoleProvider

    @patch(IAMRoleProvider.update)
    def update(fn: Any, self: Any, request: Any) -> Any:
        result = fn(self, request)
        desired, previous = request.desired_state, request.previous_state or {}
        if result.status != OperationStatus.SUCCESS or result.resource_model is not previous:
            return result  # replaced (created anew with its policies) or failed
        iam, role = request.aws_client_factory.iam, previous["RoleName"]
        wanted = {p["PolicyName"]: p["PolicyDocument"] for p in desired.get("Policies") or []}
        for name, document in wanted.items():
            text = document if isinstance(document, str) else json.dumps(document)
            iam.put_role_policy(RoleName=role, PolicyName=name, PolicyDocument=text)
        for policy in previous.get("Policies") or []:
            if policy["PolicyName"] not in wanted:
                iam.delete_role_policy(RoleName=role, PolicyName=policy["PolicyName"])
        model = {**previous, "Policies": desired.get("Policies") or []}
        return ProgressEvent(status=OperationStatus.SUCCESS, resource_model=model)


def _managed_policy_updates() -> None:
    """CloudFormation's AWS::IAM::ManagedPolicy: LocalStack's provider raises
    NotImplementedError on update, which its engine logs and reports as UPDATE_COMPLETE with the
    policy unchanged (a redeployed stack kept a policy's old statements, and IAM enforcement
    refused what the new template grants). ``vsa_localcloud.cfn.iam_managedpolicy.update`` does
    it as AWS does."""
    from localstack.services.iam.resource_providers.aws_iam_managedpolicy import IAMManagedPolicyProvider

    from vsa_localcloud.cfn import iam_managedpolicy

    @patch(IAMManagedPolicyProvider.update)
    def update(fn: Any, self: Any, request: Any) -> Any:
        return iam_managedpolicy.update(request)


def _modify_launch_template_by_name() -> None:
    """ModifyLaunchTemplate takes the template by ``LaunchTemplateId`` *or*
    ``LaunchTemplateName`` (EC2 API Reference, ModifyLaunchTemplate: "You must specify either
    the launch template ID or launch template name in the request, but not both").
    LocalStack's EC2 provider reads ``request["LaunchTemplateId"]`` and fails every call by name
    with a KeyError (an InternalError), so an apply that gives an array's controllers a new AMI
    or instance type (a new default version of the array's template, set by name) failed locally
    where AWS accepts it. The name is resolved to the id first here. Pinned by
    tests/localcloud/test_autoscaling.py::test_a_launch_templates_default_version_is_set_by_name.
    """
    from localstack.services.ec2.provider import Ec2Provider, get_moto_backend

    @patch(Ec2Provider.modify_launch_template)
    def by_name(fn: Any, self: Any, context: Any, request: Any) -> Any:
        name = request.get("LaunchTemplateName")
        if name and not request.get("LaunchTemplateId"):
            ids = get_moto_backend(context).launch_template_name_to_ids
            if name in ids:  # else the provider's own answer for an unknown template
                request = {**request, "LaunchTemplateId": ids[name]}
                request.pop("LaunchTemplateName")
        return fn(self, context, request)


def _a_timestamp_wait_ends_at_its_timestamp() -> None:
    """A Wait state's ``Timestamp`` / ``TimestampPath``: AWS waits until that time ("Wait state:
    Timestamp ... An absolute time to wait until", docs.aws.amazon.com/step-functions/latest/dg/
    state-wait.html). LocalStack waits ``int(timestamp - now)`` seconds, truncated, so the state
    ends up to a second before the timestamp; it also reads ``now`` in the machine's local time
    against a UTC timestamp. Here the wait is rounded up against UTC. Pinned by
    tests/localcloud/test_stepfunctions.py::test_a_timestamp_wait_ends_at_or_after_its_timestamp.
    """
    import datetime
    import math

    from localstack.services.stepfunctions.asl.component.common.error_name.failure_event import (
        FailureEventException,
    )
    from localstack.services.stepfunctions.asl.component.state.state_wait.wait_function.timestamp import (
        Timestamp,
    )

    @patch(Timestamp._get_wait_seconds)
    def _get_wait_seconds(fn: Any, self: Any, env: Any) -> int:
        self.string.eval(env=env)
        given: str = env.stack.pop()
        when = self._from_timestamp_string(timestamp=given)
        if when is None:  # as the original: the state fails with States.Runtime
            raise FailureEventException(self._create_failure_event(env, given))
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # the timestamp is UTC
        seconds: int = max(0, math.ceil((when - now).total_seconds()))
        return seconds


@hooks.on_infra_start()
def apply_localcloud_patches() -> None:
    _mocked_dynamodb_throw_keeps_its_error_name()
    _a_stopped_execution_stays_stopped()
    _role_update_puts_its_inline_policies()
    _managed_policy_updates()
    _jsonpath_parsed_once()
    _asl_parse_tree_reused()
    _metric_stat_read_in_one_query()
    _assumed_roles_reused()
    _lambda_logs_use_current_sessions()
    _modify_launch_template_by_name()
    _a_timestamp_wait_ends_at_its_timestamp()
    # moto's EC2 model is shared by EC2, Auto Scaling and CloudFormation; patch it before any
    # of them runs (the EC2 provider also applies it, idempotently, when it loads).
    from vsa_localcloud import ebs_model

    ebs_model.apply_patches()
    # REST API methods with AWS_IAM authorization refuse unsigned or badly signed requests, as
    # on AWS (community LocalStack lets them through): a handler added to the invocation chain.
    from vsa_localcloud import apigateway_iam

    apigateway_iam.enforce_iam_authorization()
    # An integration that has not answered within its timeout (29 s by default) gets API
    # Gateway's 504 "Endpoint request timed out", as on AWS (community LocalStack waits on).
    __import__("vsa_localcloud.apigateway_timeout").apigateway_timeout.enforce_integration_timeout()
    # Every role-signed request is authorized against the role's policies, as on AWS (community
    # LocalStack evaluates none): see iam_enforcement.
    from vsa_localcloud import iam_enforcement

    iam_enforcement.install()
    # PutEvents: each entry's bus policy (an explicit Deny refuses even the root) and aws.* sources
    # reserved for AWS services: see events_policy.
    __import__("vsa_localcloud.events_policy").events_policy.install()
    # Request limits AWS keeps and moto does not (EC2's 200 filter values, SSM's 100 instance ids
    # per filter, Secrets Manager's 65,536-character secret): see aws_limits.
    __import__("vsa_localcloud.aws_limits").aws_limits.install()
    __import__("vsa_localcloud.sfn_errors").sfn_errors.install()  # aws-sdk task errors named as on AWS
    __import__("vsa_localcloud.sfn_metrics").sfn_metrics.install()  # AWS/States execution metrics
    __import__("vsa_localcloud.jsonata").jsonata.install()  # JSONata on the installed JRE, no download
    __import__("vsa_localcloud.sfn_variables").sfn_variables.install()  # $var in JSONPath, no JVM
    LOG.info(
        "local-cloud patches applied: mocked DynamoDB task errors keep their names; a stopped "
        "execution stays stopped; JSONPath "
        "parsed once; ASL parse trees kept; role sessions reused; a timestamp Wait ends at its "
        "timestamp; EBS model; "
        "AWS_IAM authorization of REST API methods; IAM enforcement of role-signed requests; AWS's "
        "request limits"
    )
