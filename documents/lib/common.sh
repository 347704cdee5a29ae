#!/usr/bin/env bash
# Shared by every document: tools/documents.py puts this file where a script has the line
# "# vsa:include lib/common.sh". The including script sets DOCUMENT first.
#
# The derived names below are exactly those of layers/core/vsa_core/nvme.py (its docstring says
# why each is what it is); tests/documents/test_scripts_local.py compares the two.
set -euo pipefail
shopt -s nullglob
export LC_ALL=C

NQN_AUTHORITY=nqn.2025-01.org.vsa-control-plane
UUID_NQN_PREFIX=nqn.2014-08.org.nvmexpress:uuid:
CNTLID_PER_SLOT=4000
EBS_DEVICE_PREFIX=nvme-Amazon_Elastic_Block_Store_

json() { # a JSON string
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}
log() { printf '%s: %s\n' "$DOCUMENT" "$*" >&2; }
fail() { # the reason on stderr, and as the JSON report (last stdout line); exit 1
  printf '%s: error: %s\n' "$DOCUMENT" "$*" >&2
  printf '{"document":"%s","arrayId":%s,"error":%s}\n' "$DOCUMENT" "$(json "${ARRAY_ID:-}")" "$(json "$*")"
  exit 1
}

digest16() { printf 'vsa:%s:%s' "$1" "$2" | sha256sum | cut -c1-32; }
uuid8() { # RFC 9562 version 8 (custom: SHA-256 name-based), variant 10
  local h b6 b8
  h=$(digest16 "$1" "$2")
  b6=$(printf '%02x' $(((16#${h:12:2} & 0x0f) | 0x80)))
  b8=$(printf '%02x' $(((16#${h:16:2} & 0x3f) | 0x80)))
  h=${h:0:12}$b6${h:14:2}$b8${h:18:14}
  printf '%s-%s-%s-%s-%s' "${h:0:8}" "${h:8:4}" "${h:12:4}" "${h:16:4}" "${h:20:12}"
}
namespace_uuid() { uuid8 namespace-uuid "$1"; }
namespace_nguid() {
  local h
  h=$(digest16 namespace-nguid "$1")
  printf '%s-%s-%s-%s-%s' "${h:0:8}" "${h:8:4}" "${h:12:4}" "${h:16:4}" "${h:20:12}"
}
subsystem_prefix() { printf '%s:array:%s:' "$NQN_AUTHORITY" "$1"; }
subsystem_nqn() { printf '%s%s' "$(subsystem_prefix "$1")" "$2"; }
serial() { printf 'vsa%s' "$(printf 'vsa:serial:%s' "$1" | sha256sum | cut -c1-17)"; }
model() { printf 'VSA %s' "$1"; }
cntlid_min() { printf '%s' $(($1 * CNTLID_PER_SLOT + 1)); }
cntlid_max() { printf '%s' $(($1 * CNTLID_PER_SLOT + CNTLID_PER_SLOT)); }
port_id() { printf '%s' "$1"; } # one nvmet port per listening TCP port
device_name() { printf '%s%s' "$EBS_DEVICE_PREFIX" "${1/-/}"; }
default_host_nqn() { printf '%s%s' "$UUID_NQN_PREFIX" "$(uuid8 host "$1")"; }
host_id() { # the uuid of a uuid-form host NQN; nothing for another form
  local id=${1#"$UUID_NQN_PREFIX"}
  if [[ $1 == "$UUID_NQN_PREFIX"* && $id =~ ^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$ ]]; then
    printf '%s' "$id"
  fi
}
utc_now() { # now, as AWS writes a time (UTC, microseconds): a report's "observedAt"
  date -u +%Y-%m-%dT%H:%M:%S.%6NZ
}
absolute() { case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }
