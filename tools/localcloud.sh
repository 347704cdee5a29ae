#!/usr/bin/env bash
# The local cloud: LocalStack community core as a host process (no Docker engine), with the
# project's plugins (tools/localcloud): Lambda functions run as host processes, DynamoDB by moto.
#
#   tools/localcloud.sh start    start on 127.0.0.1:$VSA_LOCALCLOUD_PORT (default 4566), wait for "Ready."
#   tools/localcloud.sh stop     stop the instance this script started (by its PID)
#   tools/localcloud.sh status   running or not
#   tools/localcloud.sh logs     print its log
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tools/env.sh
source "$ROOT/tools/env.sh"
# One instance per port: its PID file, log and data live under $VSA_STATE/run-<port>/, so
# several local clouds (one per developer task) can run side by side on different ports.
RUN="$VSA_STATE/run-$VSA_LOCALCLOUD_PORT"
mkdir -p "$RUN"
PIDFILE="$RUN/localstack.pid"
LOG="$RUN/localstack.log"

# A process that has exited stays a zombie until its parent reaps it, and kill -0 still succeeds
# on it. The local cloud is detached (its parent is PID 1, which may reap late), so a zombie
# counts as ended: stop() would otherwise wait on, then "kill", a process already gone.
alive() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }" # the state follows the command's name, which may hold spaces
  [[ "${stat%% *}" != Z ]]
}
running() { [[ -f "$PIDFILE" ]] && alive "$(cat "$PIDFILE")"; }

port_free() {
  "$VSA_STATE/venv/bin/python" - "$VSA_LOCALCLOUD_PORT" <<'PY'
import socket, sys
s = socket.socket()
# SO_REUSEADDR as the gateway sets it: TIME-WAIT leftovers of a previous run are not "in use"
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
}

start() {
  if running; then
    echo "local cloud already running (pid $(cat "$PIDFILE")) on $VSA_LOCALCLOUD_URL"
    return 0
  fi
  if ! port_free; then
    # A second LocalStack on a busy port logs CannotListenError, still prints "Ready." and then
    # ignores SIGTERM: never start one. Point VSA_LOCALCLOUD_PORT elsewhere instead.
    echo "error: 127.0.0.1:$VSA_LOCALCLOUD_PORT is in use by another process; set VSA_LOCALCLOUD_PORT to a free port" >&2
    exit 1
  fi
  local data="$RUN/data" java_home=""
  if command -v java >/dev/null 2>&1; then
    java_home="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  fi
  rm -rf "$data" && mkdir -p "$data"/{fs,tmp,cache,config}
  : > "$LOG"
  (
    cd "$data"
    # OVERRIDE_IN_DOCKER=0: these machines have /.dockerenv; without it LocalStack ignores
    #   FILESYSTEM_ROOT and writes into the shared /var/lib/localstack.
    # GATEWAY_SERVER=hypercorn: twisted binds 0.0.0.0 whatever GATEWAY_LISTEN says.
    # TMPDIR: Lambda code is unzipped under tempfile.gettempdir(). XDG_CACHE_HOME: plux's
    #   entry-point cache (fresh each start, so a reinstalled plugin is always seen).
    # CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=0: a resource type without a provider fails the stack
    #   instead of a fake CREATE_COMPLETE (supported types: vsa_localcloud/cfn/catalog.py).
    # VSA_LOCALCLOUD_IAM: enforce (default) | record | off: every role-signed request is authorized
    #   against the role's policies as on AWS (vsa_localcloud/iam_enforcement.py).
    # VSA_JAVA_HOME, VSA_JSONATA_LIBS: the JRE and jars JSONata states run on (tools/install.sh,
    #   vsa_localcloud/jsonata.py); LocalStack would download a Java 21 instead.
    # VSA_LOCALCLOUD_PROFILE: fast (default) | realistic: how long AWS's transitions take
    #   (vsa_localcloud/timings.py); tests switch it at run time through /_localcloud/timings.
    # IN_MEMORY_CLIENT=1: a service's calls to another (Step Functions' tasks, EventBridge's
    #   targets, CloudFormation's resources, Lambda's metrics and logs) go through the gateway's
    #   handler chain in memory (IAM enforcement included: a workflow's role is still the caller),
    #   not over HTTP back into this one process, which spent a socket and a serialization on
    #   each hop. A Lambda invoke: 24-26 ms -> 15-20 ms; what it saves in CPU: docs/measurements.md.
    exec env -i PATH="/usr/local/bin:/usr/bin:/bin" HOME="$data" LANG=C.UTF-8 \
      OVERRIDE_IN_DOCKER=0 \
      GATEWAY_SERVER=hypercorn \
      GATEWAY_LISTEN="127.0.0.1:$VSA_LOCALCLOUD_PORT" \
      LOCALSTACK_HOST="127.0.0.1:$VSA_LOCALCLOUD_PORT" \
      FILESYSTEM_ROOT="$data/fs" TMPDIR="$data/tmp" XDG_CACHE_HOME="$data/cache" CONFIG_DIR="$data/config" \
      DNS_ADDRESS=0 SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 \
      EXTERNAL_SERVICE_PORTS_START=$((VSA_LOCALCLOUD_PORT + 1000)) EXTERNAL_SERVICE_PORTS_END=$((VSA_LOCALCLOUD_PORT + 1050)) \
      LAMBDA_RUNTIME_EXECUTOR=process VSA_LAMBDA_PYTHON="$VSA_STATE/runtime-venv/bin/python" \
      PROVIDER_OVERRIDE_DYNAMODB=moto PROVIDER_OVERRIDE_AUTOSCALING=vsa PROVIDER_OVERRIDE_EC2=vsa \
      PROVIDER_OVERRIDE_CLOUDWATCH=vsa PROVIDER_OVERRIDE_SSM=vsa \
      LAMBDA_RUNTIME_ENVIRONMENT_TIMEOUT=30 \
      SFN_MOCK_CONFIG="$VSA_ROOT/tests/workflows/mock_config.json" \
      CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=0 \
      VSA_LOCALCLOUD_IAM="${VSA_LOCALCLOUD_IAM:-enforce}" \
      VSA_LOCALCLOUD_PROFILE="${VSA_LOCALCLOUD_PROFILE:-fast}" \
      IN_MEMORY_CLIENT=1 \
      VSA_JAVA_HOME="$java_home" VSA_JSONATA_LIBS="$VSA_STATE/jsonata" \
      "$VSA_STATE/venv/bin/python" -m localstack.runtime.main
  ) >>"$LOG" 2>&1 &
  echo $! > "$PIDFILE"
  # a cap, not a wait: it returns at "Ready." (about 20 s; three clouds starting beside the
  # data-plane tier's boots take longer)
  for _ in $(seq 1 1800); do
    if grep -q "^Ready\." "$LOG"; then
      echo "local cloud ready on $VSA_LOCALCLOUD_URL (pid $(cat "$PIDFILE"), log $LOG)"
      return 0
    fi
    if ! running; then
      echo "error: the local cloud exited during start; its log:" >&2
      cat "$LOG" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "error: the local cloud did not print Ready. within 180 s; its log:" >&2
  cat "$LOG" >&2
  stop
  exit 1
}

stop() {
  if ! running; then
    rm -f "$PIDFILE"
    echo "local cloud not running"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  kill -TERM "$pid"
  local stopped=0 grace="${VSA_LOCALCLOUD_STOP_SECONDS:-30}"
  if [[ ! "$grace" =~ ^[0-9]+$ ]]; then
    echo "VSA_LOCALCLOUD_STOP_SECONDS must be a whole number of seconds, not '$grace'" >&2
    grace=30
  fi
  for _ in $(seq 1 "$((grace * 10))"); do
    if ! alive "$pid"; then stopped=1; break; fi
    sleep 0.1
  done
  if [[ $stopped -eq 0 ]]; then
    echo "local cloud did not stop in $grace s; killing pid $pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  # Lambda environments run in their own process groups; end any the executor noted as live
  # (only those: each PID is checked to still be one of our runtime_bootstrap.py processes).
  local pids="$RUN/data/tmp/vsa-lambda-pids"
  if [[ -d "$pids" ]]; then
    for f in "$pids"/*; do
      [[ -e "$f" ]] || continue
      local lp="${f##*/}"
      if grep -q runtime_bootstrap "/proc/$lp/cmdline" 2>/dev/null; then kill -KILL "$lp" 2>/dev/null || true; fi
      rm -f "$f"
    done
  fi
  # Run Command scripts on local managed nodes (vsa_localcloud/ssm_commands.py) likewise: each
  # PID is checked to still be one of our _script.sh runs before its process group is killed.
  local scripts="$RUN/data/tmp/vsa-ssm-pids"
  if [[ -d "$scripts" ]]; then
    for f in "$scripts"/*; do
      [[ -e "$f" ]] || continue
      local sp="${f##*/}"
      if grep -q _script.sh "/proc/$sp/cmdline" 2>/dev/null; then kill -KILL -- "-$sp" 2>/dev/null || true; fi
      rm -f "$f"
    done
  fi
  # configure-target's fence watches (documents/lib/fence-watch.sh) run detached on the nodes for
  # as long as their controller's boot, which a node here outlives: each PID file's process is
  # ended if it still is a fence watch.
  for f in "$RUN"/data/tmp/vsa-configure-target-*.fence-watch.pid; do
    [[ -e "$f" ]] || continue
    local wp
    wp="$(cat "$f" 2>/dev/null)"
    if [[ "$wp" =~ ^[0-9]+$ ]] && grep -q vsa-fence-watch "/proc/$wp/cmdline" 2>/dev/null; then kill -TERM "$wp" 2>/dev/null || true; fi
  done
  echo "local cloud stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then echo "running (pid $(cat "$PIDFILE")) on $VSA_LOCALCLOUD_URL"; else echo "stopped"; exit 3; fi ;;
  logs) cat "$LOG" ;;
  *) echo "usage: $0 start|stop|status|logs" >&2; exit 2 ;;
esac
