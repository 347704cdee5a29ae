#!/usr/bin/env bash
# Shared by the host documents (connect-path, disconnect-path, report-paths): the host's NVMe
# paths, read from `nvme list-subsys -o json` by python3 (bash cannot read JSON; every host OS
# the control plane supports has python3) into LISTING, one line per path (the fields:
# documents/lib/nvme_paths.py), and the report of the array's subsystems built from it.
# vsa:python NVME_PATHS_PY lib/nvme_paths.py

list_paths() { # sets LISTING: one line per path, and LISTED_AT: when the listing began (the
  # report's "observedAt": two runs at once on a host can end in the other order than they
  # listed, so the report that listed last, not the run that ended last, says what the host has)
  local raw
  command -v python3 >/dev/null || fail "python3 is needed to read 'nvme list-subsys -o json'"
  LISTED_AT=$(utc_now)
  raw=$("$NVME_COMMAND" list-subsys -o json) || fail "'$NVME_COMMAND list-subsys -o json' failed"
  LISTING=$(printf '%s' "$raw" | python3 -c "$NVME_PATHS_PY") ||
    fail "cannot read the output of '$NVME_COMMAND list-subsys -o json': $raw"
}

head_size() { # head_size SUBSYS-NAME: bytes of the subsystem's multipath head (sysfs "size" is in
  # 512-byte sectors: /sys/class/nvme-subsystem/nvme-subsysN/nvmeXnY/size); null without SYSFS
  local head sectors
  if [[ -n ${SYSFS:-} && -n $1 ]]; then
    for head in "$SYSFS/class/nvme-subsystem/$1"/nvme*n*; do
      [[ ${head##*/} =~ ^nvme[0-9]+n[0-9]+$ && -f $head/size ]] || continue
      sectors=$(<"$head/size")
      printf '%s' $((sectors * 512))
      return 0
    done
  fi
  printf null
}

block_devices() { # block_devices SUBSYS-NAME: the /dev names that hold the subsystem's data, one a
  # line: each multipath head (nvmeXnY), its partitions (sysfs: subdirectories nvmeXnYpZ of the
  # head) and the device-mapper devices stacked on either (sysfs holders/dm-N: /dev/dm-N and
  # /dev/mapper/<dm/name>, as LVM and dm-crypt mount them)
  local head dev holder
  [[ -n ${SYSFS:-} && -n $1 ]] || return 0
  for head in "$SYSFS/class/nvme-subsystem/$1"/nvme*n*; do
    [[ ${head##*/} =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
    for dev in "$head" "$head/${head##*/}"p*; do
      [[ -d $dev ]] || continue
      printf '/dev/%s\n' "${dev##*/}"
      for holder in "$dev"/holders/dm-*; do
        printf '/dev/%s\n' "${holder##*/}"
        if [[ -f $holder/dm/name ]]; then printf '/dev/mapper/%s\n' "$(<"$holder/dm/name")"; fi
      done
    done
  done
}

mounts_json() { # mounts_json SUBSYS-NAME: the JSON list of what is mounted from the subsystem
  # ({device, mountpoint, fstype}), read from MOUNTS (the mounts file, /proc/self/mounts: one
  # "source mountpoint fstype options 0 0" a line, spaces in a path written \040); null when
  # the file cannot be read: unknown, never "nothing mounted"
  local devices source mountpoint fstype rest out=""
  if [[ ! -f $MOUNTS || ! -r $MOUNTS ]]; then
    printf null
    return 0
  fi
  devices=$(block_devices "$1")
  if [[ -n $devices ]]; then
    while read -r source mountpoint fstype rest; do
      if grep -qxF -- "$source" <<<"$devices"; then
        out+=${out:+,}$(printf '{"device":%s,"mountpoint":%s,"fstype":%s}' \
          "$(json "$source")" "$(json "$mountpoint")" "$(json "$fstype")")
      fi
    done <"$MOUNTS"
  fi
  printf '[%s]' "$out"
}

paths_report() { # paths_report LISTING NQN...: sets SUBSYSTEMS_JSON (each subsystem's paths, IO
  # policy and size; with MOUNTS set, what is mounted from it: "mounts") and LIVE_TOTAL
  local listing=$1 nqn paths live policy name p_nqn p_dev p_state p_addr p_port p_policy p_name
  shift
  SUBSYSTEMS_JSON=""
  LIVE_TOTAL=0
  for nqn in "$@"; do
    paths=""
    live=0
    policy=""
    name=""
    while IFS=$'\x1f' read -r p_nqn p_dev p_state p_addr p_port _ p_policy p_name; do
      if [[ $p_nqn != "$nqn" ]]; then continue; fi
      policy=$p_policy name=$p_name
      paths+=${paths:+,}$(printf '{"device":%s,"address":%s,"port":%s,"state":%s}' \
        "$(json "$p_dev")" "$(json "$p_addr")" "$(json "$p_port")" "$(json "$p_state")")
      if [[ $p_state == live ]]; then live=$((live + 1)); fi
    done <<<"$listing"
    SUBSYSTEMS_JSON+=${SUBSYSTEMS_JSON:+,}$(printf '{"nqn":%s,"volume":%s,"paths":[%s],"livePaths":%s,"ioPolicy":%s,"sizeBytes":%s%s}' \
      "$(json "$nqn")" "$(json "${nqn##*:}")" "$paths" "$live" \
      "$([[ -n $policy ]] && json "$policy" || printf null)" "$(head_size "$name")" \
      "$([[ -n ${MOUNTS:-} ]] && printf ',"mounts":%s' "$(mounts_json "$name")")")
    LIVE_TOTAL=$((LIVE_TOTAL + live))
  done
}
