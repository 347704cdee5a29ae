# thaw-io: thaw the listed filesystems after the snapshot and cancel freeze-io's watchdog (host).
#
# Parameters (shell variables from the rendered document's prologue): MOUNTPOINTS TIMEOUT_SECONDS
# BACKUP_ID STATE_DIR FSFREEZE_COMMAND (TIMEOUT_SECONDS unused: the two documents share one set).
#
# Guarantees: idempotent, safe on every path out of the backup workflow ("not frozen" is fine); a
# mountpoint unmounted meanwhile is thawed through another mount of its device, or a temporary
# mount while the kernel still holds it frozen; the watchdog is cancelled only if its PID still
# names it; the last stdout line is the JSON report (when each mountpoint thawed, whether the
# watchdog had fired). When freeze-io's watchdog already thawed on the snapshot's signal, it reports
# that thaw (its instants, "thawedBy": "signal") and thaws again only what that left frozen.
# The SSM agent runs the script with sh (dash on Debian and Ubuntu): run it again under bash.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -uo pipefail
export LC_ALL=C
WHO=thaw-io

# vsa:include lib/freeze-thaw.sh

LOG_FILE=/dev/null
THAW_STARTED_MS='' THAWED_MS='' WATCHDOG='' WATCHDOG_FIRED_AT='' THAWED_BY=thaw-io
declare -A RESULTS DETAILS THAWED_AT

report() { # STATUS [REASON]
  local i mp sep='' items='' fired=false
  for i in "${!MPS[@]}"; do
    mp=${MPS[$i]}
    items+="$sep{\"mountpoint\":$(json_str "$mp"),\"result\":$(json_str "${RESULTS[$i]:-}"),"
    items+="\"thawedAt\":$(secs_or_null "${THAWED_AT[$i]:-}"),\"detail\":$(json_str "${DETAILS[$i]:-}")}"
    sep=','
  done
  [[ $WATCHDOG == fired ]] && fired=true
  printf '{"document":"thaw-io","backupId":%s,"status":%s,' "$(json_str "$BACKUP_ID")" "$(json_str "$1")"
  if [[ -n ${2:-} ]]; then printf '"reason":%s,' "$(json_str "$2")"; fi
  printf '"thawStartedAt":%s,"thawedAt":%s,"thawedBy":%s,' "$(secs_or_null "$THAW_STARTED_MS")" \
    "$(secs_or_null "$THAWED_MS")" "$(json_str "$THAWED_BY")"
  printf '"watchdog":%s,"watchdogFired":%s,"watchdogFiredAt":%s,"mountpoints":[%s]}\n' \
    "$(json_str "$WATCHDOG")" "$fired" "${WATCHDOG_FIRED_AT:-null}" "$items"
}

if ! check_params; then
  log "refused: $PROBLEM"
  report failed "$PROBLEM"
  exit 1
fi
if ! { mkdir -p "$STATE_DIR" && chmod 0700 "$STATE_DIR"; }; then
  report failed "cannot create StateDir $STATE_DIR"
  exit 1
fi

# Under the lock, a watchdog that reaches its deadline now waits until this run has thawed and
# cancelled it; one that is already thawing finishes first.
exec 9>>"$LOCK_FILE"
flock -w 5 9 || log "lock busy for 5 s; going on without it"
now_ms
THAW_STARTED_MS=$NOW_MS
# the watchdog's thaw on the snapshot's signal: "started thawed" then "index result at detail"
if [[ -f $SIGNALED_FILE ]]; then
  { read -r THAW_STARTED_MS signaled_ms && while IFS=$'\t' read -r i result at _; do
      [[ $i =~ ^[0-9]+$ && $result == thawed ]] || continue
      RESULTS[$i]=$result DETAILS[$i]="thawed on the snapshot's signal" THAWED_AT[$i]=$at
    done; } <"$SIGNALED_FILE"
  THAWED_BY=signal
fi
failed=()
for i in "${!MPS[@]}"; do
  [[ ${RESULTS[$i]:-} == thawed && $THAWED_BY == signal ]] && continue
  recorded_mount "${MPS[$i]}"
  thaw_one "${MPS[$i]}" "$REC_DEV" "$REC_FSTYPE"
  RESULTS[$i]=$RESULT DETAILS[$i]=$DETAIL THAWED_AT[$i]=$THAWED_AT_MS
  [[ $RESULT == failed ]] && failed+=("${MPS[$i]}: $DETAIL")
  [[ $RESULT == thawed ]] && THAWED_BY=thaw-io # something was left for this run to thaw
done
now_ms
THAWED_MS=$NOW_MS
if [[ $THAWED_BY == signal ]]; then THAWED_MS=${signaled_ms:-$NOW_MS}; fi
for i in "${!MPS[@]}"; do
  log "${MPS[$i]}: ${RESULTS[$i]}${DETAILS[$i]:+ (${DETAILS[$i]})}"
done
if ((${#failed[@]})); then
  # Something may still be frozen: a watchdog that has not fired yet stays armed and tries too.
  if [[ -f $FIRED_FILE ]]; then
    WATCHDOG=fired
    read -r WATCHDOG_FIRED_AT <"$FIRED_FILE"
  elif watchdog_alive; then
    WATCHDOG=armed
  else
    WATCHDOG=not-armed
  fi
  log "a thaw failed; watchdog: $WATCHDOG"
  reason=$(printf '%s; ' "${failed[@]}")
  report failed "${reason%; }"
  exit 1
fi
cancel_watchdog
[[ $THAWED_BY == signal && $WATCHDOG == not-armed ]] && WATCHDOG=thawed-on-signal
report thawed
