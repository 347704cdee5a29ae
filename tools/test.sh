#!/usr/bin/env bash
# The test command (make test; .ci/run calls it). Runs, in order: ruff, mypy, sam validate
# --lint; the unit, infra, local-cloud, documents and workflow tests side by side (pytest-xdist);
# the stack built and deployed once to the local cloud; the integration tests against it, side by
# side, first those under the fast latency profile, then those under the realistic one (the
# profile is the local cloud's, so it is set once per phase, never per test). It starts the local
# cloud unless one is already running and stops it again if it started it, even on failure. When
# a test fails, the local cloud's log is printed. Last, the data-plane tier (tests/dataplane: the
# documents on real kernels in QEMU guests; no local cloud).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
VENV="$ROOT/.venv/bin"
status=0
step() { echo; echo "=== $*"; }
offline() { env -u AWS_ENDPOINT_URL "$@"; }

step "ruff (lint + format)"
"$VENV/ruff" check . && "$VENV/ruff" format --check . || status=1
step "mypy (strict, pydantic plugin, boto3 stubs)"
"$VENV/mypy" layers/core functions cli || status=1
step "sam validate --lint"
offline sam validate --lint || status=1
if [[ $status -ne 0 ]]; then
  echo "static checks failed; not running the tests" >&2
  exit $status
fi

started_here=0
stop_cloud() {
  if [[ $started_here -eq 1 ]]; then tools/localcloud.sh stop; fi
}
trap stop_cloud EXIT

# Tests run side by side (pytest-xdist) where they do not share state: with --dist loadgroup,
# tests/conftest.py keeps each group on one worker (the local-cloud fidelity tests switch its
# global controls, the documents tests take loop devices and time freezes); everything else
# spreads over the workers. The integration tests each make their own arrays, volumes and
# hosts; the latency profile is the local cloud's, so it is set once for each phase.
if ! tools/localcloud.sh status >/dev/null 2>&1; then
  tools/localcloud.sh start || exit 1
  started_here=1
fi
show_log() {
  echo; echo "=== local cloud log (tests failed)"
  tail -n 400 "${VSA_STATE:-$ROOT/.localcloud}/run-${VSA_LOCALCLOUD_PORT:-4566}/localstack.log"
}
timings() {
  curl -fsS -X POST "${AWS_ENDPOINT_URL}/_localcloud/timings/configure" -d "{\"profile\": \"$1\"}" >/dev/null
}

step "tests: unit + infra (no network); local-cloud fidelity; host documents (real XFS on loop devices, as root; SSM documents on sandbox nodes); workflows (the deployed ASL, tasks mocked)"
"$VENV/python" -m pytest -n 3 --dist loadgroup --durations=10 tests/unit tests/infra tests/localcloud tests/documents tests/workflows || status=1

step "integration: the real template deployed once (sam build + sam deploy), the real Lambda code"
SECONDS=0
if ! { sam build --config-env local >/dev/null && bash tools/deploy-local.sh >/dev/null; }; then
  show_log
  exit 1
fi
echo "built and deployed in ${SECONDS} s"
export VSA_STACK_DEPLOYED=1

step "integration (fast latency profile), side by side"
timings fast
"$VENV/python" -m pytest -n 4 -m "not realistic" --durations=10 tests/integration || status=1

step "integration (realistic latency profile: AWS-like waits), side by side"
timings realistic
# The tests marked minutes wait on CloudWatch's own minute-by-minute cadence (alarms evaluated
# every minute, cooldowns): a quarter of an hour of mostly waiting, little CPU. They start now, in
# a process of their own, and run on through the data-plane tier (which needs no local cloud);
# the local cloud stays up until they end.
long_log="$(mktemp)"
VSA_TIMINGS_PROFILE=realistic "$VENV/python" -m pytest -m "realistic and minutes" --durations=5 tests/integration \
  >"$long_log" 2>&1 &
long_pid=$!
VSA_TIMINGS_PROFILE=realistic "$VENV/python" -m pytest -n 7 -m "realistic and not minutes" --durations=10 tests/integration || status=1

step "tests: data plane (the documents on real Linux kernels in QEMU guests: controllers + a host, NVMe/TCP multipath, fio, XFS)"
offline "$VENV/python" -m pytest --durations=10 tests/dataplane || status=1

step "integration (minutes of CloudWatch's cadence; started with the realistic phase)"
wait "$long_pid" || status=1
cat "$long_log"
rm -f "$long_log"
timings fast
if [[ $status -ne 0 ]]; then show_log; fi
stop_cloud
started_here=0
exit $status
