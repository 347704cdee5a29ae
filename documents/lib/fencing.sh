#!/usr/bin/env bash
# Shared by configure-target: fencing at the storage with NVMe reservations on each volume's EBS
# device (Multi-Attach io2 supports Reservation Register, Acquire, Release and Report on Nitro
# instances). Every controller serving the array registers its own key, one per boot
# (lib/reservations.py), and the volume is held Write Exclusive - All Registrants (type 5):
# every registered controller may write, nothing else can. A survivor fences a lost controller
# by Reservation Acquire with Preempt and Abort of that controller's key, and reads the
# registrants back to confirm the key is gone before it serves the lost controller's volumes:
# EBS then refuses the lost controller's writes, those it still holds included. The including
# script sets NVME_COMMAND and BOOT_ID_FILE and defines fail and changed. Keys are hex (0x...) here
# and in the parameters, decimal on nvme-cli's command line (every nvme-cli version reads it).
#
# A fence holds for the rest of the fenced controller's boot: re-registering would let every
# write it still holds through again (registration is per host, not per command). So each
# registration is remembered (the key and the device's identity, beside the kernel lock), and a
# controller that finds its key gone from a volume it registered on this boot, on the same
# attachment, fences itself: every ANA group of its port inaccessible, so hosts stop sending it
# IO, and every later run on this boot refused. A new attachment (a volume detached and attached
# again) or a new boot starts clean.
# vsa:python RESERVATIONS_PY lib/reservations.py
RTYPE_WEAR=5 # Write Exclusive - All Registrants
RTYPE=0
HELD_KEYS=()

reservation_key() { # this controller's key for this boot
  local boot
  boot=$(<"$BOOT_ID_FILE") || fail "cannot read the boot id from $BOOT_ID_FILE"
  python3 -c "$RESERVATIONS_PY" key "$boot" || fail "cannot derive the reservation key with python3"
}

read_reservations() { # read_reservations DEVICE: RTYPE and HELD_KEYS (hex) from resv-report
  local raw parsed
  raw=$("$NVME_COMMAND" resv-report "$1" --eds -o json 2>&1) ||
    fail "cannot read the reservations of $1 (nvme resv-report): ${raw//$'\n'/ }: is the volume io2 with Multi-Attach, created after 2023-09-18, on a Nitro instance?"
  parsed=$(printf '%s' "$raw" | python3 -c "$RESERVATIONS_PY" keys 2>&1) ||
    fail "cannot read nvme resv-report's JSON for $1: $parsed"
  mapfile -t HELD_KEYS <<<"$parsed"
  RTYPE=${HELD_KEYS[0]}
  HELD_KEYS=("${HELD_KEYS[@]:1}")
}

holds_key() { local k; for k in "${HELD_KEYS[@]}"; do [[ $k == "$1" ]] && return 0; done; return 1; }

registration_file() { printf '%s.registered/%s' "$KERNEL" "$1"; }

attachment_identity() { stat -L -c '%i:%z' "$1" 2>/dev/null; }

remember_registration() { # remember_registration VOLUME DEVICE KEY
  mkdir -p "$KERNEL.registered" || fail "cannot create $KERNEL.registered"
  printf '%s %s\n' "$3" "$(attachment_identity "$2")" >"$(registration_file "$1")" ||
    fail "cannot record the registration of $1"
}

fenced_here() { # fenced_here VOLUME DEVICE KEY: registered on this boot and attachment, now gone
  local file said
  file=$(registration_file "$1")
  [[ -f $file ]] || return 1
  said=$(<"$file")
  [[ $said == "$3 $(attachment_identity "$2")" ]]
}

self_fence() { # self_fence WHY: this port serves nothing more, and no later run on this boot does
  local state
  printf '%s\n' "$RESERVATION_KEY" >"$KERNEL.fenced" || log "cannot record the self-fence in $KERNEL.fenced"
  for state in "$PORT_DIR"/ana_groups/*/ana_state; do
    [[ -f $state ]] || continue
    printf 'inaccessible\n' >"$state" || log "cannot set $(short "$state") inaccessible"
  done
  fail "this controller is fenced: $* It serves nothing more on this boot (every ANA group of its port inaccessible): drain it and replace the instance"
}

refuse_if_fenced() { # a controller fenced earlier on this boot never serves again
  [[ -f $KERNEL.fenced && "$(<"$KERNEL.fenced")" == "$RESERVATION_KEY" ]] || return 0
  self_fence "its reservation key $RESERVATION_KEY was preempted by a survivor earlier on this boot."
}

register_device() { # register_device DEVICE KEY VOLUME: KEY registered here, the volume held type 5
  local said
  read_reservations "$1"
  if ! holds_key "$2"; then
    ! fenced_here "$3" "$1" "$2" ||
      self_fence "its reservation key $2 is gone from $3, registered on this boot: a survivor preempted it."
    # a key of an earlier boot of this instance stays registered (the attachment keeps it):
    # registering again conflicts, so it is replaced, whatever it was
    said=$("$NVME_COMMAND" resv-register "$1" --nrkey="$(($2))" --rrega=0 2>&1) ||
      said=$("$NVME_COMMAND" resv-register "$1" --nrkey="$(($2))" --rrega=2 --iekey 2>&1) ||
      fail "cannot register this controller's key on $1 (nvme resv-register): ${said//$'\n'/ }"
    changed "registered this controller's key on $1"
  fi
  fenced_here "$3" "$1" "$2" || remember_registration "$3" "$1" "$2"
  [[ $RTYPE == "$RTYPE_WEAR" ]] && return 0
  [[ $RTYPE == 0 ]] ||
    fail "$1 is reserved with type $RTYPE, not Write Exclusive - All Registrants ($RTYPE_WEAR): another user of the volume holds it; release it first"
  said=$("$NVME_COMMAND" resv-acquire "$1" --crkey="$(($2))" --rtype="$RTYPE_WEAR" --racqa=0 2>&1) ||
    fail "cannot reserve $1 Write Exclusive - All Registrants (nvme resv-acquire): ${said//$'\n'/ }"
  changed "reserved $1 Write Exclusive - All Registrants"
}

fence_device() { # fence_device DEVICE OWN_KEY VICTIM_KEY: VICTIM_KEY no longer registered
  local said
  [[ $2 != "$3" ]] || fail "FenceKeys lists this controller's own key"
  read_reservations "$1"
  holds_key "$2" || fail "this controller's key is not registered on $1: it cannot fence another"
  holds_key "$3" || return 0 # fenced already (an earlier run, or another survivor)
  if ! said=$("$NVME_COMMAND" resv-acquire "$1" --crkey="$(($2))" --prkey="$(($3))" --rtype="$RTYPE_WEAR" --racqa=2 2>&1); then
    # every survivor fences a lost controller, side by side: a preempt of a key another one
    # removed since the read above is refused (Reservation Conflict: no registrant has it), and
    # the key is gone all the same
    read_reservations "$1"
    holds_key "$3" || { log "key $3 on $1 was preempted meanwhile by another survivor"; return 0; }
    fail "cannot preempt and abort key $3 on $1 (nvme resv-acquire): ${said//$'\n'/ }"
  fi
  read_reservations "$1"
  ! holds_key "$3" || fail "key $3 is still registered on $1 after Preempt and Abort"
  changed "fenced key $3 on $1 (preempted and aborted)"
}
