#!/usr/bin/env bash
# The test command (make test; .ci/run calls it). Runs, in order: the data-plane tier
# (tests/dataplane: the documents on real kernels in QEMU guests; no local cloud) in the
# background, and beside it ruff, mypy, import-linter, sam validate --lint; then three local
# clouds started and the stack built once (sam build); in the background, the stack deployed to
# the second cloud, where the tests that wait minutes on CloudWatch's cadence start, and to the
# first (two Regions), and the unit, infra, local-cloud, documents and workflow tests on the third
# (pytest-xdist, nice 10: the tier and the integration tests get the cores first); then, once the
# tier has ended, the integration tests against the first two clouds, side by side: those under
# the fast latency profile on the first while those under the realistic one run on the second
# (the profile is a local cloud's, so each cloud keeps one for the whole command, never switched
# per test). It starts the local clouds unless one is already running on that port and stops
# those it started, even on failure. When a test fails, the local clouds' logs are printed.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
VENV="$ROOT/.venv/bin"
status=0
step() { echo; echo "=== $*"; }
offline() { env -u AWS_ENDPOINT_URL "$@"; }

phase_times=()
# Every pytest run's output is also kept, so the command's last lines can name what failed: the
# local clouds' logs printed on a failure are long, and CI shows only the end of the output.
failures="$(mktemp)"
# Each pytest run writes a JUnit report here; the slowest tests across them are printed at the end.
reports="$(mktemp -d)"
kept() { local name="$1"; shift; local log; log="$(mktemp)"; local rc=0
  "$@" 2>&1 | tee "$log" || rc=1
  grep -E '^(FAILED|ERROR) ' "$log" | sed "s/^/[$name] /" >>"$failures"
  if [[ $rc -ne 0 ]] && ! grep -qE '^(FAILED|ERROR) ' "$log"; then
    echo "[$name] failed without a FAILED or ERROR line: $(tail -n 1 "$log")" >>"$failures"
  fi
  rm -f "$log"; return $rc; }
what_failed() { # the failures' own words last: a CI run shows only the end of its output
  if [[ -s "$failures" ]]; then
    echo; echo "=== what failed"; cat "$failures"
    if compgen -G "$ROOT/.test-reports/*.xml" >/dev/null; then
      echo; echo "=== what each failure said (its last lines; the whole output above)"
      "$VENV/python" "$ROOT/tools/slowest_tests.py" --failures 12 "$ROOT"/.test-reports/*.xml
    fi
  fi
  rm -f "$failures"; }
phase() { phase_times+=("$(printf '%-48s %5d s' "$1" "$2")"); }
TOTAL_START="$(date +%s)"
dataplane_pid=""
# shellcheck disable=SC2317  # called by the EXIT trap
stop_dataplane() { # a command that ends early interrupts the tier: pytest then closes its labs
  [[ -z $dataplane_pid ]] || kill -INT "$dataplane_pid" 2>/dev/null
  [[ -z $dataplane_pid ]] || wait "$dataplane_pid"
}
trap 'stop_dataplane' EXIT
# The data-plane tier (tests/dataplane: the documents on real Linux kernels in QEMU guests; no
# local cloud) starts first, beside the static checks (it is the longest chain of the command;
# a check that fails interrupts it), and runs on beside the unit phase: what the tier asserts
# depends on the guests keeping time (a 2 s keep-alive, a fence before a failover), and the unit
# tests wait on no clock of their own. Linux shares the CPU between sessions first and by nice
# only within one (autogroups, kernel.sched_autogroup_enabled, on here): each QEMU guest runs in
# a session of its own (tests/dataplane/lab.py), so every guest gets a share as large as this
# whole command's session, whatever its nice; the unit phase's nice 10 puts it behind the local
# clouds inside the command's session. Every module of the tier runs, each in a lab of its own. Its
# output is kept apart and printed whole when it ends.
step "tests: data plane, in the background (the documents on real Linux kernels in QEMU guests: controllers + a host, NVMe/TCP multipath, fio, XFS, fencing, authentication, backup sets)"
dataplane_log="$(mktemp)"
dataplane_start="$(date +%s)"
# As root (CI) the tier's pytest (it drives the guests and samples their scheduling) runs at
# nice -5, ahead of the local clouds in the command's session; its guests have sessions of their own.
tier_nice=()
[[ $EUID -ne 0 ]] || tier_nice=(nice -n -5)
# (exec in a subshell: a command put in the background straight from this script ignores SIGINT,
# and Python then never installs its handler, so the kill -INT above would not reach pytest)
( exec env -u AWS_ENDPOINT_URL "${tier_nice[@]}" "$VENV/python" -m pytest --durations=10 \
  --junitxml="$reports/dataplane.xml" tests/dataplane >"$dataplane_log" 2>&1 ) &
dataplane_pid=$!

SECONDS=0
step "ruff (lint + format)"
"$VENV/ruff" check . && "$VENV/ruff" format --check . || status=1
step "mypy (strict, pydantic plugin, boto3 stubs)"
"$VENV/mypy" layers/core functions cli tools/localcloud/vsa_localcloud || status=1
# the documents' Python runs on the nodes' python3 (3.9+): checked against the oldest mypy knows
"$VENV/mypy" --python-version 3.10 documents/lib || status=1
step "import-linter (the core's layers: pyproject.toml's [tool.importlinter])"
"$VENV/lint-imports" || status=1
# The security gate (checkov, parliament, cloudsplaining against tools/security-baseline.yaml) is
# not run here: tests/infra/test_security_gate.py runs the same gate on the template in the unit
# phase (under CI a missing linter fails it), so running it here too only put 20 s on the path.
step "sam validate --lint"
offline sam validate --lint || status=1
if [[ $status -ne 0 ]]; then
  echo "static checks failed; not running the tests" >&2
  exit $status
fi
phase "static checks (ruff, mypy, imports, sam validate)" "$SECONDS"

# Three local clouds: the first (VSA_LOCALCLOUD_PORT) for the integration tests under the fast
# profile; the second (100 ports up; its service port range, +1000..+1050, then overlaps no
# other's) for the minutes tests and those under the realistic profile; the third (200 up) for
# the unit phase's local-cloud, documents and workflow tests. Those switch a cloud's global
# controls (its timing profile, held alarms), so they get a cloud of their own: the stack is then
# deployed to the first cloud while the unit phase runs, and the integration tests start as soon
# as the tier has ended, beside whatever is left of the unit phase (nice 10: the clouds and the
# integration tests get the cores first). The realistic tests mostly wait on AWS-like delays
# (about half a core between them), so they run beside the fast ones instead of after them: the
# phase takes the longer of the two, not their sum. Five of them at once, not more: with seven
# beside the fast tests' three, the two cores ran at a load of 15-17 and an apply outlasted API
# Gateway's 29 s.
FAST_PORT="${VSA_LOCALCLOUD_PORT:-4566}"
REALISTIC_PORT="$((FAST_PORT + 100))"
UNIT_PORT="$((FAST_PORT + 200))"
on() { local port="$1"; shift; env VSA_LOCALCLOUD_PORT="$port" VSA_LOCALCLOUD_URL="http://127.0.0.1:$port" \
  AWS_ENDPOINT_URL="http://127.0.0.1:$port" "$@"; }
started=()
# A cloud with a run's state behind it could take 30 s and more to exit after its services had
# stopped (py-spy 8 s after SIGTERM: the main thread alone, busy, with no Python frame: the
# interpreter's own teardown). It persists nothing, so the command gives it 5 s before it is
# killed; its Lambda runtimes, Run Command scripts and fence watches are ended by their PID
# files either way.
stop_clouds() { # side by side
  local stopping=() pid
  for port in "${started[@]}"; do on "$port" env VSA_LOCALCLOUD_STOP_SECONDS=5 tools/localcloud.sh stop & stopping+=("$!"); done
  for pid in "${stopping[@]}"; do wait "$pid"; done
  started=()
}
trap 'stop_dataplane; stop_clouds' EXIT
start_clouds() { # port...: started side by side, each unless one already runs on its port
  local starting=() port pid failed=0
  for port in "$@"; do
    if ! on "$port" tools/localcloud.sh status >/dev/null 2>&1; then
      on "$port" tools/localcloud.sh start & starting+=("$!")
      started+=("$port")
    fi
  done
  for pid in "${starting[@]}"; do wait "$pid" || failed=1; done
  return $failed
}
show_log() {
  for port in "$UNIT_PORT" "$FAST_PORT" "$REALISTIC_PORT"; do
    echo; echo "=== local cloud log, port $port (tests failed)"
    tail -n 400 "${VSA_STATE:-$ROOT/.localcloud}/run-$port/localstack.log"
  done
}
timings() {
  curl -fsS -X POST "http://127.0.0.1:$1/_localcloud/timings/configure" -d "{\"profile\": \"$2\"}" >/dev/null
}
# Runs put in the background write their output to a log, and log.rc and log.end when they end;
# each is printed whole when the command comes to it.
background_pids=()
# shellcheck disable=SC2317  # called by the EXIT trap
stop_background() { # each run's pytest is the child of a subshell that keeps its status
  local pid
  for pid in "${background_pids[@]}"; do pkill -INT -P "$pid"; wait "$pid"; done
  background_pids=()
}
trap 'stop_dataplane; stop_background; stop_clouds' EXIT
in_background() { # log command...: runs it in the background; log.rc and log.end when it ends
  local log="$1"; shift
  ( "$@" >"$log" 2>&1; echo $? >"$log.rc"; date +%s >"$log.end" ) &
  background_pids+=("$!")
}
ended() { # name log start: prints a background run's output, notes its failures and its time
  local name="$1" log="$2" start="$3"
  echo; echo "=== $name"
  kept "$name" cat "$log" >/dev/null
  cat "$log"
  if [[ "$(cat "$log.rc" 2>/dev/null)" != 0 ]]; then
    status=1
    grep -qE '^(FAILED|ERROR) ' "$log" || echo "[$name] failed without a FAILED or ERROR line: $(tail -n 1 "$log")" >>"$failures"
  fi
  phase "$name" "$(($(cat "$log.end" 2>/dev/null || date +%s) - start))"
  rm -f "$log" "$log.rc" "$log.end"
}
SECONDS=0
if ! start_clouds "$FAST_PORT" "$REALISTIC_PORT" "$UNIT_PORT"; then
  echo; echo "=== what failed"; echo "[start] a local cloud did not start (ports $FAST_PORT, $REALISTIC_PORT, $UNIT_PORT)"
  exit 1
fi
phase "local clouds started (three, side by side)" "$SECONDS"

# Tests run side by side (pytest-xdist) where they do not share state: with --dist loadgroup,
# tests/conftest.py keeps each group on one worker (the local-cloud fidelity tests switch its
# global controls, the documents tests take loop devices and time freezes); everything else
# spreads over the workers. The integration tests each make their own arrays, volumes and
# hosts.

step "the real template built once (sam build); deployed to the first and second local clouds in the background, the minutes tests starting on the second"
SECONDS=0
if ! sam build --config-env local >/dev/null; then
  echo; echo "=== what failed"; echo "[build] sam build --config-env local"
  exit 1
fi
phase "build (sam build)" "$SECONDS"
# Each deploy's output is kept. A deploy that fails is shown (its last lines) and tried once more:
# the cause of a one-off failure of the local cloud's CloudFormation is then on record at the end
# of the output (all CI shows) even when the run passes, and a second failure stops the command.
deploy_logs="$(mktemp -d)"
notices="$(mktemp)"
deploy() { # name port [REGION=...]: tools/deploy-local.sh to that cloud, its output kept under name
  local name="$1" port="$2"; shift 2
  on "$port" env "$@" bash tools/deploy-local.sh >"$deploy_logs/$name" 2>&1 && return 0
  { echo "tools/deploy-local.sh ($name: port $port $*) failed once, then was tried again; its last lines:"
    tail -n 40 "$deploy_logs/$name"; echo; } >>"$notices"
  on "$port" env "$@" bash tools/deploy-local.sh >"$deploy_logs/$name.retry" 2>&1
}
# The tests marked minutes wait on CloudWatch's own minute-by-minute cadence (alarms evaluated
# every minute, cooldowns): a quarter of an hour of mostly waiting, little CPU. They start as soon
# as the second cloud has the stack, in a process of their own at nice 10, beside the unit phase
# and the data-plane tier, and run on into the integration phase; that cloud stays up until they
# end. Their output is kept apart and printed whole when they end. The deploy's outcome is a file:
# realistic.ok, or failed naming the cloud.
long_log="$(mktemp)"
(
  deploy realistic "$REALISTIC_PORT" || { echo "realistic:port $REALISTIC_PORT, us-east-1" >"$deploy_logs/failed"; exit 1; }
  timings "$REALISTIC_PORT" realistic
  touch "$deploy_logs/realistic.ok"
  on "$REALISTIC_PORT" env VSA_STACK_DEPLOYED=1 VSA_TIMINGS_PROFILE=realistic nice -n 10 "$VENV/python" -m pytest \
    -m "realistic and minutes" --junitxml="$reports/integration-minutes.xml" --durations=5 tests/integration >"$long_log" 2>&1
) &
long_pid=$!
# the same build deployed to the first cloud, and in a second Region of it: the disaster-recovery
# stack that restores the backup sets copied there (tests/integration/test_copies.py)
SECONDS=0
deploy fast "$FAST_PORT" & fast_deploy=$!
deploy dr "$FAST_PORT" REGION=us-west-2 & dr_deploy=$!
step "tests, in the background: unit + infra (no network); local-cloud fidelity; host documents (real XFS on loop devices, as root; SSM documents on sandbox nodes); workflows (the deployed ASL, tasks mocked) - on the third local cloud (port $UNIT_PORT)"
unit_log="$(mktemp)"
unit_start="$(date +%s)"
in_background "$unit_log" on "$UNIT_PORT" nice -n 10 "$VENV/python" -m pytest -n 3 --dist loadgroup --durations=10 \
  --junitxml="$reports/unit-infra-localcloud.xml" tests/unit tests/infra tests/localcloud tests/documents tests/workflows
failed_deploys=()
wait "$fast_deploy" || failed_deploys+=("fast:port $FAST_PORT, us-east-1")
wait "$dr_deploy" || failed_deploys+=("dr:port $FAST_PORT, us-west-2")
# the second cloud's deploy (in the minutes tests' background job) has ended one way or the other
while [[ ! -e "$deploy_logs/realistic.ok" && ! -e "$deploy_logs/failed" ]] && kill -0 "$long_pid" 2>/dev/null; do
  sleep 1
done
[[ -e "$deploy_logs/realistic.ok" ]] || failed_deploys+=("realistic:port $REALISTIC_PORT, us-east-1")
phase "deploy (three stacks on two clouds, side by side)" "$SECONDS"
if [[ ${#failed_deploys[@]} -ne 0 ]]; then
  stop_dataplane; dataplane_pid=""; rm -f "$dataplane_log"
  show_log
  cat "$notices"
  for failed in "${failed_deploys[@]}"; do
    echo; echo "=== tools/deploy-local.sh (${failed#*:}), tried again: its last lines"
    tail -n 40 "$deploy_logs/${failed%%:*}.retry"
  done
  echo; echo "=== what failed"
  for failed in "${failed_deploys[@]}"; do
    echo "[build + deploy] tools/deploy-local.sh on the local cloud at ${failed#*:}, twice"
  done
  exit 1
fi
rm -rf "$deploy_logs"
export VSA_STACK_DEPLOYED=1
timings "$FAST_PORT" fast

# The integration tests start when the tier has ended, never beside it. Both hold real-time
# limits that a starved core breaks: the guests' 2 s NVMe keep-alive and boot deadlines, and API
# Gateway's 29 s integration timeout, which an apply's Lambda outlasted when the tier's guests
# took the cores. Side by side the command ended about 120 s sooner on a quiet machine,
# and on a busy one both sides failed on time (docs/measurements.md). The unit phase, which
# waits on no clock of its own and runs at nice 10, is what runs beside both.
step "integration waits for the data plane (QEMU) to end"
wait "$dataplane_pid" || status=1
dataplane_pid=""
phase "data plane (QEMU), from the start" "$(($(date +%s) - dataplane_start))"
echo; echo "=== data plane (started first)"
kept "data plane" cat "$dataplane_log" >/dev/null
cat "$dataplane_log"
rm -f "$dataplane_log"
# The fast profile's tests on the first cloud, the realistic profile's on the second.
step "integration, side by side: the fast latency profile (port $FAST_PORT) and the realistic one (AWS-like waits, port $REALISTIC_PORT)"
integration_start="$(date +%s)"
realistic_log="$(mktemp)"
fast_log="$(mktemp)"
# --maxschedchunk 1: pytest-xdist's load scheduling otherwise deals the first quarter of each
# worker's share out as one block, so with the tests sorted longest first (tests/integration/
# conftest.py) one worker got the nine longest and the phase lasted as long as they did.
in_background "$realistic_log" on "$REALISTIC_PORT" env VSA_TIMINGS_PROFILE=realistic "$VENV/python" -m pytest -n 5 \
  --maxschedchunk 1 -m "realistic and not minutes" --junitxml="$reports/integration-realistic.xml" --durations=10 \
  tests/integration
in_background "$fast_log" on "$FAST_PORT" "$VENV/python" -m pytest -n 3 --maxschedchunk 1 -m "not realistic" \
  --durations=10 --junitxml="$reports/integration-fast.xml" tests/integration
for pid in "${background_pids[@]}"; do wait "$pid"; done
background_pids=()
ended "unit, infra, local cloud, documents, workflows (nice 10), from its start" "$unit_log" "$unit_start"
ended "integration, fast profile" "$fast_log" "$integration_start"
ended "integration, realistic profile (beside it)" "$realistic_log" "$integration_start"
if [[ $status -ne 0 ]]; then show_log; fi

step "integration (minutes of CloudWatch's cadence; started beside the unit phase)"
SECONDS=0
wait "$long_pid" || status=1
kept "integration, minutes" cat "$long_log" >/dev/null
cat "$long_log"
rm -f "$long_log"
phase "what was left of the minutes tests" "$SECONDS"
if [[ $status -ne 0 ]]; then show_log; fi
timings "$FAST_PORT" fast
stop_clouds
step "the slowest 15 tests (setup + call + teardown)"
"$VENV/python" tools/slowest_tests.py --top 15 "$reports"/*.xml
rm -rf "$ROOT/.test-reports" && mv "$reports" "$ROOT/.test-reports" # the last run's JUnit reports
echo "(every test's time: .test-reports/; the integration runs' order: tools/slowest_tests.py --durations)"
step "times"
printf '%s\n' "${phase_times[@]}"
printf '%-48s %5d s\n' "the test command (after the install)" "$(($(date +%s) - TOTAL_START))"
if [[ -s "$notices" ]]; then step "notices (passed on a second try)"; cat "$notices"; fi
rm -f "$notices"
what_failed
exit $status
