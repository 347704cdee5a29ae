#!/usr/bin/env bash
# connect-path (host): one NVMe/TCP path to the controller at ADDRESS:PORT for every subsystem
# of the array; native multipath merges it with the paths to the other controllers.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES ADDRESS
# PORT HOST_NQN CTRL_LOSS_TMO RECONNECT_DELAY WAIT_SECONDS NVME_COMMAND.
# `nvme connect` to a path that exists (even one still reconnecting) exits 1 "already
# connected", so the host's paths are read first and only missing ones are connected.
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

declare -A PRESENT=() LIVE=()
scan() { # PRESENT[nqn]: a path of this host NQN to ADDRESS:PORT exists; LIVE[nqn]: it is live
  local nqn dev state addr port host
  PRESENT=()
  LIVE=()
  list_paths
  while IFS=$'\x1f' read -r nqn dev state addr port host; do
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

paths_report "$LISTING" "${NQNS[@]}"
connected=""
for nqn in "${CONNECTED[@]}"; do connected+=${connected:+,}$(json "$nqn"); done
missing=""
for nqn in "${MISSING[@]}"; do missing+=${missing:+,}$(json "$nqn"); done
error=null
if ((${#MISSING[@]} > 0)); then
  message="no live path to $ADDRESS:$PORT after ${WAIT_SECONDS} s for ${MISSING[*]}"
  ((${#ERRORS[@]} == 0)) || message+="; nvme connect said: ${ERRORS[*]}"
  printf '%s: error: %s\n' "$DOCUMENT" "$message" >&2
  error=$(json "$message")
fi
printf '{"document":"%s","arrayId":%s,"address":%s,"port":%s,"hostNqn":%s,"connected":[%s],"missing":[%s],"subsystems":[%s],"livePaths":%s,"error":%s}\n' \
  "$DOCUMENT" "$(json "$ARRAY_ID")" "$(json "$ADDRESS")" "$(json "$PORT")" "$(json "$HOST_NQN")" \
  "$connected" "$missing" "$SUBSYSTEMS_JSON" "$LIVE_TOTAL" "$error"
((${#MISSING[@]} == 0))
