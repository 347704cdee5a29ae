#!/usr/bin/env bash
# connect-path (host): one NVMe/TCP path from this host to the controller at ADDRESS:PORT for
# every subsystem of the array; native multipath merges it with the paths to the other controllers.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES ADDRESS
# PORT HOST_NQN KEEP_ALIVE_TMO CTRL_LOSS_TMO RECONNECT_DELAY FAST_IO_FAIL_TMO NVME_CONFIG
# IO_POLICY SYSFS_ROOT WAIT_SECONDS NVME_COMMAND AUTHENTICATION KEYS_SECRET_ID AWS_COMMAND.
#
# Guarantees: the failover settings (and with dh-hmac-chap the keys for ADDRESS) are in nvme-cli's
# JSON config before any connect, so later connects and reboots keep them; only missing paths are
# connected; existing paths converge to the keys without taking a subsystem's last live path
# down; every subsystem ends with a live path to ADDRESS and its IO policy set to IO_POLICY
# within WAIT_SECONDS, else the run fails naming it; no key reaches argv, stdout, stderr or the
# report; a second run changes nothing. The reasons: docs/dataplane.md, "Failover settings",
# "Why round-robin", "Authentication on the data plane" and "Key rotation".
DOCUMENT=connect-path
# vsa:include lib/common.sh
# vsa:include lib/dhchap.sh
# vsa:include lib/host-paths.sh

if ((CTRL_LOSS_TMO >= 0 && RECONNECT_DELAY > CTRL_LOSS_TMO)); then
  fail "ReconnectDelay ($RECONNECT_DELAY s) is longer than CtrlLossTmo ($CTRL_LOSS_TMO s)"
fi
if ((CTRL_LOSS_TMO >= 0 && FAST_IO_FAIL_TMO > CTRL_LOSS_TMO)); then
  fail "FastIoFailTmo ($FAST_IO_FAIL_TMO s) is longer than CtrlLossTmo ($CTRL_LOSS_TMO s)"
fi
if [[ $NVME_CONFIG == none ]] && ((FAST_IO_FAIL_TMO >= 0)); then
  fail "FastIoFailTmo needs NvmeConfig: nvme-cli 2.x takes fast_io_fail_tmo only from its JSON config"
fi
if [[ $AUTHENTICATION == dh-hmac-chap ]]; then
  [[ $KEYS_SECRET_ID != none ]] || fail "Authentication dh-hmac-chap needs KeysSecretId (the secret with the keys)"
  [[ $NVME_CONFIG != none ]] ||
    fail "Authentication dh-hmac-chap needs NvmeConfig: the keys reach nvme connect through it, never on its command line"
fi
((${#HOST_NQN} <= 223)) || fail "HostNqn is longer than 223 bytes"
IFS=, read -r -a VOLS <<<"$VOLUMES"
NQNS=()
for volume in "${VOLS[@]}"; do NQNS+=("$(subsystem_nqn "$ARRAY_ID" "$volume")"); done
HOST_ID=$(host_id "$HOST_NQN")
SYSFS=$(absolute "$SYSFS_ROOT")
CONFIG=none
[[ $NVME_CONFIG == none ]] || CONFIG=$(absolute "$NVME_CONFIG")

# nvme-cli's JSON config: this host's entry, each subsystem's port ADDRESS:PORT (tcp) with the
# failover settings and the keys, everything else kept (documents/lib/nvme_config.py).
# vsa:python NVME_CONFIG_PY lib/nvme_config.py
declare -A KEYS=()
HOST_KEY="" CTRL_KEY="" # the keys for ADDRESS (shell variables only, cleared at the end)
if [[ $AUTHENTICATION == dh-hmac-chap ]]; then
  read_secret "$KEYS_SECRET_ID"
  names=(hostKey controllerKey)
  if secret_has "paths/$ADDRESS"; then names=("paths/$ADDRESS/hostKey" "paths/$ADDRESS/controllerKey"); fi
  secret_keys "$KEYS_SECRET_ID" "${names[@]}"
  HOST_KEY=${KEYS[${names[0]}]} CTRL_KEY=${KEYS[${names[1]}]}
  if [[ ${names[0]} == paths/* ]]; then log "the keys for $ADDRESS: the secret's paths/$ADDRESS"; fi
  unset SECRET
fi
if [[ $CONFIG != none ]]; then
  output=$(printf '%s\n%s\n' "$HOST_KEY" "$CTRL_KEY" |
    python3 -c "$NVME_CONFIG_PY" "$CONFIG" "$HOST_NQN" "$HOST_ID" "$ADDRESS" "$PORT" \
      "$KEEP_ALIVE_TMO" "$CTRL_LOSS_TMO" "$RECONNECT_DELAY" "$FAST_IO_FAIL_TMO" "${NQNS[@]}" 2>&1) ||
    fail "cannot write the failover settings into $CONFIG: $(redact "${output//$'\n'/ }")"
  [[ -z $output ]] || log "$(redact "$output")"
fi
KEYS=()

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

other_live() { # other_live NQN DEVICE: NQN has a live path of this host NQN other than DEVICE
  local nqn dev state host
  while IFS=$'\x1f' read -r nqn dev state _ _ host _; do
    [[ $nqn == "$1" && $dev != "$2" && $state == live ]] || continue
    [[ -z $host || $host == "$HOST_NQN" ]] && return 0
  done <<<"$LISTING"
  return 1
}
# One path at a time leaves this host's live set. ReconcileArray's connect phase runs connect-path
# on a host for every controller at once; two runs that each see the other's path live, then
# both take their own down (a keyless path connected again, both keys rewritten), would leave
# the subsystem no live path. A run that is about to do so holds this host's lock from then to
# its end (its path live again), and reads the paths afresh once it has it; the others go on.
HOST_LOCK=""
hold_host() {
  [[ -z $HOST_LOCK ]] || return 0
  local file="$CONFIG.paths.lock"
  exec {HOST_LOCK}>>"$file" || fail "cannot open $file (the host's lock for taking a path down)"
  flock -w 240 "$HOST_LOCK" || fail "another connect-path held $file for 240 s: try again"
  list_paths # afresh: another run may have taken a path down or brought one back meanwhile
}
write_key() { # write_key DIR FILE KEY: the key into the controller's sysfs FILE (builtins only)
  { printf '%s' "$3" >"$1/$2"; } 2>/dev/null
}

# The keys of the paths that exist converge (each controller's sysfs dhchap_secret and
# dhchap_ctrl_secret show the keys it holds; "none": connected without): one differing key of the
# pair is written in place and the kernel re-authenticates the live connection ("rekeyed"); both
# differing, the path is left as it is ("notRekeyed": a rotation changes one key at a time); a
# path with no key is connected again with the keys while another path of its subsystem is live
# ("reconnected"), else left as it is ("unauthenticated"). docs/dataplane.md, "Key rotation".
scan
REKEYED=()
UNAUTHENTICATED="" NOT_REKEYED=""
KEY_ERRORS=()
declare -A RECONNECTING=()
if [[ $AUTHENTICATION == dh-hmac-chap ]]; then
  for nqn in "${NQNS[@]}"; do
    dev=${PRESENT[$nqn]:-}
    [[ -n $dev ]] || continue
    dir=$SYSFS/class/nvme/$dev
    if [[ ! -r $dir/dhchap_secret || ! -r $dir/dhchap_ctrl_secret ]]; then
      KEY_ERRORS+=("$nqn: $dir shows no dhchap_secret (a kernel without NVMe host authentication?)")
      continue
    fi
    has_host=$(<"$dir/dhchap_secret") has_ctrl=$(<"$dir/dhchap_ctrl_secret")
    [[ $has_host != "$HOST_KEY" || $has_ctrl != "$CTRL_KEY" ]] || continue
    if [[ $has_host == none || $has_ctrl == none ]]; then # no key to replace: connect again
      hold_host
      if ! other_live "$nqn" "$dev"; then
        reason="connected without a key and the only live path of the subsystem: left as it is"
        UNAUTHENTICATED+=${UNAUTHENTICATED:+,}$(printf '{"nqn":%s,"device":%s,"reason":%s}' \
          "$(json "$nqn")" "$(json "$dev")" "$(json "$reason")")
        log "$dev ($nqn) via $ADDRESS:$PORT: $reason"
        continue
      fi
      if output=$("$NVME_COMMAND" disconnect -d "$dev" 2>&1); then
        log "disconnected $dev ($nqn) via $ADDRESS:$PORT, connected without a key, to connect it again with the keys"
        RECONNECTING[$nqn]=1
        unset "PRESENT[$nqn]" "LIVE[$nqn]"
      else
        KEY_ERRORS+=("$nqn: nvme disconnect -d $dev (to connect it again with the keys) said: $(redact "${output//$'\n'/ }")")
      fi
      continue
    fi
    if [[ $has_host != "$HOST_KEY" && $has_ctrl != "$CTRL_KEY" ]]; then
      reason="connected with other keys for both the host and the controller: only one key of a pair is changed in place (a rotation changes one at a time): left as it is"
      NOT_REKEYED+=${NOT_REKEYED:+,}$(printf '{"nqn":%s,"device":%s,"reason":%s}' \
        "$(json "$nqn")" "$(json "$dev")" "$(json "$reason")")
      log "$dev ($nqn) via $ADDRESS:$PORT: $reason"
      continue
    fi
    started=$SECONDS wrote=()
    if [[ $has_host != "$HOST_KEY" ]]; then
      write_key "$dir" dhchap_secret "$HOST_KEY" || {
        KEY_ERRORS+=("$nqn: the kernel refused a new key in $dir/dhchap_secret")
        continue
      }
      wrote+=("a new host key")
    else
      write_key "$dir" dhchap_ctrl_secret "$CTRL_KEY" || {
        KEY_ERRORS+=("$nqn: the kernel refused a new key in $dir/dhchap_ctrl_secret")
        continue
      }
      wrote+=("a new controller key")
    fi
    deadline=$((SECONDS + WAIT_SECONDS))
    until [[ "$(cat "$dir/state" 2>/dev/null)" == live ]] || ((SECONDS >= deadline)); do sleep 0.2; done
    if [[ "$(cat "$dir/state" 2>/dev/null)" != live ]]; then
      KEY_ERRORS+=("$nqn: $dev not live ${WAIT_SECONDS} s after its new keys")
      continue
    fi
    REKEYED+=("$nqn")
    log "rekeyed $dev ($nqn) via $ADDRESS:$PORT in place: wrote ${wrote[*]} (the kernel re-authenticates the live connection), live after $((SECONDS - started)) s"
  done
fi
HOST_KEY="" CTRL_KEY=""

CONNECTED=()
RECONNECTED=()
ERRORS=()
for nqn in "${NQNS[@]}"; do
  [[ -z ${PRESENT[$nqn]:-} ]] || continue
  args=(connect -t tcp -a "$ADDRESS" -s "$PORT" -n "$nqn" --hostnqn "$HOST_NQN"
    --keep-alive-tmo "$KEEP_ALIVE_TMO" --ctrl-loss-tmo "$CTRL_LOSS_TMO"
    --reconnect-delay "$RECONNECT_DELAY" --config "$CONFIG")
  [[ -z $HOST_ID ]] || args+=(--hostid "$HOST_ID")
  if output=$("$NVME_COMMAND" "${args[@]}" 2>&1); then
    if [[ -n ${RECONNECTING[$nqn]:-} ]]; then RECONNECTED+=("$nqn"); else CONNECTED+=("$nqn"); fi
    log "connected $nqn via $ADDRESS:$PORT (authentication: $AUTHENTICATION)"
  else
    output=$(redact "$output") # nvme-cli may echo the option string it wrote, keys included
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
rekeyed=""
for nqn in "${REKEYED[@]}"; do rekeyed+=${rekeyed:+,}$(json "$nqn"); done
reconnected=""
for nqn in "${RECONNECTED[@]}"; do reconnected+=${reconnected:+,}$(json "$nqn"); done
error=null
message=""
if ((${#MISSING[@]} > 0)); then
  message="no live path to $ADDRESS:$PORT after ${WAIT_SECONDS} s for ${MISSING[*]}"
  ((${#ERRORS[@]} == 0)) || message+="; nvme connect said: ${ERRORS[*]}"
fi
if ((${#POLICY_FAILED[@]} > 0)); then
  message+=${message:+; }"cannot set the IO policy $IO_POLICY in $SYSFS/class/nvme-subsystem for ${POLICY_FAILED[*]}"
fi
if ((${#KEY_ERRORS[@]} > 0)); then
  message+=${message:+; }"the keys of the paths to $ADDRESS:$PORT: ${KEY_ERRORS[*]}"
fi
if [[ -n $message ]]; then
  printf '%s: error: %s\n' "$DOCUMENT" "$message" >&2
  error=$(json "$message")
fi
failover=$(printf '{"keepAliveTmo":%s,"ctrlLossTmo":%s,"reconnectDelay":%s,"fastIoFailTmo":%s,"config":%s}' \
  "$KEEP_ALIVE_TMO" "$CTRL_LOSS_TMO" "$RECONNECT_DELAY" "$FAST_IO_FAIL_TMO" "$(json "$CONFIG")")
printf '{"document":"%s","arrayId":%s,"address":%s,"port":%s,"hostNqn":%s,"connected":[%s],"missing":[%s],"subsystems":[%s],"livePaths":%s,"observedAt":%s,"ioPolicy":%s,"failover":%s,"authentication":%s,"rekeyed":[%s],"reconnected":[%s],"unauthenticated":[%s],"notRekeyed":[%s],"error":%s}\n' \
  "$DOCUMENT" "$(json "$ARRAY_ID")" "$(json "$ADDRESS")" "$(json "$PORT")" "$(json "$HOST_NQN")" \
  "$connected" "$missing" "$SUBSYSTEMS_JSON" "$LIVE_TOTAL" "$(json "$LISTED_AT")" "$(json "$IO_POLICY")" "$failover" \
  "$(json "$AUTHENTICATION")" "$rekeyed" "$reconnected" "$UNAUTHENTICATED" "$NOT_REKEYED" "$error"
((${#MISSING[@]} == 0 && ${#POLICY_FAILED[@]} == 0 && ${#KEY_ERRORS[@]} == 0))
