# freeze-io and thaw-io: what both do (parse the mountpoints, the state files, thawing one
# mountpoint, the watchdog's bookkeeping). Taken in by `# vsa:include lib/freeze-thaw.sh`.
# Instants are integer epoch milliseconds inside the scripts and "seconds.mmm" in reports.
now_ms() {
  local t=${EPOCHREALTIME:-}
  if [[ -n $t ]]; then
    NOW_MS=$((${t%[.,]*} * 1000 + 10#${t#*[.,]} / 1000))
  else
    NOW_MS=$(date +%s%3N)
  fi
}

# js VALUE: J, VALUE as a JSON string; jt MS: J, epoch milliseconds as "seconds.mmm", or null.
# Neither forks (no subshell): freeze-io makes its report and log lines inside the freeze window.
js() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/}
  s=${s//[$'\001'-$'\037']/}
  J="\"$s\""
}
jt() { if [[ -n ${1:-} ]]; then printf -v J '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); else J=null; fi; }

secs() { jt "$1"; printf '%s' "$J"; }

secs_or_null() { jt "${1:-}"; printf '%s' "$J"; }

json_str() { js "$1"; printf '%s' "$J"; }

log() {
  local J
  now_ms
  jt "$NOW_MS"
  printf '%s %s[%s] %s\n' "$J" "$WHO" "$$" "$*" 2>/dev/null >>"$LOG_FILE" || true
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
  SIGNALED_FILE="$STATE_DIR/$BACKUP_ID.signaled"
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

# proc_start PID: PROC_START, the start time (clock ticks since boot) of a running process: with
# the PID it names one process, never a later one that reuses the PID. Fails for a gone or zombie
# process. No subshell: freeze-io checks its poller with it inside the freeze window.
proc_start() {
  local stat='' fields
  PROC_START=''
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  read -r -a fields <<<"$stat"
  [[ ${fields[0]} != [ZX] ]] || return 1
  PROC_START=${fields[19]}
}

# watchdog_alive: WD_PID is set when the PID file names a running watchdog of this backup.
watchdog_alive() {
  local pid start args=()
  WD_PID=''
  read -r pid start 2>/dev/null <"$PID_FILE" || return 1
  [[ $pid =~ ^[0-9]+$ && -n $start ]] || return 1
  proc_start "$pid" && [[ $PROC_START == "$start" ]] || return 1
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
      proc_start "$WD_PID" || break
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
