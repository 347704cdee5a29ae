#!/usr/bin/env bash
# Deploy the built stack to the local cloud (make deploy-local, make demo, the integration tests).
# The local cloud's parameters live here, not in samconfig.toml, because two of them are paths of
# this checkout: the sandbox nodes of the local cloud run the real SSM documents, with the
# recording stand-ins for nvme and modprobe (tests/fakes) and configfs / EBS devices inside each
# node's sandbox. Then every running instance is made an SSM managed node (as instances launched
# with an instance profile are on AWS), so the controllers an Auto Scaling group launches can be
# bootstrapped by Run Command.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source tools/env.sh
parameters=(
  LogLevel=DEBUG
  AlarmRearmSeconds=5          # re-arm a held alarm after 5 s instead of 60: tests run in minutes
  ControllerLifecycle=Enabled  # launch/terminate/loss start BootstrapController / DrainController
  # a node that stays offline fails its bootstrap in 60 s, not 300; longer than the realistic
  # latency profile's SSM agent start (30 s after the instance runs: vsa_localcloud/timings.py)
  ControllerRegistrationSeconds=60
  NodeConfigfsRoot=sys/kernel/config  # relative: inside each node's sandbox
  NodeDeviceDir=dev/disk/by-id
  BackupCopyRegions=us-west-2  # the local clouds' disaster-recovery Region (tests/integration/test_copies.py)
  BackupCopyAccounts=222222222222  # the local clouds' second account (tests/integration/test_copies.py)
  NodeDrillMountDir=run/vsa-drill  # drill-check mounts a drill's filesystems inside the node's sandbox
  NodeSysfsRoot=sys  # where connect-path sets the multipath IO policy
  NodeMountsFile=proc/self/mounts  # report-paths reads what is mounted from each volume here
  NodeNvmeConfig=etc/nvme/config.json  # where connect-path keeps the failover settings
  "NodeNvmeCommand=$ROOT/tests/fakes/nvme"
  NodeBootIdFile=proc/sys/kernel/random/boot_id  # each node's own boot id (vsa_localcloud/ssm_nodes.py)
  "NodeModprobeCommand=$ROOT/tests/fakes/modprobe"
  "NodeAwsCommand=$VSA_STATE/node-bin/aws"  # the nodes' AWS CLI, written at start (vsa_localcloud/instance_roles.py)
  # the tests and the demo invoke the health check when they mean it: a scheduled run in the
  # middle of a test would send report-paths and replace the hosts' last reports it reads
  "HealthCheckSchedule=${VSA_HEALTH_CHECK_SCHEDULE:-DISABLED}"
)
# a second deployment beside the first (tests/integration/test_two_deployments.py) adds its own,
# e.g. VSA_DEPLOY_PARAMETERS="DeploymentName=stage ApiGatewayAccountRole=AlreadySet"
read -ra extra <<<"${VSA_DEPLOY_PARAMETERS:-}"
parameters+=("${extra[@]}")
# The Region: REGION, else AWS_REGION or AWS_DEFAULT_REGION, else us-east-1. samconfig.toml's
# `local` names us-east-1, which wins over the environment, so it is passed explicitly. A second
# stack of the product in another Region of the same local cloud (disaster recovery):
# `REGION=us-west-2 bash tools/deploy-local.sh` (the same stack name, its own outputs and its own
# deployment-name claim there). Extra arguments go to sam deploy, e.g. the --template-file of a
# build made elsewhere with sam build --build-dir (the config file is named: sam looks for it
# beside the template otherwise).
region="${REGION:-${AWS_REGION:-${AWS_DEFAULT_REGION:-us-east-1}}}"
# The artifacts bucket is made here rather than by SAM's managed stack (resolve_s3): the test
# command deploys to two Regions of one local cloud at once, and one of the two managed stacks'
# change sets once came back FAILED, which left that stack in CREATE_FAILED and every later
# deploy to the Region refused ("not created by the AWS SAM CLI"). A bucket made idempotently
# has no such state to lose. On AWS (samconfig.toml's default) resolve_s3 stays.
#
# A stack whose creation failed (ROLLBACK_COMPLETE, CREATE_FAILED, ROLLBACK_FAILED) can only be
# deleted, on AWS as here: it is deleted first, so that a second try after a failed first deploy
# creates it afresh instead of being refused.
bucket="vsa-sam-artifacts-$region"
stack=vsa-control-plane
for ((i = 1; i <= $#; i++)); do
  if [[ "${!i}" == --stack-name ]]; then j=$((i + 1)); stack="${!j}"; fi
done
"$ROOT/.venv/bin/python" - "$bucket" "$region" "$stack" <<'PY'
import sys

import boto3

bucket, region, stack = sys.argv[1:]
s3 = boto3.client("s3", region_name=region)
where = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
try:
    s3.create_bucket(Bucket=bucket, **where)
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass  # made by an earlier deploy to this Region
cloudformation = boto3.client("cloudformation", region_name=region)
try:
    status = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
except cloudformation.exceptions.ClientError:
    status = None  # no such stack yet
if status in ("ROLLBACK_COMPLETE", "CREATE_FAILED", "ROLLBACK_FAILED"):
    print(f"stack {stack} is {status} from a failed creation: deleting it first", file=sys.stderr)
    cloudformation.delete_stack(StackName=stack)
    cloudformation.get_waiter("stack_delete_complete").wait(StackName=stack)
PY
sam deploy --config-file "$ROOT/samconfig.toml" --config-env local --region "$region" \
  --s3-bucket "$bucket" \
  --parameter-overrides "${parameters[*]}" "$@"
curl -fsS -X POST "$VSA_LOCALCLOUD_URL/_localcloud/ssm/configure" -d '{"auto_register": true}' >/dev/null
