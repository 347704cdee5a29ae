#!/usr/bin/env bash
# connect-path (host): one NVMe/TCP path to the controller at ADDRESS:PORT for every subsystem
# of the array; native multipath merges it with the paths to the other controllers.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES ADDRESS
# PORT HOST_NQN KEEP_ALIVE_TMO CTRL_LOSS_TMO RECONNECT_DELAY FAST_IO_FAIL_TMO NVME_CONFIG
# IO_POLICY SYSFS_ROOT WAIT_SECONDS NVME_COMMAND AUTHENTICATION KEYS_SECRET_ID AWS_COMMAND.
# The failover settings (keep-alive timeout, ctrl-loss-tmo, reconnect delay, fast_io_fail_tmo;
# docs/dataplane.md "Failover settings") are written first into nvme-cli's JSON config (NVME_CONFIG,
# /etc/nvme/config.json: libnvme's hosts -> subsystems -> ports), merged with what is there, so
# they outlive this run and a host reboot: every later `nvme connect` to this address and
# subsystem, ours or an operator's, takes them from it (nvme-cli 2.3 takes keep_alive_tmo,
# reconnect_delay and fast_io_fail_tmo from it, and has no command-line option for the last).
# `nvme connect` is then given -k, -l and -c explicitly as well (nvme-cli 2.3 does not take
# ctrl_loss_tmo from the config: seen on a real kernel, tools/bench_failover.py).
# `nvme connect` to a path that exists (even one still reconnecting) exits 1 "already
# connected", so the host's paths are read first and only missing ones are connected.
# Native multipath's default IO policy (nvme_core.iopolicy=numa) sends every IO of a NUMA node
# down the first optimized path: with active/active controllers, one controller would serve a
# host alone, whatever the array's size (seen on a real kernel: tests/dataplane). So each
# subsystem's policy (/sys/class/nvme-subsystem/nvme-subsysN/iopolicy, per subsystem, kept
# while the subsystem has a path) is set to IO_POLICY, round-robin by default.
# DH-HMAC-CHAP (AUTHENTICATION=dh-hmac-chap): the host's key and the controller key, read on the
# instance from the secret KEYS_SECRET_ID, go into the same JSON config, on each of the array's
# ports at ADDRESS:PORT as "dhchap_key" (the host's: nvme-cli passes it to the kernel as
# dhchap_secret) and "dhchap_ctrl_key" (the controller's: dhchap_ctrl_secret, so the host
# authenticates the controller too). nvme-cli 2.3 / libnvme 1.3 reads both from there for a
# plain `nvme connect --config` (seen: the option string it writes to /dev/nvme-fabrics), so no
# key is ever on a command line (/proc/<pid>/cmdline is world-readable); the file is then made
# root-only (0600). A "dhchap_key" on the host entry itself (an operator's) would win over the
# port's in libnvme 1.3: connect-path warns about one. With AUTHENTICATION=none the array's
# ports lose any key (a connect without authentication is what was asked).
# Per-address keys (a rotation, controller by controller: issue #20): when the host's secret has
# "paths": {"<ADDRESS>": {"hostKey", "controllerKey"}}, those are the keys for ADDRESS, else the
# top-level ones.
# The keys of paths that exist converge (AUTHENTICATION=dh-hmac-chap): each of the array's
# controllers at ADDRESS:PORT shows the keys it connected with in
# <SYSFS_ROOT>/class/nvme/nvmeX/dhchap_secret and dhchap_ctrl_secret ("none": connected without).
# Linux drivers/nvme/host/sysfs.c (nvme_ctrl_dhchap_secret_store, _ctrl_secret_store; read in
# torvalds/linux, the same since 6.x): a write refuses with EINVAL a controller that connected
# without that secret, or text not starting "DHHC-1:"; it stores the bytes written as they are
# (so no newline), then queues dhchap_auth_work, which re-authenticates the live connection's
# queues (drivers/nvme/host/auth.c nvme_ctrl_auth_work: "Failure is a soft-state; credentials
# remain valid until the controller terminates the connection"; but see below), and the
# controller's next reconnect uses the new key. So:
# * the keys already the wanted ones: nothing;
# * connected with keys, one of the two others wanted: that key is written (printf, a bash
#   builtin, into the sysfs file: never an argv) and the kernel re-authenticates the live
#   connection; the controller must then be live within WAIT_SECONDS. Reported in "rekeyed".
# * connected with keys, both others wanted: left as it is, in "notRekeyed" ({nqn, device,
#   reason}), whatever other path is live. The control plane's rotation changes one key of a
#   pair per step (the hosts' keys, then the controller key: keys.rekey_step), so both differ
#   only when a host missed a step. Seen on 6.12 against nvmet (tests/dataplane/
#   test_authentication.py): the re-authentication the first write starts (one key new, one
#   old) fails ("controller authentication failed"), and that is not soft there: nvmet ends a
#   controller whose authentication ends in failure (drivers/nvme/target/fabrics-cmd-auth.c
#   nvmet_execute_auth_send: FAILURE2 -> nvmet_ctrl_fatal_error), so the host resets the path;
#   and the second write, into a path being reset, blocked the writer in the kernel
#   (dhchap_ctrl_secret_store, a hung task past 120 s) in one run of three. Nor through nvme
#   disconnect + nvme connect: nvme-cli 2.3 / libnvme 1.3 then sends the host key of another
#   live path of the same host NQN (read from its sysfs dhchap_secret) instead of the port's in
#   the config (seen: its -vvv option string carried the old host key with the new controller
#   key; nvmet "host response mismatch"), so a new path's host key is another path's while one
#   is connected with another host key. Once the controller no longer accepts the path's keys,
#   its next reconnect fails, the kernel gives it up after CTRL_LOSS_TMO, and the next
#   connect-path connects it afresh with the keys.
# * connected without a key (the array went from authentication none to dh-hmac-chap): the
#   kernel cannot be given one, so the path is disconnected (nvme disconnect -d nvmeX) and
#   connected again with the keys, only when its subsystem has another live path of this host
#   (IO goes on through it); reported in "reconnected". Otherwise it is left as it is and
#   reported in "unauthenticated" ({nqn, device, reason}).
# Paths left as they are are not an error: the control plane runs connect-path again once
# another path is live. Whether the kernel accepted keys written in place shows only in its log
# ("qid 0: authenticated"); the controller must hold them first (configure-target), or nvmet
# ends the connection as above and the path's reconnects are refused. nvmet gives each step of
# an authentication KEEP_ALIVE_TMO seconds (auth_expired_work, same file): a host whose DH
# exchange is slower (TCG guests under load, not EC2 hardware) is refused with EIO.
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
# failover settings; every other host, subsystem, port and key is kept. Written whole, renamed
# in (a reader never sees half a file). Runs on one host overlap (a connect-path per controller,
# sent side by side: ReconcileArray's connect phase, two controllers bootstrapping at once), so
# the read-modify-write holds an exclusive lock on a file beside the config and writes through
# a temporary file of its own: without it, two runs renamed the same .tmp (the second failed)
# and one run's ports could be lost.
CONFIG_FILTER='
import fcntl, json, os, sys, tempfile
path, hostnqn, hostid, traddr, trsvcid, kato, loss, delay, failfast, *nqns = sys.argv[1:]
# the DH-HMAC-CHAP keys on stdin (never in argv): the host key, then the controller key; none: empty
host_key, ctrl_key = (sys.stdin.read().split("\n") + ["", ""])[:2]
os.makedirs(os.path.dirname(path), exist_ok=True)
lock = open(path + ".lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)
try:
    with open(path) as f:
        text = f.read().strip()
except FileNotFoundError:
    text = ""
hosts = json.loads(text) if text else []
if not isinstance(hosts, list):
    raise SystemExit(f"{path} is not a list of hosts")
host = next((h for h in hosts if h.get("hostnqn") == hostnqn), None)
if host is None:
    host = {"hostnqn": hostnqn, **({"hostid": hostid} if hostid else {}), "subsystems": []}
    hosts.append(host)
for nqn in nqns:
    subsystems = host.setdefault("subsystems", [])
    subsystem = next((s for s in subsystems if s.get("nqn") == nqn), None)
    if subsystem is None:
        subsystem = {"nqn": nqn, "ports": []}
        subsystems.append(subsystem)
    ports = subsystem.setdefault("ports", [])
    key = ("tcp", traddr, trsvcid)
    port = next((p for p in ports if (p.get("transport"), p.get("traddr"), p.get("trsvcid")) == key), None)
    if port is None:
        port = {"transport": "tcp", "traddr": traddr, "trsvcid": trsvcid}
        ports.append(port)
    port.update(keep_alive_tmo=int(kato), ctrl_loss_tmo=int(loss), reconnect_delay=int(delay))
    if int(failfast) >= 0:
        port["fast_io_fail_tmo"] = int(failfast)
    else:
        port.pop("fast_io_fail_tmo", None)
    if host_key:
        port.update(dhchap_key=host_key, dhchap_ctrl_key=ctrl_key)
    else:
        port.pop("dhchap_key", None)
        port.pop("dhchap_ctrl_key", None)
if host_key and host.get("dhchap_key"):
    print(f"warning: {path}: the host entry of {hostnqn} has its own dhchap_key, which nvme-cli uses before the port key")
keyed = any(
    "dhchap_key" in h or any("dhchap_key" in p or "dhchap_ctrl_key" in p for s in h.get("subsystems") or [] for p in s.get("ports") or [])
    for h in hosts
)
fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".config.", suffix=".json")
with os.fdopen(fd, "w") as f:
    json.dump(hosts, f, indent=2)
    f.write("\n")
os.chmod(temporary, 0o600 if keyed else 0o644)  # keys: root-only
os.replace(temporary, path)
'
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
    python3 -c "$CONFIG_FILTER" "$CONFIG" "$HOST_NQN" "$HOST_ID" "$ADDRESS" "$PORT" \
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
