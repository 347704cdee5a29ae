#!/usr/bin/env bash
# Shared by the controller documents (configure-target, report-exports): configfs reads and what
# nvmet exports for the array, read back from configfs. The including script sets NVMET
# (configfs' nvmet directory) first and, before calling exports_json, PREFIX (the array's
# subsystem NQN prefix).

short() { printf '%s' "${1#"$NVMET"/}"; }
# this kernel's configure-target runs: their lock, and the size nvmet last read of each namespace
KERNEL=${TMPDIR:-/tmp}/vsa-configure-target-$(printf '%s' "$NVMET" | sha256sum | cut -c1-16)
SIZES=$KERNEL.sizes
# where the size nvmet last read of a namespace is recorded (configure-target's revalidate_size)
size_record() { printf '%s/%s' "$SIZES" "$(short "$1" | tr / '#')"; }

read_attr() { # the attribute's value without its newline; empty when it does not exist
  if [[ -f $1 ]]; then
    local value
    value=$(<"$1")
    printf '%s' "$value"
  fi
}

device_size() { # bytes: a block device as the kernel sizes it, a file (nvmet's file backend) its length
  if [[ -b $1 ]]; then
    blockdev --getsize64 "$1" 2>/dev/null || printf null
  elif [[ -f $1 ]]; then
    stat -L -c %s "$1"
  else
    printf null
  fi
}

exports_json() { # what nvmet exports for this array now, read back from configfs (not what was
  # asked); EXPORTS_AT: when the reading began (the report's "observedAt")
  local sub nqn ns link port hosts namespaces ports device_bytes size_bytes first=1
  EXPORTS_AT=$(utc_now)
  EXPORTS_JSON=""
  for sub in "$NVMET"/subsystems/"$PREFIX"*; do
    nqn=${sub##*/}
    hosts="" namespaces="" ports=""
    for link in "$sub"/allowed_hosts/*; do hosts+=${hosts:+,}$(json "${link##*/}"); done
    for ns in "$sub"/namespaces/*; do
      # sizeBytes: the size nvmet last read (recorded, see size_record; the device's without a
      # record), deviceBytes: the device's now
      device_bytes=$(device_size "$(read_attr "$ns/device_path")")
      size_bytes=$(read_attr "$(size_record "$ns")")
      namespaces+=${namespaces:+,}$(printf '{"nsid":%s,"enabled":%s,"device":%s,"sizeBytes":%s,"deviceBytes":%s}' \
        "${ns##*/}" "$([[ "$(read_attr "$ns/enable")" == 1 ]] && echo true || echo false)" \
        "$(json "$(read_attr "$ns/device_path")")" "${size_bytes:-$device_bytes}" "$device_bytes")
    done
    for link in "$NVMET"/ports/*/subsystems/"$nqn"; do
      port=${link%/subsystems/*}
      ports+=${ports:+,}$(printf '{"id":%s,"traddr":%s,"trsvcid":%s}' "$(json "${port##*/}")" \
        "$(json "$(read_attr "$port/addr_traddr")")" "$(json "$(read_attr "$port/addr_trsvcid")")")
    done
    ((first)) || EXPORTS_JSON+=,
    first=0
    EXPORTS_JSON+=$(printf '{"nqn":%s,"volume":%s,"allowAnyHost":%s,"allowedHosts":[%s],"namespaces":[%s],"ports":[%s]}' \
      "$(json "$nqn")" "$(json "${nqn##*:}")" \
      "$([[ "$(read_attr "$sub/attr_allow_any_host")" == 1 ]] && echo true || echo false)" \
      "$hosts" "$namespaces" "$ports")
  done
}
