# freeze-io: pause writes on the listed filesystems for an application-consistent snapshot (host).
#
# Parameters (shell variables from the rendered document's prologue): MOUNTPOINTS TIMEOUT_SECONDS
# BACKUP_ID STATE_DIR FSFREEZE_COMMAND DRY_RUN.
#
# Guarantees, in the order of the steps below: every check passes before anything is frozen (1);
# each filesystem is synced (2), then a detached watchdog armed that thaws every mountpoint
# TIMEOUT_SECONDS later whatever else happens (3), then each mountpoint frozen; a failed freeze
# thaws what froze and cancels the watchdog (4); the last stdout line is the JSON report (5).
# DRY_RUN=true stops after the checks and reports "ready": the backup workflow's preflight.
# docs/backups.md, "The watchdog guarantee".
# The SSM agent runs the script with sh (dash on Debian and Ubuntu): run it again under bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -uo pipefail
export LC_ALL=C
WHO=freeze-io

# vsa:include lib/freeze-thaw.sh

# The watchdog's body: runs detached (see arm_watchdog) with these functions, not this script.
watchdog_main() {
  local deadline_ms=$1 rem mp
  WHO=watchdog
  trap '' HUP
  trap 'watchdog_cancelled' TERM INT
  printf '%s %s\n' "$$" "$(proc_start $$)" >"$PID_FILE.tmp" && mv -f "$PID_FILE.tmp" "$PID_FILE"
  log "armed: thaws $MOUNTPOINTS at $(secs "$deadline_ms") unless cancelled"
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
  DEADLINE_MS=$((ARMED_MS + TIMEOUT_SECONDS * 1000))
  export MOUNTPOINTS TIMEOUT_SECONDS BACKUP_ID STATE_DIR FSFREEZE_COMMAND LOG_FILE PID_FILE FIRED_FILE \
    MOUNTS_FILE LOCK_FILE
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

report() { # STATUS [REASON]
  local i mp sep='' items=''
  for i in "${!MPS[@]}"; do
    mp=${MPS[$i]}
    items+="$sep{\"mountpoint\":$(json_str "$mp"),\"device\":$(json_str "${DEVICE[$i]:-}"),"
    items+="\"fstype\":$(json_str "${FSTYPE[$i]:-}"),"
    items+="\"frozeAt\":$(secs_or_null "${FROZE_AT[$i]:-}")}"
    sep=','
  done
  printf '{"document":"freeze-io","backupId":%s,"status":%s,' "$(json_str "$BACKUP_ID")" "$(json_str "$1")"
  if [[ -n ${2:-} ]]; then printf '"stage":%s,"reason":%s,' "$(json_str "$STAGE")" "$(json_str "$2")"; fi
  printf '"timeoutSeconds":%s,' "${TIMEOUT_SECONDS:-null}"
  printf '"armedAt":%s,"watchdogDeadline":%s,"watchdogPid":%s,' \
    "$(secs_or_null "$ARMED_MS")" "$(secs_or_null "$DEADLINE_MS")" "${WD_PID:-null}"
  printf '"freezeStartedAt":%s,"frozeAt":%s,"mountpoints":[%s]}\n' \
    "$(secs_or_null "$FREEZE_STARTED_MS")" "$(secs_or_null "$FROZE_MS")" "$items"
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
  report failed "$1"
  exit 1
}

LOG_FILE=/dev/null
trap 'fail "interrupted by a signal"' TERM INT HUP

if ! check_params; then
  TIMEOUT_SECONDS=''
  fail "$PROBLEM"
fi
mkdir -p "$STATE_DIR" && chmod 0700 "$STATE_DIR" || fail "cannot create StateDir $STATE_DIR"

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

# 3. the watchdog, before anything is frozen
STAGE=arm
arm_watchdog || fail "could not start the watchdog (see $LOG_FILE)"
log "watchdog armed (pid $WD_PID), deadline $(secs "$DEADLINE_MS")"

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
log "froze ${MOUNTPOINTS} at $(secs "$FROZE_MS") ($((FROZE_MS - FREEZE_STARTED_MS)) ms); the watchdog thaws at $(secs "$DEADLINE_MS")"
report frozen
