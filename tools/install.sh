#!/usr/bin/env bash
# Install everything the project needs, idempotently (re-runs only what changed):
#   .venv/                     dev tools: SAM CLI, pytest, ruff, mypy, moto, stubs  (Python 3.13)
#   .localcloud/venv/          LocalStack community core + our plugins (tools/localcloud)
#   .localcloud/runtime-venv/  what the Lambda python3.13 runtime holds (boto3), for Lambda processes
#   .localcloud/security-venv/ the security gate's linters: checkov, parliament, cloudsplaining
#   .dataplane/                the data-plane tier's guest kernel and virtme-ng (tools/dataplane-install.sh)
# Nothing is installed outside the checkout.
set -euo pipefail
# The last line of a failed install names the command that failed and where (make demo and make
# test both begin here; the output above it is that command's own).
trap 'echo "install failed (tools/install.sh line $LINENO): $BASH_COMMAND" >&2' ERR
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# shellcheck source=tools/env.sh
source tools/env.sh

py313() {
  if command -v pyenv >/dev/null 2>&1 && pyenv prefix 3.13.0 >/dev/null 2>&1; then
    echo "$(pyenv prefix 3.13.0)/bin/python"
  elif command -v python3.13 >/dev/null 2>&1; then
    command -v python3.13
  else
    echo "error: Python 3.13 not found (pyenv 3.13.0 or python3.13 on PATH); LocalStack and the Lambda runtime need it" >&2
    exit 1
  fi
}

# uv (PyPI, pinned) installs the venvs: from its cache (~/.cache/uv) it links what pip unpacked and
# compiled again on every install (about 100 s of CPU, a minute of the test command); modules are
# compiled as they are first imported. Installed once with pip, into a venv of its own.
# UV_SYSTEM_CERTS: the machine's CA store, as pip uses it (a registry mirror may sign with its own CA).
UV_VERSION=0.13.8
export UV_SYSTEM_CERTS=1 UV_NO_PROGRESS=1
uv_install() {
  local dir="$VSA_STATE/uv"
  if [[ ! -x "$dir/bin/uv" || "$(cat "$dir/.stamp" 2>/dev/null)" != "$UV_VERSION" ]]; then
    echo "==> installing uv $UV_VERSION"
    rm -rf "$dir"
    "$(py313)" -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
    echo "$UV_VERSION" > "$dir/.stamp"
  fi
}
UV="$VSA_STATE/uv/bin/uv"
export VSA_UV="$UV"

# make_venv DIR STAMP-INPUTS... -- UV-PIP-ARGS...
make_venv() {
  local dir="$1"; shift
  local inputs=()
  while [[ "$1" != "--" ]]; do inputs+=("$1"); shift; done
  shift
  local digest
  digest="$(cat "${inputs[@]}" | sha256sum | cut -c1-16)"
  if [[ -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$digest" ]]; then
    return 0
  fi
  echo "==> installing $dir"
  rm -rf "$dir"
  "$UV" venv --quiet --seed --python "$(py313)" "$dir" # --seed: pip too (the core layer's build runs it)
  "$UV" pip install --quiet --python "$dir/bin/python" "$@"
  echo "$digest" > "$dir/.stamp"
}

mkdir -p "$VSA_STATE"
# One install at a time (several local clouds or test runs may call this concurrently).
exec 9>"$VSA_STATE/.install.lock"
flock 9
uv_install

# --- system packages (only if missing) ---------------------------------------------------------
# tests/documents freezes real XFS filesystems on loop devices: mkfs.xfs (xfsprogs); losetup,
# fsfreeze, findmnt, mount (util-linux). tests/infra and tests/documents lint the rendered host
# scripts with shellcheck. Without root and apt those tests skip and say why (under CI they fail:
# tests/prerequisites.py).
for pkg in xfsprogs util-linux shellcheck; do
  dpkg -s "$pkg" >/dev/null 2>&1 && continue
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing $pkg (apt)"
    apt-get install -y -qq "$pkg" >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq "$pkg" >/dev/null; }
  else
    echo "note: $pkg is not installed and cannot be here (needs root and apt): tests/documents will skip" >&2
  fi
done
# -----------------------------------------------------------------------------------------------

# JSONata states: LocalStack evaluates JSONata in a JVM (JPype) with com.dashjoin:jsonata 0.9.7 and
# jackson 2.16.2; left alone it downloads a Java 21 at first use, which is not reachable offline.
# A JRE >= 11 from the distribution (jsonata 0.9.7 is Java 11 bytecode) and the four jars from
# Maven Central, checked against pinned digests, in $VSA_STATE/jsonata (vsa_localcloud/jsonata.py).
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || (( $(java_major) < 11 )); then
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing openjdk-17-jre-headless (apt; the local cloud's JSONata states)"
    apt-get install -y -qq openjdk-17-jre-headless >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
  else
    echo "note: no Java >= 11 and none installable here (needs root and apt): the local cloud cannot run JSONata states" >&2
  fi
fi
maven=https://repo1.maven.org/maven2
while read -r digest path; do
  jar="$VSA_STATE/jsonata/${path##*/}"
  [[ -f "$jar" ]] && sha256sum --check --status <<<"$digest  $jar" && continue
  echo "==> downloading ${path##*/} (Maven Central)"
  mkdir -p "$VSA_STATE/jsonata"
  curl -sSf --retry 3 -o "$jar.part" "$maven/$path"
  sha256sum --check --status <<<"$digest  $jar.part" || { echo "error: $path: digest mismatch" >&2; exit 1; }
  mv "$jar.part" "$jar"
done <<'JARS'
dc09011dee965e68d858e42a19608932eb8bbdcbe9035ab71c44a5b9d566b1bf com/dashjoin/jsonata/0.9.7/jsonata-0.9.7.jar
4f43e2f1430b2d2413e8e5a3d79138e57e891d6a961b18c28ac90859639d8664 com/fasterxml/jackson/core/jackson-core/2.16.2/jackson-core-2.16.2.jar
d1cdd269ebaa753d1842933194e17d61958f058952d63e03dbfb3d1d78a6926e com/fasterxml/jackson/core/jackson-annotations/2.16.2/jackson-annotations-2.16.2.jar
53b6025d98c357068296e4b134242443a248c2c582800879f1c4ea93b54bafa6 com/fasterxml/jackson/core/jackson-databind/2.16.2/jackson-databind-2.16.2.jar
JARS
# The venvs do not depend on each other: they install side by side, the data plane's in the
# foreground (it may use apt, one at a time), the others as jobs (pip runs on one core at most);
# a job that fails fails the install (each inherits set -e; wait returns its status).
venv_jobs=()
(
  make_venv "$ROOT/.venv" requirements/dev.txt -- -r requirements/dev.txt
  # vsactl simulate runs the core's planner: the dev venv sees layers/core (as the Lambda layer does).
  site="$("$ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$ROOT/layers/core" > "$site/vsa-core.pth"
  # The CLI (vsactl): the checkout's own distribution (pyproject.toml), editable in the dev venv;
  # its dependencies are pinned in requirements/dev.txt. Reinstalled when the venv was rebuilt or
  # the editable install points at another checkout.
  if ! "$ROOT/.venv/bin/python" -c 'import sys, importlib.metadata as m, vsactl
m.distribution("vsa-control-plane"); sys.exit(not vsactl.__file__.startswith(sys.argv[1]))' "$ROOT/cli/" 2>/dev/null; then
    echo "==> installing vsactl (the checkout, editable)"
    "$UV" pip uninstall --quiet --python "$ROOT/.venv/bin/python" vsactl 2>/dev/null || true
    "$UV" pip install --quiet --python "$ROOT/.venv/bin/python" --no-deps --no-build-isolation -e .
  fi
) & venv_jobs+=($!)
(
  make_venv "$VSA_STATE/venv" requirements/localcloud.txt -- -r requirements/localcloud.txt
  # Our plugins: reinstalled (without touching LocalStack) whenever their source changes; restart
  # the local cloud to load the new code. Not editable: plux's setuptools hook breaks editable builds.
  plugin_digest="$(cat "$VSA_STATE/venv/.stamp" tools/localcloud/pyproject.toml \
    $(find tools/localcloud/vsa_localcloud -type f \( -name '*.py' -o -name '*.json' -o -name '*.yaml' \) | sort) | sha256sum | cut -c1-16)"
  if [[ "$(cat "$VSA_STATE/venv/.plugins-stamp" 2>/dev/null)" != "$plugin_digest" ]]; then
    echo "==> installing the local-cloud plugins (tools/localcloud)"
    rm -rf tools/localcloud/build tools/localcloud/*.egg-info
    # --no-cache: uv would reuse its build of the directory while pyproject.toml is unchanged
    "$UV" pip install --quiet --python "$VSA_STATE/venv/bin/python" --no-cache --no-deps --reinstall ./tools/localcloud
    rm -rf tools/localcloud/build tools/localcloud/*.egg-info
    echo "$plugin_digest" > "$VSA_STATE/venv/.plugins-stamp"
  fi
) & venv_jobs+=($!)
(
  make_venv "$VSA_STATE/runtime-venv" requirements/lambda-runtime.txt -- -r requirements/lambda-runtime.txt
  # make security (tools/security_gate.py): its own venv, checkov's pins clash with the SAM CLI's.
  make_venv "$VSA_STATE/security-venv" requirements/security.txt -- -r requirements/security.txt
) & venv_jobs+=($!)
# tests/dataplane: QEMU, nvme-cli, fio (apt, as root), the guest kernel, virtme-ng.
bash tools/dataplane-install.sh "$(py313)"
for job in "${venv_jobs[@]}"; do wait "$job"; done
