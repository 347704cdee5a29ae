#!/usr/bin/env bash
# connect-path (host): one NVMe/TCP path to the controller at ADDRESS:PORT for every subsystem
# of the array; native multipath merges it with the paths to the other controllers.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES ADDRESS
# PORT HOST_NQN CTRL_LOSS_TMO RECONNECT_DELAY IO_POLICY SYSFS_ROOT WAIT_SECONDS NVME_COMMAND.
# `nvme connect` to a path that exists (even one still reconnecting) exits 1 "already
# connected", so the host's paths are read first and only missing ones are connected.
# Native multipath's default IO policy (nvme_core.iopolicy=numa) sends every IO of a NUMA node
# down the first optimized path: with active/active controllers, one controller would serve a
# host alone, whatever the array's size (seen on a real kernel: tests/dataplane). So each
# subsystem's policy (/sys/class/nvme-subsystem/nvme-subsysN/iopolicy, per subsystem, kept
# while the subsystem has a path) is set to IO_POLICY, round-robin by default.
DOCUMENT=connect-path
# vsa:include lib/common.sh
# vsa:include lib/host-paths.sh

if ((CTRL_LOSS_TMO >= 0 && RECONNECT_DELAY > CTRL_LOSS_TMO)); then
  fail "ReconnectDelay ($RECONNECT_DELAY s) is longer than CtrlLossTmo ($CTRL_LOSS_TMO s)"
fi
((${#HOST_NQN} <= 223)) || fail "HostNqn is longer than 223 bytes"
IFS=, read -r -a VOLS <<<"$VOLUMES"
NQNS=()
for volume in "${VOLS[@]}"; do NQNS+=("$(subsystem_nqn "$ARRAY_ID" "$volume")"); done
HOST_ID=$(host_id "$HOST_NQN")
SYSFS=$(absolute "$SYSFS_ROOT")

declare -A PRESENT=() LIVE=()
scan() { # PRESENT[nqn]: a path of this host NQN to ADDRESS:PORT exists; LIVE[nqn]: it is live
  local nqn dev state addr port host
  PRESENT=()
  LIVE=()
  list_paths
  while IFS=$'\x1f' read -r nqn dev state addr port host _; do
    [[ -n $nqn && $addr == "$ADDRESS" && $port == "$PORT" ]] || continue
    [[ -z $host || $host == "$HOST_NQN" ]] || continue
    PRESENT[$nqn]=$dev
    if [[ $state == live ]]; then LIVE[$nqn]=$dev; fi
  done <<<"$LISTING"
}

scan
CONNECTED=()
ERRORS=()
for nqn in "${NQNS[@]}"; do
  [[ -z ${PRESENT[$nqn]:-} ]] || continue
  args=(connect -t tcp -a "$ADDRESS" -s "$PORT" -n "$nqn" --hostnqn "$HOST_NQN"
    --ctrl-loss-tmo "$CTRL_LOSS_TMO" --reconnect-delay "$RECONNECT_DELAY")
  [[ -z $HOST_ID ]] || args+=(--hostid "$HOST_ID")
  if output=$("$NVME_COMMAND" "${args[@]}" 2>&1); then
    CONNECTED+=("$nqn")
    log "connected $nqn via $ADDRESS:$PORT"
  else
    ERRORS+=("$nqn: ${output//$'\n'/ }")
    log "nvme connect $nqn via $ADDRESS:$PORT failed: $output"
  fi
done

# every subsystem must show a live path to ADDRESS (bounded: WAIT_SECONDS)
deadline=$((SECONDS + WAIT_SECONDS))
while :; do
  scan
  MISSING=()
  for nqn in "${NQNS[@]}"; do [[ -n ${LIVE[$nqn]:-} ]] || MISSING+=("$nqn"); done
  ((${#MISSING[@]} == 0 || SECONDS >= deadline)) && break
  sleep 1
done

set_io_policy() { # the subsystem's multipath IO policy, written only when it differs
  local nqn=$1 dir current
  for dir in "$SYSFS"/class/nvme-subsystem/*; do
    [[ "$(cat "$dir/subsysnqn" 2>/dev/null)" == "$nqn" ]] || continue
    current=$(cat "$dir/iopolicy" 2>/dev/null) || return 1
    [[ $current == "$IO_POLICY" ]] && return 0
    printf '%s\n' "$IO_POLICY" >"$dir/iopolicy" 2>/dev/null || return 1
    log "set the IO policy of $nqn (${dir##*/}) to $IO_POLICY (was $current)"
    return 0
  done
  return 1
}
POLICY_FAILED=()
for nqn in "${NQNS[@]}"; do
  [[ -n ${LIVE[$nqn]:-} ]] || continue
  set_io_policy "$nqn" || POLICY_FAILED+=("$nqn")
done

list_paths # again: the IO policies as set above
paths_report "$LISTING" "${NQNS[@]}"
connected=""
for nqn in "${CONNECTED[@]}"; do connected+=${connected:+,}$(json "$nqn"); done
missing=""
for nqn in "${MISSING[@]}"; do missing+=${missing:+,}$(json "$nqn"); done
error=null
message=""
if ((${#MISSING[@]} > 0)); then
  message="no live path to $ADDRESS:$PORT after ${WAIT_SECONDS} s for ${MISSING[*]}"
  ((${#ERRORS[@]} == 0)) || message+="; nvme connect said: ${ERRORS[*]}"
fi
if ((${#POLICY_FAILED[@]} > 0)); then
  message+=${message:+; }"cannot set the IO policy $IO_POLICY in $SYSFS/class/nvme-subsystem for ${POLICY_FAILED[*]}"
fi
if [[ -n $message ]]; then
  printf '%s: error: %s\n' "$DOCUMENT" "$message" >&2
  error=$(json "$message")
fi
printf '{"document":"%s","arrayId":%s,"address":%s,"port":%s,"hostNqn":%s,"connected":[%s],"missing":[%s],"subsystems":[%s],"livePaths":%s,"ioPolicy":%s,"error":%s}\n' \
  "$DOCUMENT" "$(json "$ARRAY_ID")" "$(json "$ADDRESS")" "$(json "$PORT")" "$(json "$HOST_NQN")" \
  "$connected" "$missing" "$SUBSYSTEMS_JSON" "$LIVE_TOTAL" "$(json "$IO_POLICY")" "$error"
((${#MISSING[@]} == 0 && ${#POLICY_FAILED[@]} == 0))
