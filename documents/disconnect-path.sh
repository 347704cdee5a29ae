#!/usr/bin/env bash
# disconnect-path (host): remove this host's path to the controller at ADDRESS:PORT for every
# subsystem of the array, by controller device (`nvme disconnect -d nvmeX`): `nvme disconnect
# -n <nqn>` would drop the paths to every controller.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES ADDRESS
# PORT ALLOW_LAST_PATH NVME_COMMAND.
DOCUMENT=disconnect-path
# vsa:include lib/common.sh
# vsa:include lib/host-paths.sh

IFS=, read -r -a VOLS <<<"$VOLUMES"
NQNS=()
for volume in "${VOLS[@]}"; do NQNS+=("$(subsystem_nqn "$ARRAY_ID" "$volume")"); done
in_array() { local n; for n in "${NQNS[@]}"; do [[ $n == "$1" ]] && return 0; done; return 1; }

declare -A DEVICES=() OTHERS_LIVE=()
scan() { # DEVICES[dev]=nqn of each path to ADDRESS:PORT; OTHERS_LIVE[nqn]: live paths elsewhere
  local nqn dev state addr port
  DEVICES=()
  OTHERS_LIVE=()
  list_paths
  while IFS=$'\x1f' read -r nqn dev state addr port _; do
    if [[ -z $nqn ]] || ! in_array "$nqn"; then continue; fi
    if [[ $addr == "$ADDRESS" && $port == "$PORT" ]]; then
      DEVICES[$dev]=$nqn
    elif [[ $state == live ]]; then
      OTHERS_LIVE[$nqn]=$((${OTHERS_LIVE[$nqn]:-0} + 1))
    fi
  done <<<"$LISTING"
}

scan
LAST=()
for dev in "${!DEVICES[@]}"; do
  nqn=${DEVICES[$dev]}
  ((${OTHERS_LIVE[$nqn]:-0} > 0)) || LAST+=("$nqn")
done
if ((${#LAST[@]} > 0)) && [[ $ALLOW_LAST_PATH != true ]]; then
  fail "disconnecting $ADDRESS:$PORT would leave no live path to ${LAST[*]}; nothing was disconnected (AllowLastPath=true disconnects anyway)"
fi

DISCONNECTED=""
for dev in "${!DEVICES[@]}"; do
  nqn=${DEVICES[$dev]}
  if ! output=$("$NVME_COMMAND" disconnect -d "$dev" 2>&1); then
    scan # gone meanwhile (a reconnect that gave up, a concurrent disconnect) is what we wanted
    [[ -z ${DEVICES[$dev]:-} ]] || fail "nvme disconnect -d $dev ($nqn via $ADDRESS:$PORT) failed: $output"
  fi
  log "disconnected $dev ($nqn via $ADDRESS:$PORT)"
  DISCONNECTED+=${DISCONNECTED:+,}$(printf '{"nqn":%s,"device":%s}' "$(json "$nqn")" "$(json "$dev")")
done

list_paths
paths_report "$LISTING" "${NQNS[@]}"
printf '{"document":"%s","arrayId":%s,"address":%s,"port":%s,"disconnected":[%s],"subsystems":[%s],"livePaths":%s,"observedAt":%s}\n' \
  "$DOCUMENT" "$(json "$ARRAY_ID")" "$(json "$ADDRESS")" "$(json "$PORT")" "$DISCONNECTED" \
  "$SUBSYSTEMS_JSON" "$LIVE_TOTAL" "$(json "$LISTED_AT")"
