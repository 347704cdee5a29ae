#!/usr/bin/env bash
# drill-check: prove, on a restore-drill instance, that a backup set's restored volumes hold
# filesystems that mount and check clean, and that the operator's own command accepts them.
#
# Parameters (shell variables from the rendered document's prologue): VOLUMES DEVICE_DIR
# MOUNT_DIR COMMAND COMMAND_TIMEOUT_SECONDS DEVICE_WAIT_SECONDS.
#
# Steps: every parameter, tool and MountDir is checked before anything is touched (1); the
# devices are awaited together, up to DEVICE_WAIT_SECONDS, as an attachment may still be
# settling (2); each device is probed: a filesystem, a partition table (each partition then
# probed), or nothing (3); each XFS or ext2/3/4 filesystem is mounted read-only, unmounted,
# checked read-only, and mounted read-only again at its mountpoint (4); the command runs once
# (5); everything mounted is unmounted and every loop device this run attached is released, on
# SIGTERM too (the agent's timeout, a cancel) (6); the last stdout line is the JSON report (7).
#
# Why mount before checking: a crash-consistent snapshot's XFS log or ext4 journal is dirty. A
# read-only mount of a writable device replays it (the restored volume is a copy: writing to it
# is harmless), after which a read-only check sees the filesystem as an application would. The
# filesystems stay read-only for the command: the drill proves the set as it was restored.
#
# A device may be a regular file (an image): mount attaches it to a read-only loop device of
# its own (released at umount), so a dirty log in an image cannot be replayed; an image that
# holds a partition table is attached read-only here to reach its partitions.
# The SSM agent runs the script with sh (dash on Debian and Ubuntu): run it again under bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
DOCUMENT=drill-check
# vsa:include lib/common.sh
# common.sh's errexit would stop at the first failing command; a drill records each failure
# and goes on to the next filesystem
set +e

MAX_VOLUMES=64
OUTPUT_BYTES=2048 # the tail of the command's output kept in the report
DETAIL_BYTES=1500 # the tail of a failed mount's or check's output kept in the report
KILL_AFTER_SECONDS=5

VOLS=() PROBLEMS=() VOL_DEVICE=() VOL_FOUND=()
FS_VOL=() FS_DEV=() FS_TYPE=() FS_TARGET=() FS_MOUNT=() FS_CHECK=() FS_DETAIL=() FS_MOUNTPOINT=() FS_MS=()
MADE_DIRS=() LOOPS=()
INCOMPLETE=() # why the command would see only part of the set (a device or filesystem missing)
declare -A ADDED_PARTS # device -> 1 when this run told the kernel of its partitions (partx -a)
LOOP_IMAGE='' LOOPS_BEFORE='' # an image being attached, and its loop devices before
CHILD='' CMD_PGID='' WORK='' COMMAND_TEXT='' CLEANED=0
CMD_RAN=false CMD_RC='' CMD_TIMED_OUT=false CMD_MS='' CMD_OUTPUT=''

now_ms() {
  local t=${EPOCHREALTIME:-}
  if [[ -n $t ]]; then
    NOW_MS=$((${t%[.,]*} * 1000 + 10#${t#*[.,]} / 1000))
  else
    NOW_MS=$(date +%s%3N)
  fi
}
now_ms
STARTED_MS=$NOW_MS

secs() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

json_str() { # a JSON string; newlines and tabs escaped, other control characters dropped
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//[$'\001'-$'\037']/}
  printf '"%s"' "$s"
}

json_or_null() { if [[ -n ${1:-} ]]; then json_str "$1"; else printf null; fi; }

# printable ASCII and newlines only: whatever a tool or the command printed, the report stays
# one valid JSON line
printable() { tr -cd '\11\12\40-\176'; }

# tail_of FILE BYTES: the end of a tool's output, at most the last 20 lines and BYTES bytes
tail_of() { tail -n 20 "$1" 2>/dev/null | tail -c "$2" | printable; }

problem() { PROBLEMS+=("$*"); log "problem: $*"; }

# 1. the parameters, again: SSM's allowedPattern checks them first; here so the script is safe
# when run by hand and its messages say what to fix
good_dir() { [[ $1 =~ ^/?[A-Za-z0-9._-][A-Za-z0-9._/-]*$ && $1 != *..* && $1 != *//* && $1 != */ ]]; }

decode_command() { # COMMAND (base64url, unpadded) -> COMMAND_TEXT; false when it does not decode
  local v=${COMMAND//-/+}
  v=${v//_//}
  while ((${#v} % 4)); do v+='='; done
  COMMAND_TEXT=$(printf '%s' "$v" | base64 -d 2>/dev/null) || return 1
  [[ -n ${COMMAND_TEXT//[[:space:]]/} ]]
}

check_params() {
  local v tool t held='' seen=' '
  VOLS=()
  if [[ -z $VOLUMES ]]; then
    problem "Volumes: give at least one EBS volume id (vol-...), comma-separated"
  else
    IFS=, read -r -a VOLS <<<"$VOLUMES"
    [[ $VOLUMES != *, && $VOLUMES != ,* && $VOLUMES != *,,* ]] ||
      problem "Volumes '$VOLUMES': volume ids separated by single commas"
    ((${#VOLS[@]} <= MAX_VOLUMES)) || problem "Volumes: ${#VOLS[@]} volumes; at most $MAX_VOLUMES"
    for v in "${VOLS[@]}"; do
      if [[ ! $v =~ ^vol-([0-9a-f]{8}|[0-9a-f]{17})$ ]]; then
        problem "volume id '$v': vol- and 8 or 17 lowercase hexadecimal digits"
      elif [[ $seen == *" $v "* ]]; then
        problem "volume $v is listed twice: list each once"
      fi
      seen+="$v "
    done
  fi
  good_dir "$DEVICE_DIR" ||
    problem "DeviceDir '$DEVICE_DIR': a path of letters, digits, '.', '_', '-', '/', without '..'"
  good_dir "$MOUNT_DIR" ||
    problem "MountDir '$MOUNT_DIR': a path other than '/' of letters, digits, '.', '_', '-', '/', without '..'"
  # relative paths are the working directory's (where the local cloud runs a node's sandbox)
  DEVICE_DIR=$(absolute "$DEVICE_DIR")
  MOUNT_DIR=$(absolute "$MOUNT_DIR")
  if ! [[ $COMMAND_TIMEOUT_SECONDS =~ ^[0-9]{1,4}$ ]] ||
    ((10#$COMMAND_TIMEOUT_SECONDS < 1 || 10#$COMMAND_TIMEOUT_SECONDS > 3600)); then
    problem "CommandTimeoutSeconds '$COMMAND_TIMEOUT_SECONDS': a whole number of seconds from 1 to 3600"
  fi
  if ! [[ $DEVICE_WAIT_SECONDS =~ ^[0-9]{1,3}$ ]] || ((10#$DEVICE_WAIT_SECONDS > 300)); then
    problem "DeviceWaitSeconds '$DEVICE_WAIT_SECONDS': a whole number of seconds from 0 to 300"
  fi
  for tool in blkid lsblk partx losetup mount umount findmnt timeout readlink; do
    command -v "$tool" >/dev/null 2>&1 || problem "$tool is not installed (util-linux, coreutils)"
  done
  if [[ -n $COMMAND ]]; then
    if ! command -v base64 >/dev/null 2>&1; then
      problem "base64 is not installed (coreutils): the Command cannot be decoded"
    elif [[ ! $COMMAND =~ ^[A-Za-z0-9_-]{4,8000}$ ]] || ! decode_command; then
      problem "Command: the base64url (RFC 4648 section 5, no padding) of a non-empty shell command"
    fi
  fi
  if ((${#PROBLEMS[@]} == 0)); then
    [[ ! -e $MOUNT_DIR || -d $MOUNT_DIR ]] || problem "MountDir $MOUNT_DIR exists and is not a directory"
    while read -r t; do
      if [[ $t == "$MOUNT_DIR" || $t == "$MOUNT_DIR"/* ]]; then held+=${held:+, }$t; fi
    done < <(findmnt -rn -o TARGET 2>/dev/null)
    [[ -z $held ]] ||
      problem "MountDir $MOUNT_DIR already has filesystems mounted ($held): unmount them (left by a drill that was killed?) or use another MountDir"
  fi
  ((${#PROBLEMS[@]} == 0)) || return 1
  COMMAND_TIMEOUT_SECONDS=$((10#$COMMAND_TIMEOUT_SECONDS))
  DEVICE_WAIT_SECONDS=$((10#$DEVICE_WAIT_SECONDS))
}

# run_logged OUTFILE COMMAND...: COMMAND in the background, its output to OUTFILE, and its
# status. Waiting on it with `wait` lets a signal's trap run at once instead of when it ends.
run_logged() {
  local out=$1 rc
  shift
  "$@" >"$out" 2>&1 </dev/null &
  CHILD=$!
  wait "$CHILD"
  rc=$?
  CHILD=''
  return "$rc"
}

# 2. the devices, all awaited together: an attachment may still be settling
await_devices() {
  local i deadline said='' waiting=()
  for i in "${!VOLS[@]}"; do VOL_DEVICE[i]=$DEVICE_DIR/$(device_name "${VOLS[i]}"); done
  now_ms
  deadline=$((NOW_MS + DEVICE_WAIT_SECONDS * 1000))
  while :; do
    waiting=()
    for i in "${!VOLS[@]}"; do [[ -e ${VOL_DEVICE[i]} ]] || waiting+=("$i"); done
    ((${#waiting[@]})) || return 0
    now_ms
    ((NOW_MS < deadline)) || break
    if [[ -z $said ]]; then
      log "waiting up to ${DEVICE_WAIT_SECONDS}s for the devices of ${#waiting[@]} volume(s)"
      said=1
    fi
    sleep 0.1
  done
  for i in "${waiting[@]}"; do
    VOL_FOUND[i]=missing
    INCOMPLETE+=("${VOLS[i]} is missing")
    problem "${VOLS[i]}: its device ${VOL_DEVICE[i]} did not appear within ${DEVICE_WAIT_SECONDS}s: check that the restored volume is attached to this instance (or raise DeviceWaitSeconds) and run the drill again"
  done
}

# probe DEVICE: PROBE_TYPE (a filesystem's or other signature's type) and PROBE_PTTYPE (a
# partition table's) from blkid's low-level probe, which reads the device, not a cache; its
# status: 0 found, 2 nothing found, else an error (PROBE_OUT says which)
probe() {
  local line rc
  PROBE_TYPE='' PROBE_PTTYPE=''
  PROBE_OUT=$(blkid -p -o export "$1" 2>&1)
  rc=$?
  while IFS= read -r line; do
    case $line in
      TYPE=*) PROBE_TYPE=${line#TYPE=} ;;
      PTTYPE=*) PROBE_PTTYPE=${line#PTTYPE=} ;;
    esac
  done <<<"$PROBE_OUT"
  return "$rc"
}

partitions_of() { # BLOCK DEVICE: its partitions as the kernel sees them, one path a line
  local name type
  lsblk -lnpo NAME,TYPE "$1" 2>/dev/null | while read -r name type; do
    [[ $type == part ]] && printf '%s\n' "$name"
  done
}

add_fs() { # VOLUME_INDEX DEVICE TYPE MOUNTPOINT
  local k=${#FS_DEV[@]}
  FS_VOL[k]=$1 FS_DEV[k]=$2 FS_TYPE[k]=$3 FS_TARGET[k]=$4
  FS_MOUNT[k]=skipped FS_CHECK[k]=skipped FS_DETAIL[k]='' FS_MOUNTPOINT[k]='' FS_MS[k]=0
}

# 3. what is on a volume's device
probe_volume() {
  local i=$1 vol=${VOLS[$1]} dev block part n parts=() tries
  dev=$(readlink -f "${VOL_DEVICE[i]}")
  if [[ ! -b $dev && ! -f $dev ]]; then
    VOL_FOUND[i]=unreadable
    INCOMPLETE+=("$vol is unreadable")
    problem "$vol: ${VOL_DEVICE[i]} is neither a block device nor an image file"
    return
  fi
  probe "$dev"
  case $? in
    0 | 2) ;;
    *)
      VOL_FOUND[i]=unreadable
      INCOMPLETE+=("$vol is unreadable")
      problem "$vol: blkid cannot tell what is on $dev: $(printf '%s' "$PROBE_OUT" | printable)"
      return
      ;;
  esac
  if [[ -n $PROBE_TYPE ]]; then
    VOL_FOUND[i]=filesystem
    add_fs "$i" "$dev" "$PROBE_TYPE" "$MOUNT_DIR/$vol"
    return
  fi
  if [[ -z $PROBE_PTTYPE ]]; then
    VOL_FOUND[i]=raw
    log "$vol: $dev holds no filesystem and no partition table (raw): nothing to check"
    return
  fi
  VOL_FOUND[i]=partitions
  block=$dev
  if [[ -f $dev ]]; then # mount's own loop device would not show the partitions
    LOOPS_BEFORE=$(loops_of "$dev") LOOP_IMAGE=$dev
    if ! block=$(losetup -r -P -f --show "$dev" 2>&1); then
      LOOP_IMAGE=''
      INCOMPLETE+=("the partitions of $vol are out of reach")
      problem "$vol: $dev holds a $PROBE_PTTYPE partition table, and attaching it to a loop device failed: $block"
      return
    fi
    LOOPS+=("$block")
    LOOP_IMAGE=''
  fi
  mapfile -t parts < <(partitions_of "$block")
  if ((${#parts[@]} == 0)); then
    # a kernel without this table's parser (or one that has not scanned it) is told of the
    # partitions by partx, which reads the table itself (recorded first: there were none, so
    # whatever partx adds, even if stopped halfway, is this run's to remove)
    ADDED_PARTS[$block]=1
    partx -a "$block" >/dev/null 2>&1
    for ((tries = 0; tries < 50 && ${#parts[@]} == 0; tries++)); do
      mapfile -t parts < <(partitions_of "$block")
      ((${#parts[@]})) || sleep 0.1
    done
  fi
  if ((${#parts[@]} == 0)); then
    INCOMPLETE+=("the partitions of $vol are out of reach")
    problem "$vol: $dev holds a $PROBE_PTTYPE partition table, and the kernel shows none of its partitions (partx -a $block did not help)"
    return
  fi
  for part in "${parts[@]}"; do
    n=$(cat "/sys/class/block/${part##*/}/partition" 2>/dev/null)
    probe "$part"
    add_fs "$i" "$part" "$PROBE_TYPE" "$MOUNT_DIR/$vol-p${n:-${part##*[!0-9]}}"
  done
}

loops_of() { losetup -n -O NAME -j "$1" 2>/dev/null; } # IMAGE: its loop devices, one a line

# mount_ro DEVICE TYPE MOUNTPOINT: mounted read-only, or false with mount's message in MOUNT_OUT. XFS gets nouuid: a restored volume has the same UUID as its
# source, which may be this instance's own root filesystem (made from the same image).
mount_ro() {
  local type=$2 opts=ro,nodev,nosuid
  case $2 in
    xfs) opts+=,nouuid ;;
    ext2 | ext3 | ext4) type=ext4 ;; # the ext4 driver mounts all three; ext2/ext3 may not be registered
  esac
  MOUNT_OUT=$(mount -t "$type" -o "$opts" "$1" "$3" 2>&1) && return 0
  MOUNT_OUT=$(printf '%s' "$MOUNT_OUT" | printable)
  return 1
}

# unmount MOUNTPOINT: unmounted; a mountpoint kept busy (by a process the command left behind)
# for 5 s is detached lazily, which is reported
unmount() {
  local mp=$1 tries out
  for ((tries = 0; tries < 50; tries++)); do
    out=$(umount "$mp" 2>&1) && break
    findmnt -rn --mountpoint "$mp" >/dev/null 2>&1 || break
    sleep 0.1
  done
  if findmnt -rn --mountpoint "$mp" >/dev/null 2>&1; then
    umount -l "$mp" 2>/dev/null
    problem "$mp stayed busy for 5 s ($(printf '%s' "$out" | printable)): detached lazily; a process still uses it"
  fi
}

# kernel_mark DEVICE: the kernel's last line about a block DEVICE so far (its log is a ring:
# lines are not counted, they are found again)
kernel_mark() {
  [[ -b $1 ]] || return 0
  dmesg 2>/dev/null | grep -F "(${1##*/})" | tail -n 1
}

# kernel_said MARK DEVICE: the kernel's lines about DEVICE since the line MARK, the last 3 (mount's
# own message rarely says why a mount failed; the filesystem's driver does)
kernel_said() {
  [[ -b $2 ]] || return 0
  dmesg 2>/dev/null | grep -F "(${2##*/})" |
    awk -v mark="$1" '{ line[NR] = $0 } mark != "" && $0 == mark { since = NR } END { for (i = since + 1; i <= NR; i++) print line[i] }' |
    tail -n 3 | printable
}

# fsck_ro DEVICE TYPE: the filesystem's read-only check (output in $WORK/check.out); its status
fsck_ro() {
  local args
  case $2 in
    xfs)
      args=(xfs_repair -n)
      [[ -f $1 ]] && args+=(-f) # an image file, not a device
      ;;
    *) args=(e2fsck -f -n) ;;
  esac
  if ! command -v "${args[0]}" >/dev/null 2>&1; then
    printf '%s is not installed (%s)\n' "${args[0]}" "$([[ $2 == xfs ]] && echo xfsprogs || echo e2fsprogs)" >"$WORK/check.out"
    return 127
  fi
  run_logged "$WORK/check.out" "${args[@]}" "$1"
}

# 4. one filesystem: mount read-only (replays a dirty log), unmount, check read-only, mount
# read-only again for the command
check_fs() {
  local k=$1 dev=${FS_DEV[$1]} type=${FS_TYPE[$1]} mp=${FS_TARGET[$1]} vol=${VOLS[${FS_VOL[$1]}]}
  local started mark held said rc tool
  now_ms
  started=$NOW_MS
  case $type in
    '')
      FS_CHECK[k]=raw
      log "$vol: $dev holds nothing recognisable: nothing to check"
      return
      ;;
    xfs | ext2 | ext3 | ext4) ;;
    *)
      FS_CHECK[k]=unsupported
      log "$vol: $dev holds $type, which the drill does not check"
      return
      ;;
  esac
  if [[ -b $dev ]] && held=$(findmnt -rn -o TARGET --source "$dev" 2>/dev/null | head -n 1) && [[ -n $held ]]; then
    FS_MOUNT[k]=failed FS_DETAIL[k]="already mounted at $held"
    INCOMPLETE+=("$dev is not mounted")
    problem "$vol: $dev is already mounted at $held: the drill checks filesystems nobody has mounted; unmount it and run the drill again"
    return
  fi
  if [[ ! -d $mp ]]; then
    mkdir -p "$mp" && MADE_DIRS+=("$mp")
  fi
  mark=$(kernel_mark "$dev")
  if mount_ro "$dev" "$type" "$mp"; then
    FS_MOUNT[k]=ok
    unmount "$mp"
  else
    said=$(kernel_said "$mark" "$dev")
    FS_MOUNT[k]=failed FS_DETAIL[k]="mount -o ro: $MOUNT_OUT${said:+$'\n'$said}"
    INCOMPLETE+=("$dev is not mounted")
    problem "$vol: $dev ($type) does not mount read-only: the restored filesystem is not usable as it is; see its detail, and restore from another backup"
  fi
  fsck_ro "$dev" "$type"
  rc=$?
  tool=$([[ $type == xfs ]] && echo "xfs_repair -n" || echo "e2fsck -fn")
  if ((rc == 0)); then
    FS_CHECK[k]=clean
  else
    FS_CHECK[k]=problems
    FS_DETAIL[k]+="${FS_DETAIL[k]:+$'\n'}$tool (exit $rc): $(tail_of "$WORK/check.out" "$DETAIL_BYTES")"
    problem "$vol: $tool found problems on $dev ($type, exit $rc): the backup holds a damaged filesystem; see its detail, repair a copy or restore from another backup"
  fi
  if [[ ${FS_MOUNT[k]} == ok ]]; then
    if mount_ro "$dev" "$type" "$mp"; then
      FS_MOUNTPOINT[k]=$mp
    else
      FS_MOUNT[k]=failed
      INCOMPLETE+=("$dev is not mounted")
      FS_DETAIL[k]+="${FS_DETAIL[k]:+$'\n'}mount -o ro, after the check: $MOUNT_OUT"
      problem "$vol: $dev ($type) mounted once, and not again after its check: see its detail"
    fi
  fi
  now_ms
  FS_MS[k]=$((NOW_MS - started))
  log "$vol: $dev ($type): mount ${FS_MOUNT[k]}, check ${FS_CHECK[k]}"
}

# the command's leftovers: its whole process group (timeout made it one), then the group's
# processes that outlive a TERM for KILL_AFTER_SECONDS
stop_command() {
  local i
  [[ -n $CMD_PGID ]] || return 0
  # (the group is named after timeout's PID once timeout has made it: a signal may come earlier)
  if kill -TERM -- "-$CMD_PGID" 2>/dev/null || kill -TERM "$CMD_PGID" 2>/dev/null; then
    for ((i = 0; i < KILL_AFTER_SECONDS * 10; i++)); do
      kill -0 -- "-$CMD_PGID" 2>/dev/null || kill -0 "$CMD_PGID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$CMD_PGID" 2>/dev/null || kill -KILL "$CMD_PGID" 2>/dev/null
  fi
  CMD_PGID=''
}

# 5. the operator's command: once, with bash, in MOUNT_DIR, bounded by timeout(1), which runs it
# in a process group of its own (so the whole group is stopped at the timeout, or on a signal)
run_command() {
  local mounts='' k started out=$WORK/command.out
  for k in "${!FS_MOUNTPOINT[@]}"; do
    [[ -n ${FS_MOUNTPOINT[k]} ]] && mounts+=${mounts:+ }${FS_MOUNTPOINT[k]}
  done
  log "running the command (at most ${COMMAND_TIMEOUT_SECONDS}s) on: ${mounts:-no filesystem}"
  now_ms
  started=$NOW_MS
  CMD_RAN=true
  (cd "$MOUNT_DIR" && VSA_DRILL_MOUNTS=$mounts exec timeout -k "$KILL_AFTER_SECONDS" \
    "$COMMAND_TIMEOUT_SECONDS" bash -c "$COMMAND_TEXT") >"$out" 2>&1 </dev/null &
  CMD_PGID=$!
  wait "$CMD_PGID"
  CMD_RC=$?
  now_ms
  CMD_MS=$((NOW_MS - started))
  stop_command # what it left running in the background would keep its mounts busy
  CMD_OUTPUT=$(tail -c "$OUTPUT_BYTES" "$out" 2>/dev/null | printable && printf .)
  CMD_OUTPUT=${CMD_OUTPUT%.} # (the dot keeps the output's last newlines from $(...))
  if ((CMD_RC == 124 || CMD_RC == 137)) && ((CMD_MS >= COMMAND_TIMEOUT_SECONDS * 1000)); then
    CMD_TIMED_OUT=true
    problem "the command was still running after ${COMMAND_TIMEOUT_SECONDS}s and was stopped: raise CommandTimeoutSeconds, or make the command quicker"
  elif ((CMD_RC != 0)); then
    problem "the command exited $CMD_RC: the application's own check did not accept the restored data (see command.output)"
  fi
}

# 6. leave nothing behind: the running tool, the command, every mount, the loop devices and
# partitions this run added, the directories it made. Whatever is mounted at a mountpoint of
# this run's is its own (nothing was under MountDir when it began), also a mount a signal
# interrupted before it was noted.
cleanup() {
  local i dev
  ((CLEANED)) && return 0
  CLEANED=1
  if [[ -n $CHILD ]]; then
    kill -TERM "$CHILD" 2>/dev/null
    wait "$CHILD" 2>/dev/null
    CHILD=''
  fi
  stop_command
  for ((i = ${#FS_TARGET[@]} - 1; i >= 0; i--)); do
    if findmnt -rn --mountpoint "${FS_TARGET[i]}" >/dev/null 2>&1; then unmount "${FS_TARGET[i]}"; fi
  done
  for dev in "${!ADDED_PARTS[@]}"; do partx -d "$dev" >/dev/null 2>&1; done
  if [[ -n $LOOP_IMAGE ]]; then # attached when a signal came
    for dev in $(loops_of "$LOOP_IMAGE"); do
      [[ $'\n'$LOOPS_BEFORE$'\n' == *$'\n'$dev$'\n'* ]] || LOOPS+=("$dev")
    done
  fi
  for dev in "${LOOPS[@]}"; do
    losetup -d "$dev" 2>/dev/null || problem "could not release the loop device $dev: losetup -d $dev"
  done
  for ((i = ${#MADE_DIRS[@]} - 1; i >= 0; i--)); do rmdir "${MADE_DIRS[i]}" 2>/dev/null; done
  [[ -n $WORK ]] && rm -rf "$WORK"
}

fs_json() { # K
  local k=$1
  printf '{"device":%s,"type":%s,"mount":"%s","check":"%s","detail":%s,"mountpoint":%s,"seconds":%s}' \
    "$(json_str "${FS_DEV[k]}")" "$(json_or_null "${FS_TYPE[k]}")" "${FS_MOUNT[k]}" "${FS_CHECK[k]}" \
    "$(json_or_null "${FS_DETAIL[k]}")" "$(json_or_null "${FS_MOUNTPOINT[k]}")" "$(secs "${FS_MS[k]}")"
}

# 7. the report, one JSON line
report() {
  local i k items='' filesystems problems='' p command=null status=passed
  for i in "${!VOLS[@]}"; do
    filesystems=''
    for k in "${!FS_VOL[@]}"; do
      ((FS_VOL[k] == i)) && filesystems+=${filesystems:+,}$(fs_json "$k")
    done
    items+=${items:+,}$(printf '{"volumeId":%s,"device":%s,"found":%s,"filesystems":[%s]}' \
      "$(json_str "${VOLS[i]}")" "$(json_or_null "${VOL_DEVICE[i]:-}")" "$(json_or_null "${VOL_FOUND[i]:-}")" \
      "$filesystems")
  done
  for p in "${PROBLEMS[@]}"; do problems+=${problems:+,}$(json_str "$p"); done
  ((${#PROBLEMS[@]} == 0)) || status=failed
  if [[ -n $COMMAND ]]; then
    command=$(printf '{"given":true,"ran":%s,"exitCode":%s,"timedOut":%s,"seconds":%s,"output":%s}' \
      "$CMD_RAN" "${CMD_RC:-null}" "$CMD_TIMED_OUT" "$([[ -n $CMD_MS ]] && secs "$CMD_MS" || echo null)" \
      "$(json_str "$CMD_OUTPUT")")
  fi
  now_ms
  printf '{"document":"drill-check","status":"%s","volumes":[%s],"command":%s,"seconds":%s,"problems":[%s]}\n' \
    "$status" "$items" "$command" "$(secs $((NOW_MS - STARTED_MS)))" "$problems"
}

finish() { # clean up, report, exit 0 when passed, 1 when not
  trap '' TERM INT HUP
  cleanup
  report
  ((${#PROBLEMS[@]} == 0))
  exit
}

interrupted() {
  problem "stopped by SIG$1 (the document's timeout, or a cancel) before the drill ended: give it fewer volumes or a shorter CommandTimeoutSeconds"
  finish
}

trap 'interrupted TERM' TERM
trap 'interrupted INT' INT
trap 'interrupted HUP' HUP
trap cleanup EXIT

if ! check_params; then
  VOLS=() # nothing was looked at
  finish
fi
if ! WORK=$(mktemp -d "${TMPDIR:-/tmp}/vsa-drill.XXXXXX"); then
  problem "cannot make a temporary directory in ${TMPDIR:-/tmp}"
  finish
fi
if [[ ! -d $MOUNT_DIR ]]; then
  if ! mkdir -p "$MOUNT_DIR" || ! chmod 0700 "$MOUNT_DIR"; then
    problem "cannot create MountDir $MOUNT_DIR"
    finish
  fi
  MADE_DIRS+=("$MOUNT_DIR")
fi

await_devices
for i in "${!VOLS[@]}"; do
  [[ -n ${VOL_FOUND[i]:-} ]] || probe_volume "$i"
done
for k in "${!FS_DEV[@]}"; do check_fs "$k"; done

# the command runs on the whole set or not at all: on part of it, its verdict would say nothing
if [[ -n $COMMAND ]]; then
  if ((${#INCOMPLETE[@]} == 0)); then
    run_command
  else
    log "the command did not run: $(printf '%s; ' "${INCOMPLETE[@]}")"
  fi
fi
finish
