#!/usr/bin/env bash
# The product's main job on the local cloud (make demo): start the local cloud, build and deploy
# the real template with the SAM CLI, then drive the control plane and narrate what it did.
# The local cloud is left running with the demo's array and its host's filesystem, so the
# commands printed at the end work as shown (the last releases the filesystem:
# tools/demo.py --clean ID); `make localcloud-stop` stops the local cloud. Arguments go to
# tools/demo.py (--help).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source tools/env.sh
# A failed step ends the output saying which step failed, why (its log's last lines) and where
# the whole log is: the last lines are what a newcomer (or CI) sees.
failed() {
  local step="$1" log="${2:-}"
  if [[ -n "$log" && -f "$log" ]]; then tail -n 40 "$log"; fi
  echo
  echo "make demo failed at step $step${log:+ (the whole log: $log)}" >&2
  exit 1
}
echo "==> 1. starting the local cloud (LocalStack as a host process, Lambda code as host processes)"
tools/localcloud.sh start || failed "1, starting the local cloud" "$VSA_STATE/run-${VSA_LOCALCLOUD_PORT:-4566}/localstack.log"
echo "==> 2. sam build (the core layer and the functions, exactly as for AWS)"
t0=$SECONDS
sam build --config-env local >"$VSA_STATE/sam-build.log" 2>&1 || failed "2, sam build" "$VSA_STATE/sam-build.log"
echo "    built in $((SECONDS - t0)) s (log: $VSA_STATE/sam-build.log)"
echo "==> 3. sam deploy to the local cloud (CloudFormation creates the stack)"
t0=$SECONDS
tools/deploy-local.sh >"$VSA_STATE/sam-deploy.log" 2>&1 || failed "3, sam deploy" "$VSA_STATE/sam-deploy.log"
echo "    deployed in $((SECONDS - t0)) s (log: $VSA_STATE/sam-deploy.log)"
# From step 4 on tools/demo.py narrates, and names the step it failed at itself.
exec "$ROOT/.venv/bin/python" tools/demo.py "$@"
