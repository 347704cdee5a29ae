# freeze-io: pause writes on the listed filesystems for an application-consistent snapshot (host).
#
# Parameters (shell variables from the rendered document's prologue): MOUNTPOINTS TIMEOUT_SECONDS
# BACKUP_ID STATE_DIR FSFREEZE_COMMAND DRY_RUN THAW_SIGNAL FROZEN_SIGNAL SIGNAL_POLL_MILLISECONDS
# FREEZE_AT.
#
# Guarantees, in the order of the steps below: every check passes before anything is frozen (1);
# each filesystem is synced (2); a detached watchdog armed that thaws every mountpoint
# TIMEOUT_SECONDS after the freeze begins (FREEZE_AT, or the arming when that is past) whatever
# else happens (3); with FREEZE_AT (epoch ms, the array's common instant) the script waits until
# then and syncs again what came meanwhile, or goes on at once when it is past (3b); then each
# mountpoint frozen; a failed freeze thaws what froze and cancels the watchdog (4); the last
# stdout line is the JSON report (5).
# DRY_RUN=true stops after the checks and reports "ready": the backup workflow's preflight.
# Signals (optional, presigned URLs): the report is PUT to FROZEN_SIGNAL the moment the host froze
# or failed to, and the watchdog polls THAW_SIGNAL from then on and thaws as soon as it answers
# (the snapshots' point in time is fixed); either unusable, thaw-io and the deadline work alone.
# With python3 the watchdog's poller does both inside the window without starting a process: it
# PUTs the report freeze-io hands it (a file and SIGUSR1) and thaws with FITHAW under the lock
# (lib/thaw_signal.py); anything it cannot do or check is left to curl and the watchdog.
# docs/backups.md, "The watchdog guarantee".
# The SSM agent runs the script with sh (dash on Debian and Ubuntu): run it again under bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -uo pipefail
export LC_ALL=C
WHO=freeze-io

# vsa:include lib/freeze-thaw.sh
# The watchdog's poller of the thaw marker: one kept-alive connection (lib/thaw_signal.py).
# vsa:python THAW_SIGNAL_PY lib/thaw_signal.py

# The watchdog's body: runs detached (see arm_watchdog) with these functions, not this script.
watchdog_main() {
  local deadline_ms=$1 rem mp
  WHO=watchdog
  trap '' HUP
  trap 'watchdog_cancelled' TERM INT
  proc_start $$
  printf '%s %s\n' "$$" "$PROC_START" >"$PID_FILE.tmp" && mv -f "$PID_FILE.tmp" "$PID_FILE"
  log "armed: thaws $MOUNTPOINTS at $(secs "$deadline_ms") unless cancelled"
  if [[ -n $THAW_URL ]] && await_thaw_signal "$deadline_ms" && thaw_on_signal; then
    exit 0
  fi
  now_ms
  rem=$((deadline_ms - NOW_MS))
  if ((rem > 0)); then
    sleep "$(secs "$rem")" &
    SLEEPER=$!
    wait "$SLEEPER"
  fi
  exec 9>>"$LOCK_FILE"
  flock -w 5 9 || log "lock busy for 5 s; going on without it"
  if ! watchdog_alive || [[ $WD_PID != "$$" ]]; then
    log "cancelled before firing"
    exit 0
  fi
  now_ms
  secs "$NOW_MS" >"$FIRED_FILE"
  log "fired: nobody thawed within ${TIMEOUT_SECONDS}s of arming; thawing $MOUNTPOINTS"
  for mp in "${MPS[@]}"; do
    recorded_mount "$mp"
    thaw_one "$mp" "$REC_DEV" "$REC_FSTYPE"
    log "$mp: $RESULT${DETAIL:+ ($DETAIL)}"
  done
  rm -f "$PID_FILE"
  log "done"
  exit 0
}

# await_thaw_signal DEADLINE_MS: from FROM_MS (the instant) on, poll THAW_URL every
# SIGNAL_POLL_MILLISECONDS until it answers 200 with this backup's marker (true) or the deadline
# passes (false). The workflow sets the interval
# from the number of hosts, so all of them together stay under S3's 5,500 GETs a second on one
# key; a throttled or failed poll is just the next one. With python3, one kept-alive connection
# (lib/thaw_signal.py), which may also have thawed (POLLER_THAWED: 3 every mountpoint, 4 one
# failed); without it, or if it cannot run, a curl a look.
await_thaw_signal() {
  local deadline_ms=$1 body wait_ms rc
  POLLER_THAWED=''
  if command -v python3 >/dev/null 2>&1; then
    python3 -c "$THAW_SIGNAL_PY" "$THAW_URL" "$deadline_ms" "$SIGNAL_POLL_MILLISECONDS" "$FROM_MS" &
    SLEEPER=$!
    wait "$SLEEPER"
    rc=$?
    ((rc == 3 || rc == 4)) && POLLER_THAWED=$rc
    ((rc == 0 || rc == 3 || rc == 4)) && return 0
    ((rc == 1)) && return 1
    log "the thaw signal's poller exited $rc: polling with curl"
  fi
  now_ms
  # no marker before the instant: nothing is frozen yet, so nothing is snapshotted
  if ((FROM_MS > NOW_MS)); then # in the background, so a cancel (TERM) ends it at once
    sleep "$(secs $((FROM_MS - NOW_MS)))" &
    SLEEPER=$!
    wait "$SLEEPER"
  fi
  while now_ms && ((NOW_MS + 100 < deadline_ms)); do
    # a look never outlasts the deadline (a slow or hanging GET would delay the watchdog's thaw)
    wait_ms=$((deadline_ms - NOW_MS - 50))
    ((wait_ms > 1000)) && wait_ms=1000
    if body=$(curl -fsS --connect-timeout "$(secs $((wait_ms / 2)))" --max-time "$(secs "$wait_ms")" "$THAW_URL" 2>/dev/null) &&
      [[ $body =~ \"thaw\"[[:space:]]*:[[:space:]]*true ]]; then
      return 0
    fi
    sleep "$(secs "$SIGNAL_POLL_MILLISECONDS")" &
    SLEEPER=$!
    wait "$SLEEPER"
  done
  return 1
}

# thaw_on_signal: under the lock, if this is still the armed watchdog (thaw-io has not cancelled
# it), thaw every mountpoint and record each result in SIGNALED_FILE for thaw-io's report; the
# PID file goes, so thaw-io finds nothing armed. False (and still armed) if any thaw failed: the
# deadline tries again.
thaw_on_signal() {
  local i mp started ok=0 lines=''
  if [[ -n $POLLER_THAWED ]]; then
    poller_thawed
    return $?
  fi
  exec 9>>"$LOCK_FILE"
  flock -w 5 9 || log "lock busy for 5 s; going on without it"
  if ! watchdog_alive || [[ $WD_PID != "$$" ]]; then
    log "cancelled before the thaw signal was acted on"
    exit 0
  fi
  now_ms
  started=$NOW_MS
  for i in "${!MPS[@]}"; do
    mp=${MPS[$i]}
    recorded_mount "$mp"
    thaw_one "$mp" "$REC_DEV" "$REC_FSTYPE"
    [[ $RESULT == failed ]] && ok=1
    lines+="$i"$'\t'"$RESULT"$'\t'"$THAWED_AT_MS"$'\t'"$DETAIL"$'\n'
    log "signal: $mp: $RESULT${DETAIL:+ ($DETAIL)}"
  done
  now_ms
  printf '%s %s\n%s' "$started" "$NOW_MS" "$lines" >"$SIGNALED_FILE.tmp" && mv -f "$SIGNALED_FILE.tmp" "$SIGNALED_FILE"
  if ((ok != 0)); then
    log "a thaw on the signal failed: armed until the deadline"
    exec 9>&-
    return 1
  fi
  rm -f "$PID_FILE"
  log "thawed on the snapshot's signal in $((NOW_MS - started)) ms"
  return 0
}

# poller_thawed: the poller thawed under the lock (SIGNALED_FILE: "started ended", then a line a
# mountpoint "index result thawedAt detail"): its results logged; false if one failed (the
# watchdog stays armed until the deadline, which tries again)
poller_thawed() {
  local started ended i result detail
  { read -r started ended && while IFS=$'\t' read -r i result _ detail; do
    log "signal: ${MPS[$i]}: $result${detail:+ ($detail)} (the poller)"
  done; } <"$SIGNALED_FILE"
  if ((POLLER_THAWED != 3)); then
    log "a thaw on the signal failed: armed until the deadline"
    return 1
  fi
  log "thawed on the snapshot's signal in $((ended - started)) ms (by the poller)"
  return 0
}

watchdog_cancelled() {
  [[ -n ${SLEEPER:-} ]] && kill "$SLEEPER" 2>/dev/null
  log "cancelled"
  exit 0
}

# arm_watchdog: start it detached and wait until it has recorded its PID (at most 2 s). setsid +
# nohup give it its own session, so it outlives the SSM command's process group being killed and
# the agent restarting (whose unit has KillMode=process); it logs to STATE_DIR.
arm_watchdog() {
  local src i
  src="$(declare -f); $(declare -p MPS); watchdog_main \"\$2\""
  now_ms
  ARMED_MS=$NOW_MS
  # armed before the wait for the instant, the deadline counts from the instant: the same
  # TIMEOUT_SECONDS from the freeze as when armed right before it
  FROM_MS=$ARMED_MS
  if [[ -n $FREEZE_AT ]] && ((FREEZE_AT > FROM_MS)); then FROM_MS=$FREEZE_AT; fi
  DEADLINE_MS=$((FROM_MS + TIMEOUT_SECONDS * 1000))
  rm -f "$POLLER_FILE" "$REPORT_FILE" "$SENT_FILE"
  export MOUNTPOINTS TIMEOUT_SECONDS BACKUP_ID STATE_DIR FSFREEZE_COMMAND LOG_FILE PID_FILE FIRED_FILE \
    MOUNTS_FILE LOCK_FILE SIGNALED_FILE THAW_URL SIGNAL_POLL_MILLISECONDS THAW_SIGNAL_PY FROM_MS \
    FROZEN_URL POLLER_FILE REPORT_FILE SENT_FILE
  setsid nohup bash -c "$src" vsa-freeze-watchdog "$BACKUP_ID" "$DEADLINE_MS" \
  </dev/null >>"$LOG_FILE" 2>&1 &
  for ((i = 0; i < 200; i++)); do
    if watchdog_alive; then return 0; fi
    sleep 0.01
  done
  kill "$!" 2>/dev/null
  return 1
}

STAGE=preflight
FROZEN=() # indexes into MPS, in the order frozen
declare -A FROZE_AT DEVICE FSTYPE
ARMED_MS='' DEADLINE_MS='' FREEZE_STARTED_MS='' FROZE_MS='' WD_PID=''
THAW_URL='' FROZEN_URL='' THAW_SIGNAL_STATE=none

# The report is built without a subshell (js, jt): "say frozen" runs inside the freeze window.
report() { # STATUS [REASON]: REPORT, the JSON report (one line)
  local i sep='' items='' r
  for i in "${!MPS[@]}"; do
    js "${MPS[$i]}"; items+="$sep{\"mountpoint\":$J,"
    js "${DEVICE[$i]:-}"; items+="\"device\":$J,"
    js "${FSTYPE[$i]:-}"; items+="\"fstype\":$J,"
    jt "${FROZE_AT[$i]:-}"; items+="\"frozeAt\":$J}"
    sep=','
  done
  js "$BACKUP_ID"; r="{\"document\":\"freeze-io\",\"backupId\":$J,"
  js "$1"; r+="\"status\":$J,"
  if [[ -n ${2:-} ]]; then js "$STAGE"; r+="\"stage\":$J,"; js "$2"; r+="\"reason\":$J,"; fi
  js "$THAW_SIGNAL_STATE"; r+="\"timeoutSeconds\":${TIMEOUT_SECONDS:-null},\"thawSignal\":$J,"
  jt "$ARMED_MS"; r+="\"armedAt\":$J,"
  jt "$DEADLINE_MS"; r+="\"watchdogDeadline\":$J,\"watchdogPid\":${WD_PID:-null},"
  jt "${FREEZE_AT:-}"; r+="\"freezeAt\":$J,"
  jt "$FREEZE_STARTED_MS"; r+="\"freezeStartedAt\":$J,"
  jt "$FROZE_MS"; r+="\"frozeAt\":$J,\"mountpoints\":[$items]}"
  REPORT=$r
}

fail() { # REASON: undo what was frozen, report, exit 1
  local i rolled_back=1
  log "failed ($STAGE): $1"
  for ((i = ${#FROZEN[@]} - 1; i >= 0; i--)); do
    thaw_one "${MPS[${FROZEN[$i]}]}" "${DEVICE[${FROZEN[$i]}]}" "${FSTYPE[${FROZEN[$i]}]}"
    log "rollback ${MPS[${FROZEN[$i]}]}: $RESULT at $(secs "$THAWED_AT_MS")${DETAIL:+ ($DETAIL)}"
    [[ $RESULT == failed ]] && rolled_back=0
  done
  if [[ -n $ARMED_MS && $rolled_back == 1 ]]; then
    cancel_watchdog
  elif [[ -n $ARMED_MS ]]; then
    log "watchdog left armed: a rollback thaw failed"
  fi
  FROZE_AT=() FROZE_MS=''
  say failed "$1"
  exit 1
}

# say STATUS [REASON]: the report, PUT to FROZEN_URL first (the workflow's quickest way to learn
# it), then printed as the last stdout line (the command's output, read when it ends). "frozen"
# is handed to the watchdog's poller when it runs (RELAYED), which PUTs it over a connection
# opened before the instant; confirm_relay then makes sure it went.
say() {
  report "$@"
  RELAYED=''
  if [[ $1 == frozen ]] && relay_report; then
    RELAYED=1
  else
    put_report
  fi
  printf '%s\n' "$REPORT"
}

put_report() {
  if [[ -n $FROZEN_URL ]] &&
    ! curl -fsS --connect-timeout 0.5 --max-time 2 -X PUT --data-binary "$REPORT" "$FROZEN_URL" >/dev/null 2>&1; then
    log "could not PUT the report to the frozen signal: the command's status tells the workflow"
  fi
}

# relay_report: REPORT written to REPORT_FILE and SIGUSR1 sent to the poller that POLLER_FILE
# names (its PID and start time); false, nothing sent, when there is none. Builtins only.
relay_report() {
  local pid start
  [[ -n $FROZEN_URL ]] || return 1
  read -r pid start 2>/dev/null <"$POLLER_FILE" || return 1
  [[ $pid =~ ^[0-9]+$ ]] && proc_start "$pid" && [[ $PROC_START == "$start" ]] || return 1
  printf '%s\n' "$REPORT" 2>/dev/null >"$REPORT_FILE" || return 1
  kill -USR1 "$pid" 2>/dev/null
}

# confirm_relay: the poller's answer (SENT_FILE, the PUT's HTTP status) within 2 s, else the
# report PUT here: the workflow learns it either way
confirm_relay() {
  local i status=''
  [[ -n $RELAYED ]] || return 0
  for ((i = 0; i < 40; i++)); do
    if read -r status 2>/dev/null <"$SENT_FILE"; then break; fi
    sleep 0.05
  done
  if [[ $status != 2[0-9][0-9] ]]; then
    log "the poller did not PUT the report (${status:-no answer}): PUT here"
    put_report
  fi
}

# decode_signal VALUE: the URL a base64url parameter holds (SSM's pattern allows no '&' or '?'),
# or nothing when it is not an http(s) URL
decode_signal() {
  local v=${1//-/+} url
  v=${v//_//}
  while ((${#v} % 4)); do v+='='; done
  url=$(printf '%s' "$v" | base64 -d 2>/dev/null | tr -d '\n') || return 1
  [[ $url =~ ^https?://[^[:space:]\']+$ ]] || return 1
  printf '%s' "$url"
}

LOG_FILE=/dev/null
trap 'fail "interrupted by a signal"' TERM INT HUP

if ! check_params; then
  TIMEOUT_SECONDS=''
  fail "$PROBLEM"
fi
# the poller's files (lib/thaw_signal.py): its PID, the report handed to it, its PUT's status
POLLER_FILE="$STATE_DIR/$BACKUP_ID.poller"
REPORT_FILE="$STATE_DIR/$BACKUP_ID.frozen"
SENT_FILE="$STATE_DIR/$BACKUP_ID.frozen.sent"
FREEZE_AT=${FREEZE_AT:-}
if [[ -n $FREEZE_AT ]]; then
  now_ms
  if [[ ! $FREEZE_AT =~ ^[0-9]{13}$ ]]; then
    FREEZE_AT=''
    fail "FreezeAt: epoch milliseconds (13 digits), or empty to freeze at once"
  fi
  FREEZE_AT=$((10#$FREEZE_AT))
  if ((FREEZE_AT - NOW_MS > 30000)); then
    fail "FreezeAt $(secs "$FREEZE_AT") is more than 30 s ahead of this host's clock ($(secs "$NOW_MS")): check its time sync"
  fi
fi
mkdir -p "$STATE_DIR" && chmod 0700 "$STATE_DIR" || fail "cannot create StateDir $STATE_DIR"
# the signals: optional, so a problem with them is reported, never a reason to refuse
if [[ -n ${THAW_SIGNAL:-} || -n ${FROZEN_SIGNAL:-} ]]; then
  if ! command -v curl >/dev/null 2>&1 || ! command -v base64 >/dev/null 2>&1; then
    THAW_SIGNAL_STATE="unusable: curl or base64 is not installed (thaw-io thaws)"
  else
    [[ -n ${FROZEN_SIGNAL:-} ]] && FROZEN_URL=$(decode_signal "$FROZEN_SIGNAL")
    if [[ -n ${THAW_SIGNAL:-} ]]; then
      THAW_URL=$(decode_signal "$THAW_SIGNAL") || THAW_URL=''
      THAW_SIGNAL_STATE=polled
      [[ -n $THAW_URL ]] || THAW_SIGNAL_STATE="unusable: ThawSignal is not a base64url http(s) URL (thaw-io thaws)"
      poll=${SIGNAL_POLL_MILLISECONDS:-}
      if [[ -n $THAW_URL ]] && ! { [[ $poll =~ ^[1-9][0-9]{1,3}$ ]] && ((poll <= 1000)); }; then
        THAW_URL=''
        THAW_SIGNAL_STATE="unusable: SignalPollMilliseconds '${SIGNAL_POLL_MILLISECONDS:-}' is not 10 to 1000 (thaw-io thaws)"
      fi
    fi
  fi
fi

# 1. preflight: every problem, for every mountpoint, before anything is frozen
problems=()
for cmd in findmnt flock setsid nohup timeout mount umount; do
  command -v "$cmd" >/dev/null 2>&1 || problems+=("$cmd is not installed (util-linux)")
done
command -v "$FSFREEZE_COMMAND" >/dev/null 2>&1 ||
  problems+=("$FSFREEZE_COMMAND is not installed (util-linux provides fsfreeze)")
if watchdog_alive; then
  problems+=("a freeze of backup $BACKUP_ID is already armed on this host (watchdog pid $WD_PID); run thaw-io first")
fi
declare -A seen_dev
for i in "${!MPS[@]}"; do
  mp=${MPS[$i]}
  if [[ ! -d $mp ]]; then
    problems+=("$mp does not exist or is not a directory")
  elif ! mount_info "$mp"; then
    problems+=("$mp is not a mountpoint (freezing it would freeze the filesystem that contains it)")
  else
    DEVICE[$i]=$MI_SOURCE FSTYPE[$i]=$MI_FSTYPE
    case $MI_FSTYPE in
      xfs | ext3 | ext4 | btrfs | f2fs | jfs | nilfs2 | reiserfs | gfs2 | ocfs2) ;;
      *) problems+=("$mp is a $MI_FSTYPE filesystem, which cannot be frozen for a snapshot (xfs, ext3, ext4, btrfs, f2fs, jfs, nilfs2, reiserfs, gfs2 and ocfs2 can)") ;;
    esac
    if [[ $(stat -L -c %d "$STATE_DIR") == "$(stat -L -c %d "$mp")" ]]; then
      problems+=("StateDir $STATE_DIR is on the filesystem mounted at $mp: the watchdog could not log, so not thaw, while it is frozen; use a StateDir elsewhere (default /run/vsa-freeze)")
    fi
    if [[ -n ${seen_dev[$MI_SOURCE]:-} ]]; then
      problems+=("$mp and ${seen_dev[$MI_SOURCE]} are the same filesystem ($MI_SOURCE): list it once")
    fi
    seen_dev[$MI_SOURCE]=$mp
  fi
done
if ((${#problems[@]})); then
  reason=$(printf '%s; ' "${problems[@]}")
  fail "${reason%; }"
fi
if [[ ${DRY_RUN:-false} == true ]]; then
  TIMEOUT_SECONDS=''
  report ready
  printf '%s\n' "$REPORT"
  exit 0
fi
for i in "${!MPS[@]}"; do
  printf '%s %s %s\n' "${MPS[$i]}" "${DEVICE[$i]}" "${FSTYPE[$i]}"
done >"$MOUNTS_FILE"
rm -f "$FIRED_FILE"

# 2. sync, outside both the freeze window and the watchdog's window: a sync under write load can
# take seconds, which would eat the snapshot's time; fsfreeze then flushes only what came since
STAGE=sync
for mp in "${MPS[@]}"; do
  sync -f "$mp" 2>/dev/null || sync
done

# 3. the watchdog, before anything is frozen, and before the wait for the instant: its start (a
# shell, the thaw marker's poller, which connects now and looks from the instant on) then takes
# nothing from the hosts' freeze window, nor from their common instant
STAGE=arm
arm_watchdog || fail "could not start the watchdog (see $LOG_FILE)"
log "watchdog armed (pid $WD_PID), deadline $(secs "$DEADLINE_MS")"

# 3b. the array's common instant: every host freezes at FREEZE_AT, so none holds its writes while
# another's command is still on its way; what was written while waiting is synced again first
now_ms
if [[ -n $FREEZE_AT ]] && ((FREEZE_AT > NOW_MS)); then
  STAGE=waiting
  sleep "$(secs $((FREEZE_AT - NOW_MS)))"
  for mp in "${MPS[@]}"; do
    sync -f "$mp" 2>/dev/null || sync
  done
fi

# 4. freeze. The lock (taken after arming, so the watchdog does not inherit it) keeps a watchdog
# that fires meanwhile from thawing before the loop is over, so it thaws everything this loop
# froze; freezing stops at the deadline.
STAGE=freeze
exec 8>>"$LOCK_FILE"
flock -w 5 8 || fail "the lock $LOCK_FILE stayed busy for 5 s"
now_ms
FREEZE_STARTED_MS=$NOW_MS
for i in "${!MPS[@]}"; do
  now_ms
  if ((NOW_MS >= DEADLINE_MS)); then
    fail "the watchdog deadline passed before ${MPS[$i]} was frozen: raise TimeoutSeconds"
  fi
  if ! out=$("$FSFREEZE_COMMAND" -f "${MPS[$i]}" 2>&1 8>&-); then
    [[ $out == *"Device or resource busy"* ]] && out+=" (already frozen: by another freeze-io whose watchdog is pending, or another tool)"
    fail "freezing ${MPS[$i]} failed: ${out:-no output}"
  fi
  now_ms
  FROZE_AT[$i]=$NOW_MS
  FROZEN+=("$i")
done
FROZE_MS=$NOW_MS
exec 8>&-
trap - TERM INT HUP
say frozen # first: the workflow is waiting for it
log "froze ${MOUNTPOINTS} at $(secs "$FROZE_MS") ($((FROZE_MS - FREEZE_STARTED_MS)) ms); the watchdog thaws at $(secs "$DEADLINE_MS")"
confirm_relay
