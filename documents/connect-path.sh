#!/usr/bin/env bash
# connect-path (host): one NVMe/TCP path to the controller at ADDRESS:PORT for every subsystem
# of the array; native multipath merges it with the paths to the other controllers.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES ADDRESS
# PORT HOST_NQN KEEP_ALIVE_TMO CTRL_LOSS_TMO RECONNECT_DELAY FAST_IO_FAIL_TMO NVME_CONFIG
# IO_POLICY SYSFS_ROOT WAIT_SECONDS NVME_COMMAND AUTHENTICATION KEYS_SECRET_ID AWS_COMMAND.
# The failover settings (keep-alive timeout, ctrl-loss-tmo, reconnect delay, fast_io_fail_tmo;
# README "Failover settings") are written first into nvme-cli's JSON config (NVME_CONFIG,
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
# A path that exists is left alone: it keeps the credentials it connected with until it
# reconnects (the kernel's reconnects reuse them).
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
if [[ $AUTHENTICATION == dh-hmac-chap ]]; then
  read_secret "$KEYS_SECRET_ID"
  secret_keys "$KEYS_SECRET_ID" hostKey controllerKey
  unset SECRET
fi
if [[ $CONFIG != none ]]; then
  output=$(printf '%s\n%s\n' "${KEYS[hostKey]:-}" "${KEYS[controllerKey]:-}" |
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

scan
CONNECTED=()
ERRORS=()
for nqn in "${NQNS[@]}"; do
  [[ -z ${PRESENT[$nqn]:-} ]] || continue
  args=(connect -t tcp -a "$ADDRESS" -s "$PORT" -n "$nqn" --hostnqn "$HOST_NQN"
    --keep-alive-tmo "$KEEP_ALIVE_TMO" --ctrl-loss-tmo "$CTRL_LOSS_TMO"
    --reconnect-delay "$RECONNECT_DELAY" --config "$CONFIG")
  [[ -z $HOST_ID ]] || args+=(--hostid "$HOST_ID")
  if output=$("$NVME_COMMAND" "${args[@]}" 2>&1); then
    CONNECTED+=("$nqn")
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
failover=$(printf '{"keepAliveTmo":%s,"ctrlLossTmo":%s,"reconnectDelay":%s,"fastIoFailTmo":%s,"config":%s}' \
  "$KEEP_ALIVE_TMO" "$CTRL_LOSS_TMO" "$RECONNECT_DELAY" "$FAST_IO_FAIL_TMO" "$(json "$CONFIG")")
printf '{"document":"%s","arrayId":%s,"address":%s,"port":%s,"hostNqn":%s,"connected":[%s],"missing":[%s],"subsystems":[%s],"livePaths":%s,"ioPolicy":%s,"failover":%s,"authentication":%s,"error":%s}\n' \
  "$DOCUMENT" "$(json "$ARRAY_ID")" "$(json "$ADDRESS")" "$(json "$PORT")" "$(json "$HOST_NQN")" \
  "$connected" "$missing" "$SUBSYSTEMS_JSON" "$LIVE_TOTAL" "$(json "$IO_POLICY")" "$failover" \
  "$(json "$AUTHENTICATION")" "$error"
((${#MISSING[@]} == 0 && ${#POLICY_FAILED[@]} == 0))
