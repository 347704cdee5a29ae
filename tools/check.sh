#!/usr/bin/env bash
# The inner loop (make check; under 3 minutes): ruff, mypy, import-linter (the core's layers),
# then the unit and infra tests (no network) beside the workflow tests (the deployed ASL files,
# tasks mocked) on the local cloud (pytest-xdist). It starts the local cloud when none runs on
# $VSA_LOCALCLOUD_PORT and leaves it running, so the next round skips the start (make
# localcloud-stop stops it). The full gate is make test.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
VENV="$ROOT/.venv/bin"
SECONDS=0
step() { echo; echo "=== $* (at ${SECONDS} s)"; }
step "ruff (lint + format)"
"$VENV/ruff" check . && "$VENV/ruff" format --check . || exit 1
step "mypy"
"$VENV/mypy" layers/core functions cli tools/localcloud/vsa_localcloud || exit 1
"$VENV/mypy" --python-version 3.10 documents/lib || exit 1 # the nodes' python3 (3.9+)
step "import-linter (the core's layers: pyproject.toml's [tool.importlinter])"
"$VENV/lint-imports" || exit 1
step "security gate (checkov, parliament, cloudsplaining against tools/security-baseline.yaml)"
env -u AWS_ENDPOINT_URL "$VENV/python" tools/security_gate.py || exit 1
step "tests: unit + infra (no network) and workflows (the deployed ASL, tasks mocked, on the local cloud), side by side"
tools/localcloud.sh status >/dev/null 2>&1 || tools/localcloud.sh start || exit 1
"$VENV/python" -m pytest -q -n 3 --dist loadgroup tests/unit tests/infra tests/workflows || exit 1
echo; echo "=== make check passed in ${SECONDS} s"
