"""A function's log lines are delivered with a current session of its execution role, however long
its environment lives (vsa_localcloud.patches._lambda_logs_use_current_sessions). On AWS, "Lambda
automatically assumes your execution role when you invoke your function"
(https://docs.aws.amazon.com/lambda/latest/dg/lambda-intro-execution-role.html), and a warm
environment's logs keep arriving after any one session's hour. LocalStack's log handler assumed
the role once per environment, and its lines were refused as expired an hour on.

LocalStack's own LogHandler runs here, in the local cloud's interpreter, on an STS stand-in that
counts the sessions it hands out."""

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".localcloud" / "venv" / "bin" / "python"

SCRIPT = r"""
import json, sys
from types import SimpleNamespace
from localstack.services.lambda_.invocation import logs as lambda_logs

delivered = []

class Logs:
    exceptions = SimpleNamespace(ResourceNotFoundException=LookupError)

    def __init__(self, session):
        self.session = session

    def put_log_events(self, logGroupName, logStreamName, logEvents):
        delivered.append([self.session, logGroupName, [e["message"] for e in logEvents]])

class Sts:
    sessions = 0

    def with_assumed_role(self, **kwargs):
        Sts.sessions += 1
        return SimpleNamespace(logs=Logs(Sts.sessions))

lambda_logs.connect_to = Sts()
if sys.argv[1] == "patched":
    from vsa_localcloud import patches
    patches._lambda_logs_use_current_sessions()
handler = lambda_logs.LogHandler("arn:aws:iam::000000000000:role/fn", "us-east-1")
for n in (1, 2, 3):
    handler.log_queue.put(lambda_logs.LogItem("/aws/lambda/fn", "stream", f"line {n}\n"))
handler.log_queue.put(lambda_logs.QUEUE_SHUTDOWN)
handler.run_log_loop()
print(json.dumps(delivered))
"""


def delivered(mode: str) -> list[list[object]]:
    out = subprocess.run(
        [str(PYTHON), "-c", SCRIPT, mode], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_each_delivery_of_a_warm_environment_s_logs_asks_for_the_role_s_current_session():
    # LocalStack alone: one session for the environment's whole life (what expired after an hour)
    assert [d[0] for d in delivered("localstack")] == [1, 1, 1]
    # Patched: each delivery asks for the current session (reused for minutes, never expired),
    # and every line arrives, in order
    patched = delivered("patched")
    assert [d[0] for d in patched] == [1, 2, 3]
    assert [d[2] for d in patched] == [["line 1\n"], ["line 2\n"], ["line 3\n"]]
