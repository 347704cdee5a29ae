#!/usr/bin/env bash
# The test command (make test; .ci/run calls it). Runs, in order: ruff, mypy, sam validate
# --lint, unit + infra tests (no network), then the integration tests against the local cloud,
# which it starts unless one is already running and stops again if it started it, even on
# failure. When a test fails, the local cloud's log is printed. Last, the data-plane tier
# (tests/dataplane: the documents on real kernels in QEMU guests; no local cloud).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
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

step "tests: unit + infra (no network); host documents (real XFS on loop devices, as root); local-cloud fidelity, SSM documents (Run Command on sandbox nodes), workflows (mocked tasks), integration (real template, real Lambda code)"
if ! tools/localcloud.sh status >/dev/null 2>&1; then
  tools/localcloud.sh start || exit 1
  started_here=1
fi
"$VENV/python" -m pytest tests/unit tests/infra tests/localcloud tests/documents tests/workflows tests/integration
status=$?
if [[ $status -ne 0 ]]; then
  echo; echo "=== local cloud log (tests failed)"
  tail -n 400 "${VSA_STATE:-$ROOT/.localcloud}/run-${VSA_LOCALCLOUD_PORT:-4566}/localstack.log"
fi
stop_cloud
started_here=0

step "tests: data plane (the documents on real Linux kernels in QEMU guests: controllers + a host, NVMe/TCP multipath, fio, XFS)"
offline "$VENV/python" -m pytest tests/dataplane || status=1
exit $status
