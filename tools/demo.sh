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
echo "==> 1. starting the local cloud (LocalStack as a host process, Lambda code as host processes)"
tools/localcloud.sh start
echo "==> 2. sam build (the core layer and the functions, exactly as for AWS)"
t0=$SECONDS
sam build --config-env local >"$VSA_STATE/sam-build.log" 2>&1 || { cat "$VSA_STATE/sam-build.log"; exit 1; }
echo "    built in $((SECONDS - t0)) s (log: $VSA_STATE/sam-build.log)"
echo "==> 3. sam deploy to the local cloud (CloudFormation creates the stack)"
t0=$SECONDS
tools/deploy-local.sh >"$VSA_STATE/sam-deploy.log" 2>&1 || { cat "$VSA_STATE/sam-deploy.log"; exit 1; }
echo "    deployed in $((SECONDS - t0)) s (log: $VSA_STATE/sam-deploy.log)"
exec "$ROOT/.venv/bin/python" tools/demo.py "$@"
