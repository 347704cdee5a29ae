#!/usr/bin/env bash
# report-exports (controller): what nvmet exports for the array, read only (configfs), as the
# `exports` of configure-target's report. The health check's fresh view of the controllers
# between configure-target runs.
#
# `authentication`: {"method":"observed","keyedHosts":[...]}, the hosts allowed on the array's
# subsystems whose nvmet entry holds a DH-HMAC-CHAP key (hosts/<nqn>/dhchap_key not empty),
# read from configfs now: the drift check's view of the keys without reading configure-target's
# last report. A key is read into a shell variable only to tell that it is there; never shown.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID CONFIGFS_ROOT.
DOCUMENT=report-exports
# vsa:include lib/common.sh
NVMET=$(absolute "$CONFIGFS_ROOT")/nvmet
# vsa:include lib/target-exports.sh

keyed_hosts_json() { # KEYED_JSON: the array's allowed hosts with a key in nvmet (never the key)
  local link nqn key seen=" "
  KEYED_JSON=""
  for link in "$NVMET"/subsystems/"$PREFIX"*/allowed_hosts/*; do
    nqn=${link##*/}
    [[ $seen == *" $nqn "* ]] && continue
    seen+="$nqn "
    key=$(read_attr "$NVMET/hosts/$nqn/dhchap_key")
    [[ -n $key ]] && KEYED_JSON+=${KEYED_JSON:+,}$(json "$nqn")
    key=""
  done
}

PREFIX=$(subsystem_prefix "$ARRAY_ID")
exports_json
keyed_hosts_json
printf '{"document":"%s","arrayId":%s,"exports":[%s],"observedAt":%s,"authentication":{"method":"observed","keyedHosts":[%s]}}\n' \
  "$DOCUMENT" "$(json "$ARRAY_ID")" "$EXPORTS_JSON" "$(json "$EXPORTS_AT")" "$KEYED_JSON"
