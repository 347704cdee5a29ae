#!/usr/bin/env bash
# Included by configure-target after lib/fencing.sh and lib/target-exports.sh (its KERNEL): the
# fence watch. A controller learns of its
# own fence at its next configure-target run, but a lost controller may get none for a long time
# (cut off from the control plane, or judged lost while it still runs). Until then its port still
# shows its groups optimized: a host that reaches it again sends it IO, and every write it passes
# on fails with a reservation conflict, which the host does not take for a path error and hands
# to the application. So every controller that registered on this boot runs one watch, detached:
# it reads this controller's registrations back every FENCE_WATCH_SECONDS, and at once when the
# kernel logs an error on one of their devices (a Reservation Conflict is logged as
# "reservation conflict error, dev nvmeXnY" since Linux 6.5, "critical nexus error" before). When
# its key is gone from a volume it registered on this boot and attachment, it fences itself as a
# run would (self_fence: every ANA group of its port inaccessible, the fence recorded so every
# later run on this boot refuses) and ends. A log line only starts a read-back: nothing is
# decided on the log alone. The watch also ends when the boot it registered on is over (another
# boot id), when none of the volumes it registered is attached any more, and on teardown.
FENCE_WATCH_SECONDS=2
WATCH_PID_FILE=$KERNEL.fence-watch.pid
WATCH_LOG=$KERNEL.fence-watch.log
WATCH_NAME=vsa-fence-watch

watch_pid() { # the running watch's PID on this kernel, if any
  local pid args=()
  read -r pid 2>/dev/null <"$WATCH_PID_FILE" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  [[ ${args[3]:-} == "$WATCH_NAME" ]] || return 1
  printf '%s' "$pid"
}

start_fence_watch() { # WATCH: the watch's PID (started now, or the one already running)
  local src i
  if WATCH=$(watch_pid); then return 0; fi
  src="$(declare -f); $(declare -p RESERVATIONS_PY KERNEL NVMET PORT_DIR DEVICES EBS_DEVICE_PREFIX \
    NVME_COMMAND DMESG_COMMAND BOOT_ID_FILE RESERVATION_KEY FENCE_WATCH_SECONDS WATCH_PID_FILE WATCH_NAME RTYPE HELD_KEYS); fence_watch_main"
  # fd 9 is closed in the watch: it holds configure-target's lock, which would then never be let go
  setsid nohup bash -c "$src" "$WATCH_NAME" </dev/null >>"$WATCH_LOG" 2>&1 9>&- &
  for ((i = 0; i < 200; i++)); do # up to 10 s: a loaded instance starts a shell slowly
    if WATCH=$(watch_pid); then return 0; fi
    sleep 0.05
  done
  fail "the fence watch did not start (its log: $WATCH_LOG)"
}

stop_fence_watch() {
  local pid
  pid=$(watch_pid) || return 0
  kill "$pid" 2>/dev/null && changed "stopped the fence watch (pid $pid)"
}

fence_watch_main() { # the watch's body, detached (start_fence_watch); never returns
  local line last=$SECONDS boot reader
  DOCUMENT=fence-watch
  trap '' HUP
  trap 'exit 0' TERM INT
  boot=$(<"$BOOT_ID_FILE")
  printf '%s\n' "$$" >"$WATCH_PID_FILE.tmp" && mv -f "$WATCH_PID_FILE.tmp" "$WATCH_PID_FILE"
  log "watching key $RESERVATION_KEY on this boot's registrations: every ${FENCE_WATCH_SECONDS}s, and on a device error in the kernel log"
  exec 3< <(exec "$DMESG_COMMAND" --follow --notime 2>/dev/null)
  # the log's reader ends with the watch, not at the next kernel message
  trap 'kill "$reader" 2>/dev/null' EXIT
  reader=$!
  while :; do
    if IFS= read -r -t "$FENCE_WATCH_SECONDS" line <&3; then
      if watch_line "$line"; then
        log "the kernel logged an error on a registered volume's device (${line:0:160}): reading back now"
      elif ((SECONDS - last < FENCE_WATCH_SECONDS)); then
        continue
      fi
    elif (($? <= 128)); then # the kernel log ended (or cannot be read): read-backs alone
      exec 3</dev/null
      sleep "$FENCE_WATCH_SECONDS"
    fi
    last=$SECONDS
    [[ -r $BOOT_ID_FILE && "$(<"$BOOT_ID_FILE")" == "$boot" ]] || { log "a new boot: the watch ends"; exit 0; }
    watch_check
  done
}

watch_line() { # true when a kernel log line reports an error on a device this watch guards
  local volume name
  [[ $1 == *error* || $1 == *onflict* ]] || return 1
  for volume in "$KERNEL".registered/*; do
    name=$(readlink -f "$DEVICES/$(device_name "${volume##*/}")") || continue
    [[ $1 == *"${name##*/}"[,:\ ]* ]] && return 0
  done
  return 1
}

watch_check() { # every registered volume still attached holds this key, or this controller fences itself
  local file volume device attached=0 held
  for file in "$KERNEL".registered/*; do
    volume=${file##*/}
    device=$DEVICES/$(device_name "$volume")
    [[ -e $device ]] || continue
    attached=$((attached + 1))
    # a read that fails (the device going, nvme-cli busy) decides nothing: the next one will
    held=$( (read_reservations "$device" >/dev/null 2>&1 && { holds_key "$RESERVATION_KEY" && echo held || echo gone; }) 2>/dev/null)
    [[ $held == gone ]] && fenced_here "$volume" "$device" "$RESERVATION_KEY" && watch_fence "$volume"
  done
  ((attached > 0)) || { log "none of the registered volumes is attached: the watch ends"; exit 0; }
}

watch_fence() { # the key is gone from VOLUME on this attachment: fence as a run would, then end
  exec 9>>"$KERNEL.lock"
  flock -w 30 9 || log "configure-target's lock busy for 30 s; fencing without it"
  (self_fence "its reservation key $RESERVATION_KEY is gone from $1, registered on this boot: a survivor preempted it (seen by the fence watch).") || true
  log "fenced: every ANA group of $PORT_DIR inaccessible; the watch ends"
  exit 0
}
