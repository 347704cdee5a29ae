# freeze-io: pause writes on the listed filesystems for an application-consistent snapshot.
#
# Order of work, and why:
#   1. check the parameters and every mountpoint (exists, is a mountpoint, a freezable filesystem,
#      listed once, fsfreeze present): any problem fails here, before anything is frozen;
#   2. arm the watchdog: a detached process (setsid + nohup, its own session, so it survives the
#      SSM command's process group being killed and the agent restarting, whose unit has
#      KillMode=process) that thaws every listed mountpoint TIMEOUT_SECONDS after arming, even if
#      nothing else ever runs. It records its PID in STATE_DIR and logs what it does there;
#   3. sync, then freeze each mountpoint, recording the instant each froze; if one freeze fails,
#      thaw the ones frozen, cancel the watchdog and fail;
#   4. print a one-line JSON report as the last stdout line (diagnostics go to stderr).
# The prologue (rendered from freeze-io.yaml) sets MOUNTPOINTS, TIMEOUT_SECONDS, BACKUP_ID,
# STATE_DIR and FSFREEZE_COMMAND.
# The SSM agent runs the script with sh (dash on Debian and Ubuntu): run it again under bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -uo pipefail
export LC_ALL=C
WHO=freeze-io

# --- shared: begin (identical in freeze-io.sh and thaw-io.sh; tests/documents checks it) ---
# Instants are integer epoch milliseconds inside the scripts and "seconds.mmm" in reports.
now_ms() {
  local t=${EPOCHREALTIME:-}
  if [[ -n $t ]]; then
    NOW_MS=$((${t%[.,]*} * 1000 + 10#${t#*[.,]} / 1000))
  else
    NOW_MS=$(date +%s%3N)
  fi
}

secs() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

secs_or_null() { if [[ -n ${1:-} ]]; then secs "$1"; else printf null; fi; }

json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/}
  s=${s//[$'\001'-$'\037']/}
  printf '"%s"' "$s"
}

log() {
  local ts
  now_ms
  ts=$(secs "$NOW_MS")
  printf '%s %s[%s] %s\n' "$ts" "$WHO" "$$" "$*" 2>/dev/null >>"$LOG_FILE" || true
  if [[ $WHO != watchdog ]]; then printf '%s: %s\n' "$WHO" "$*" >&2; fi
}

# Parameters are checked again here (SSM's allowedPattern checks them first) so the script is
# safe when run by hand, and so its messages say what to fix.
check_params() {
  local problems=() mp
  [[ $BACKUP_ID =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ ]] ||
    problems+=("BackupId '$BACKUP_ID': letters, digits, '.', '_' and '-' only, at most 128")
  [[ $STATE_DIR =~ ^/[A-Za-z0-9._/-]+$ && $STATE_DIR != *..* ]] ||
    problems+=("StateDir '$STATE_DIR': an absolute path of letters, digits, '.', '_', '-', '/', without '..'")
  [[ $TIMEOUT_SECONDS =~ ^[0-9]{1,2}$ ]] && ((10#$TIMEOUT_SECONDS >= 1 && 10#$TIMEOUT_SECONDS <= 60)) ||
    problems+=("TimeoutSeconds '$TIMEOUT_SECONDS': a whole number of seconds from 1 to 60")
  [[ $FSFREEZE_COMMAND =~ ^[A-Za-z0-9._/-]+$ ]] ||
    problems+=("FsfreezeCommand '$FSFREEZE_COMMAND': a command name or an absolute path")
  MPS=()
  if [[ -z $MOUNTPOINTS ]]; then
    problems+=("Mountpoints: give at least one absolute path (comma-separated)")
  else
    IFS=',' read -r -a MPS <<<"$MOUNTPOINTS"
    for mp in "${MPS[@]}"; do
      if [[ ! $mp =~ ^/[A-Za-z0-9._/+@:=-]*$ || $mp == *..* || $mp =~ ^/+$ || $mp == *//* || $mp == */ ]]; then
        problems+=("mountpoint '$mp': an absolute path other than '/', without '..', '//' or a trailing '/'")
      fi
    done
  fi
  if ((${#problems[@]})); then
    PROBLEM=$(printf '%s; ' "${problems[@]}")
    PROBLEM=${PROBLEM%; }
    return 1
  fi
  TIMEOUT_SECONDS=$((10#$TIMEOUT_SECONDS))
  LOG_FILE="$STATE_DIR/$BACKUP_ID.log"
  PID_FILE="$STATE_DIR/$BACKUP_ID.watchdog.pid"
  FIRED_FILE="$STATE_DIR/$BACKUP_ID.fired"
  MOUNTS_FILE="$STATE_DIR/$BACKUP_ID.mounts"
  LOCK_FILE="$STATE_DIR/$BACKUP_ID.lock"
  return 0
}

# mount_info PATH: MI_FSTYPE and MI_SOURCE of the filesystem mounted exactly at PATH (the top one
# if several are stacked), both empty when PATH is not a mountpoint.
mount_info() {
  local line
  MI_FSTYPE='' MI_SOURCE=''
  line=$(findmnt -n -r -o FSTYPE,SOURCE --mountpoint "$1" 2>/dev/null | tail -n 1)
  [[ -n $line ]] || return 1
  read -r MI_FSTYPE MI_SOURCE <<<"$line"
  MI_SOURCE=${MI_SOURCE%%\[*} # btrfs shows /dev/x[/subvolume]
  return 0
}

# thaw_path PATH (a mountpoint): RESULT thawed | not-frozen | failed, and DETAIL.
thaw_path() {
  local out
  if out=$("$FSFREEZE_COMMAND" -u "$1" 2>&1); then
    RESULT=thawed DETAIL=''
  elif [[ $out == *"Invalid argument"* ]]; then
    RESULT=not-frozen DETAIL='was not frozen'
  else
    RESULT=failed DETAIL="$FSFREEZE_COMMAND -u $1: ${out:-no output}"
  fi
}

# superblock_alive DEVICE FSTYPE: the kernel still holds that filesystem (it has a sysfs entry)
# although nothing has it mounted: a frozen filesystem that was unmounted stays so, frozen.
superblock_alive() {
  local name
  [[ -b $1 ]] || return 1
  name=$(basename "$(readlink -f "$1")")
  [[ -n $name && -d /sys/fs/$2/$name ]]
}

# thaw_one MOUNTPOINT [DEVICE FSTYPE]: thaw it, coping with a mountpoint that was unmounted
# meanwhile. Sets RESULT thawed | not-frozen | not-mounted | failed, DETAIL, and THAWED_AT_MS.
# Never calls fsfreeze on a directory that is not the mountpoint of the recorded filesystem:
# that would thaw (or freeze) the filesystem that contains the directory instead.
thaw_one() {
  local mp=$1 dev=${2:-} fstype=${3:-} other rescue err
  if mount_info "$mp" && [[ -z $dev || ($MI_SOURCE == "$dev" && $MI_FSTYPE == "${fstype:-$MI_FSTYPE}") ]]; then
    thaw_path "$mp"
  elif [[ -z $dev ]]; then
    RESULT=not-mounted DETAIL='not a mountpoint (any more); no record of what was mounted there, nothing to thaw'
  elif other=$(findmnt -n -r -o TARGET --source "$dev" 2>/dev/null | head -n 1) && [[ -n $other ]]; then
    thaw_path "$other"
    DETAIL="no longer mounted at $mp; $dev is mounted at $other, thawed through it${DETAIL:+: $DETAIL}"
  elif superblock_alive "$dev" "$fstype"; then
    # Unmounted while frozen: the kernel keeps the filesystem, frozen, holding the device. A
    # new mount of the device gets that same filesystem back and can thaw it.
    rescue=$(mktemp -d "$STATE_DIR/rescue.XXXXXX")
    if err=$(timeout 20 mount -t "$fstype" "$dev" "$rescue" 2>&1); then
      thaw_path "$rescue"
      umount "$rescue" 2>/dev/null || umount -l "$rescue" 2>/dev/null
      DETAIL="unmounted while frozen (the kernel kept it frozen); thawed through a temporary mount of $dev${DETAIL:+: $DETAIL}"
    else
      RESULT=failed
      DETAIL="unmounted while frozen and still held frozen by the kernel; mounting $dev to thaw it failed: $err"
    fi
    rmdir "$rescue" 2>/dev/null
  else
    RESULT=not-mounted DETAIL="unmounted; the kernel no longer has the filesystem of $dev: nothing left to thaw"
  fi
  now_ms
  THAWED_AT_MS=$NOW_MS
}

# recorded_mount MOUNTPOINT: REC_DEV and REC_FSTYPE that freeze-io recorded for it (empty if none).
recorded_mount() {
  local m d f
  REC_DEV='' REC_FSTYPE=''
  [[ -f $MOUNTS_FILE ]] || return 0
  while read -r m d f; do
    if [[ $m == "$1" ]]; then REC_DEV=$d REC_FSTYPE=$f; fi
  done <"$MOUNTS_FILE"
}

# proc_start PID: the start time (clock ticks since boot) of a running process: with the PID it
# names one process, never a later one that reuses the PID. Fails for a gone or zombie process.
proc_start() {
  local stat='' fields
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  read -r -a fields <<<"$stat"
  [[ ${fields[0]} != [ZX] ]] || return 1
  printf '%s' "${fields[19]}"
}

# watchdog_alive: WD_PID is set when the PID file names a running watchdog of this backup.
watchdog_alive() {
  local pid start args=()
  WD_PID=''
  read -r pid start 2>/dev/null <"$PID_FILE" || return 1
  [[ $pid =~ ^[0-9]+$ && -n $start ]] || return 1
  [[ $(proc_start "$pid") == "$start" ]] || return 1
  mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  [[ ${args[3]:-} == vsa-freeze-watchdog && ${args[4]:-} == "$BACKUP_ID" ]] || return 1
  WD_PID=$pid
}

# cancel_watchdog: WATCHDOG cancelled | fired | not-armed | gone (armed, but it died without
# firing), and WATCHDOG_FIRED_AT (seconds) when it fired.
cancel_watchdog() {
  local i
  WATCHDOG_FIRED_AT=''
  if watchdog_alive; then
    kill -TERM -- "-$WD_PID" 2>/dev/null || kill -TERM "$WD_PID" 2>/dev/null
    for ((i = 0; i < 100; i++)); do
      proc_start "$WD_PID" >/dev/null || break
      sleep 0.01
    done
    WATCHDOG=cancelled
  elif [[ -f $FIRED_FILE ]]; then
    WATCHDOG=fired
  elif [[ -f $PID_FILE ]]; then
    WATCHDOG=gone
  else
    WATCHDOG=not-armed
  fi
  if [[ -f $FIRED_FILE ]]; then
    WATCHDOG=fired
    read -r WATCHDOG_FIRED_AT 2>/dev/null <"$FIRED_FILE"
  fi
  rm -f "$PID_FILE"
  log "watchdog: $WATCHDOG${WATCHDOG_FIRED_AT:+ (fired at $WATCHDOG_FIRED_AT)}"
}
# --- shared: end ---

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

# arm_watchdog: start it detached and wait until it has recorded its PID (at most 2 s).
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
for i in "${!MPS[@]}"; do
  printf '%s %s %s\n' "${MPS[$i]}" "${DEVICE[$i]}" "${FSTYPE[$i]}"
done >"$MOUNTS_FILE"
rm -f "$FIRED_FILE"

# 2. the watchdog, before anything is frozen
STAGE=arm
arm_watchdog || fail "could not start the watchdog (see $LOG_FILE)"
log "watchdog armed (pid $WD_PID), deadline $(secs "$DEADLINE_MS")"

# 3. sync (outside the freeze window), then freeze. The lock (taken after arming, so the
# watchdog does not inherit it) keeps a watchdog that fires meanwhile from thawing before the
# loop is over, so it thaws everything this loop froze; freezing stops at the deadline.
STAGE=freeze
for mp in "${MPS[@]}"; do
  sync -f "$mp" 2>/dev/null || sync
done
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
