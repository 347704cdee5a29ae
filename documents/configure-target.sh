#!/usr/bin/env bash
# configure-target (controller): export the array's volumes over NVMe/TCP through nvmet's configfs
# (MODE=apply), or remove the array's exports (MODE=teardown).
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES SLOT
# HOST_NQNS ALLOW_ANY_HOST LISTEN_ADDRESS PORT MODE CONFIGFS_ROOT DEVICE_DIR MODPROBE_COMMAND
# AUTHENTICATION KEYS_SECRET_ID DHCHAP_HASH DHCHAP_DHGROUP AWS_COMMAND OWNERS SERVING FENCING
# FENCE_KEYS NVME_COMMAND BOOT_ID_FILE DMESG_COMMAND.
#
# Guarantees: a missing device or an unreadable secret fails before configfs is touched; with
# dh-hmac-chap every allowed host's key is in nvmet before the host is linked; each write respects
# configfs' rules (docs/dataplane.md, "Kernel rules configure-target respects") and is made only
# when the value differs, so a second run changes nothing; no key is shown; runs on one kernel
# are serialised. With OWNERS, this port's ANA group states are set before any namespace joins
# a group, so a namespace is never optimized here unless this controller serves its owner.
# With FENCING=reservations every volume is registered before it is exported, and every key in
# FENCE_KEYS is preempted and confirmed gone from every volume before any ANA state is written:
# a run that cannot fence promotes nothing. A controller whose own key a survivor preempted on
# this boot fences itself (every ANA group of its port inaccessible) and never re-registers on
# that boot (lib/fencing.sh); between runs, a fence watch does the same the moment it finds its
# key gone (lib/fence-watch.sh). On a plain directory tree (tests: no configfs)
# attributes are files and default groups are directories, created and removed as configfs
# would show them.
DOCUMENT=configure-target
# vsa:include lib/common.sh
# vsa:include lib/dhchap.sh
# vsa:include lib/fencing.sh
CHANGES=0
changed() { CHANGES=$((CHANGES + 1)); log "$*"; }

# --- configfs -------------------------------------------------------------------------------
NVMET=$(absolute "$CONFIGFS_ROOT")/nvmet
DEVICES=$(absolute "$DEVICE_DIR")
# vsa:include lib/target-exports.sh
# vsa:include lib/fence-watch.sh

set_attr() { # write the value only when it differs
  [[ "$(read_attr "$1")" == "$2" ]] && return 0
  printf '%s\n' "$2" >"$1" || fail "cannot write '$2' to $1"
  changed "set $(short "$1") = $2"
}

make_group() {
  [[ -d $1 ]] && return 0
  mkdir "$1" || fail "cannot create $1"
  changed "created $(short "$1")"
}

default_group() { # created by configfs with its parent; made here on a plain directory tree
  [[ -d $1 ]] || mkdir "$1"
}

remove_group() {
  [[ -d $1 ]] || return 0
  if [[ $(stat -f -c %T "$1") != configfs ]]; then
    # a plain directory tree: attributes are files, default groups are (empty) directories
    find "$1" -mindepth 1 -maxdepth 1 -type f -delete
    find "$1" -mindepth 1 -maxdepth 1 -type d -empty -delete
  fi
  rmdir "$1" 2>/dev/null || fail "cannot remove $1: it still holds $(find "$1" -mindepth 1 -maxdepth 1 -printf '%f ')"
  changed "removed $(short "$1")"
}

make_link() { # make_link TARGET LINK
  [[ -L $2 ]] && return 0
  ln -s "$1" "$2" || fail "cannot link $2 to $1"
  changed "linked $(short "$2")"
}

drop_link() {
  [[ -L $1 ]] || return 0
  rm "$1" || fail "cannot unlink $1"
  changed "unlinked $(short "$1")"
}

# --- parameters -----------------------------------------------------------------------------
IFS=, read -r -a VOLS <<<"$VOLUMES"
IFS=, read -r -a HOSTS <<<"$HOST_NQNS"
PREFIX=$(subsystem_prefix "$ARRAY_ID")
SERIAL=$(serial "$ARRAY_ID")
MODEL=$(model "$ARRAY_ID")
CNTLID_MIN=$(cntlid_min "$SLOT")
CNTLID_MAX=$(cntlid_max "$SLOT")
PORT_ID=$(port_id "$PORT")
PORT_DIR=$NVMET/ports/$PORT_ID
declare -A WANTED=() TOUCHED_HOSTS=() TOUCHED_PORTS=()
REMOVED=()
KEYED=()
for volume in "${VOLS[@]}"; do
  nqn=$(subsystem_nqn "$ARRAY_ID" "$volume")
  [[ -z ${WANTED[$nqn]:-} ]] || fail "volume $volume is listed twice in Volumes"
  WANTED[$nqn]=$volume
done
for host in "${HOSTS[@]}"; do
  ((${#host} <= 223)) || fail "host NQN $host is longer than 223 bytes"
done
allowed_host() { local h; for h in "${HOSTS[@]}"; do [[ $h == "$1" ]] && return 0; done; return 1; }
# Ownership: a volume's namespace is in its owner slot's ANA group (slot + 2; group 1 is nvmet's
# default, where every namespace of an array without owners stays), and this port serves the
# SERVING groups optimized, the others inaccessible.
IFS=, read -r -a OWNER_SLOTS <<<"$OWNERS"
IFS=, read -r -a SERVING_SLOTS <<<"${SERVING:-$SLOT}"
declare -A OWNER_OF=()
if [[ $MODE == apply && -n $OWNERS ]]; then
  ((${#OWNER_SLOTS[@]} == ${#VOLS[@]})) ||
    fail "Owners lists ${#OWNER_SLOTS[@]} slots for ${#VOLS[@]} volumes: give one owner slot per volume, in Volumes' order"
  for i in "${!VOLS[@]}"; do OWNER_OF[${VOLS[$i]}]=${OWNER_SLOTS[$i]}; done
elif [[ -n $SERVING ]]; then
  [[ $MODE != apply ]] || fail "Serving needs Owners: without owners every controller serves every volume"
fi
IFS=, read -r -a FENCE_KEY_LIST <<<"$FENCE_KEYS"
if [[ $MODE == apply && -n $FENCE_KEYS && $FENCING != reservations ]]; then
  fail "FenceKeys needs Fencing reservations: without a registration here this controller cannot preempt another"
fi
RESERVATION_KEY=""
FENCED=()
WATCH=""
ana_group() { printf '%s' "$(($1 + 2))"; }
serving() { local s; for s in "${SERVING_SLOTS[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
if [[ $MODE == apply && $AUTHENTICATION == dh-hmac-chap ]]; then
  [[ $KEYS_SECRET_ID != none ]] || fail "Authentication dh-hmac-chap needs KeysSecretId (the secret with the keys)"
  [[ $ALLOW_ANY_HOST != true ]] ||
    fail "Authentication dh-hmac-chap needs the hosts listed: with AllowAnyHost=true nvmet has no host entry to hold a key"
fi

# --- steps ----------------------------------------------------------------------------------
set_cntlid_range() { # attr_cntlid_min <= attr_cntlid_max must hold after each write
  local sub=$1 current_max
  current_max=$(read_attr "$sub/attr_cntlid_max")
  if ((CNTLID_MIN > ${current_max:-65519})); then
    set_attr "$sub/attr_cntlid_max" "$CNTLID_MAX"
    set_attr "$sub/attr_cntlid_min" "$CNTLID_MIN"
  else
    set_attr "$sub/attr_cntlid_min" "$CNTLID_MIN"
    set_attr "$sub/attr_cntlid_max" "$CNTLID_MAX"
  fi
}

configure_hosts() {
  local sub=$1 link name
  if [[ $ALLOW_ANY_HOST == true ]]; then
    for link in "$sub"/allowed_hosts/*; do
      TOUCHED_HOSTS[${link##*/}]=1
      drop_link "$link"
    done
    set_attr "$sub/attr_allow_any_host" 1
    return 0
  fi
  set_attr "$sub/attr_allow_any_host" 0
  for name in "${HOSTS[@]}"; do
    make_link "$NVMET/hosts/$name" "$sub/allowed_hosts/$name"
  done
  for link in "$sub"/allowed_hosts/*; do
    name=${link##*/}
    if ! allowed_host "$name"; then
      TOUCHED_HOSTS[$name]=1
      drop_link "$link"
    fi
  done
}

# The size nvmet exports a namespace at is not readable: configfs has no size attribute (the
# namespace's device_path, device_uuid, device_nguid, enable, buffered_io, ana_grpid and the
# write-only revalidate_size), and the controller is no host of itself. So this document keeps,
# per namespace, the device size at which it last had nvmet read it (at enable, or by writing
# revalidate_size) in $SIZES, and writes revalidate_size when the device's size differs from
# that record: only the namespaces whose device grew are touched. Without a record (one lost with
# /tmp, or a namespace another run enabled) it writes it once:
# harmless, as nvmet sends hosts an event only when the size did change, and a namespace is
# never disabled for it, so no path blinks.

record_size() { # record_size NS SIZE: nvmet has read the device at SIZE bytes
  [[ $2 != null ]] || return 0
  mkdir -p "$SIZES" && printf '%s\n' "$2" >"$(size_record "$1")" || fail "cannot record a size in $SIZES"
}

revalidate_size() { # revalidate_size NS DEVICE: an enabled namespace re-reads a changed device size
  local ns=$1 size recorded
  size=$(device_size "$2")
  [[ $size != null ]] || return 0
  recorded=$(read_attr "$(size_record "$ns")")
  [[ $size == "$recorded" ]] && return 0
  printf '1\n' >"$ns/revalidate_size" ||
    fail "cannot write 1 to $ns/revalidate_size: nvmet re-reads a namespace's size only through it (Linux 5.8 and later)"
  changed "revalidated $(short "$ns") at $size bytes (recorded: ${recorded:-none})"
  record_size "$ns" "$size"
}

configure_namespace() {
  local ns=$1 device=$2 uuid=$3 nguid=$4 group=$5 buffered="" enabled
  make_group "$ns"
  # the ANA group before the namespace is enabled (nvmet takes a new group while enabled too:
  # the hosts get an ANA change event). On a plain tree without the attribute, group 1 is the
  # default configfs would show.
  [[ ! -f $ns/ana_grpid && $group == 1 ]] || set_attr "$ns/ana_grpid" "$group"
  [[ -f $ns/buffered_io ]] && buffered=0 # two controllers write one device: never cache
  if [[ "$(read_attr "$ns/device_path")" != "$device" || "$(read_attr "$ns/device_uuid")" != "$uuid" ||
    "$(read_attr "$ns/device_nguid")" != "$nguid" ||
    (-n $buffered && "$(read_attr "$ns/buffered_io")" != "$buffered") ]]; then
    if [[ "$(read_attr "$ns/enable")" == 1 ]]; then
      set_attr "$ns/enable" 0 # these attributes change only while the namespace is disabled
    fi
    set_attr "$ns/device_path" "$device"
    set_attr "$ns/device_uuid" "$uuid"
    set_attr "$ns/device_nguid" "$nguid"
    [[ -z $buffered ]] || set_attr "$ns/buffered_io" "$buffered"
  fi
  enabled=$(read_attr "$ns/enable")
  set_attr "$ns/enable" 1
  if [[ $enabled == 1 ]]; then
    revalidate_size "$ns" "$device"
  else
    record_size "$ns" "$(device_size "$device")" # enabling read the device's size
  fi
}

configure_subsystem() {
  local volume=$1 nqn sub
  nqn=$(subsystem_nqn "$ARRAY_ID" "$volume")
  sub=$NVMET/subsystems/$nqn
  make_group "$sub"
  default_group "$sub/namespaces"
  default_group "$sub/allowed_hosts"
  set_attr "$sub/attr_serial" "$SERIAL"
  set_attr "$sub/attr_model" "$MODEL"
  set_cntlid_range "$sub"
  configure_hosts "$sub"
  configure_namespace "$sub/namespaces/1" "$DEVICES/$(device_name "$volume")" \
    "$(namespace_uuid "$volume")" "$(namespace_nguid "$volume")" "$(namespace_group "$volume")"
}

namespace_group() { # the volume's ANA group: its owner's, or nvmet's default
  if [[ -n ${OWNER_OF[$1]:-} ]]; then ana_group "${OWNER_OF[$1]}"; else printf 1; fi
}

configure_ana_states() { # this port's state of each owner's group, before a namespace joins one
  ((${#OWNER_OF[@]} > 0)) || return 0
  local slot group state
  local -A groups=()
  for slot in "${OWNER_SLOTS[@]}" "${SERVING_SLOTS[@]}"; do groups[$(ana_group "$slot")]=$slot; done
  make_group "$PORT_DIR"
  default_group "$PORT_DIR/ana_groups"
  for group in "${!groups[@]}"; do
    make_group "$PORT_DIR/ana_groups/$group"
    state=inaccessible
    if serving "${groups[$group]}"; then state=optimized; fi
    set_attr "$PORT_DIR/ana_groups/$group/ana_state" "$state"
  done
}

fence_and_register() { # on every volume: this controller registered, then each lost one preempted
  local volume device victim
  RESERVATION_KEY=$(reservation_key)
  refuse_if_fenced
  for volume in "${VOLS[@]}"; do
    device=$DEVICES/$(device_name "$volume")
    register_device "$device" "$RESERVATION_KEY" "$volume"
    for victim in "${FENCE_KEY_LIST[@]}"; do
      fence_device "$device" "$RESERVATION_KEY" "$victim"
    done
  done
  FENCED=("${FENCE_KEY_LIST[@]}")
}

fencing_json() {
  [[ $FENCING == reservations && $MODE == apply ]] || { printf '{"method":"none"}'; return 0; }
  printf '{"method":"reservations","key":%s,"fenced":[%s],"watch":%s}' "$(json "$RESERVATION_KEY")" \
    "$(for k in "${FENCED[@]}"; do printf '%s' "${sep:-}$(json "$k")"; sep=,; done)" "${WATCH:-null}"
}

ana_json() { # the ownership asked and this port's group states read back (null without owners)
  ((${#OWNER_OF[@]} > 0)) || { printf null; return 0; }
  local owners="" states="" volume dir
  for volume in "${VOLS[@]}"; do owners+=${owners:+,}$(printf '%s:%s' "$(json "$volume")" "${OWNER_OF[$volume]}"); done
  for dir in "$PORT_DIR"/ana_groups/*/; do
    dir=${dir%/}
    [[ -f $dir/ana_state ]] || continue
    states+=${states:+,}$(printf '{"id":%s,"state":%s}' "${dir##*/}" "$(json "$(read_attr "$dir/ana_state")")")
  done
  printf '{"owners":{%s},"serving":[%s],"groups":[%s]}' "$owners" "$(IFS=,; printf '%s' "${SERVING_SLOTS[*]}")" "$states"
}

set_key() { # set_key ATTRIBUTE KEY WHAT: a key, written only when it differs, never shown
  [[ "$(read_attr "$1")" == "$2" ]] && return 0
  printf '%s\n' "$2" >"$1" || fail "cannot write $3 to $(short "$1")"
  changed "set $(short "$1") ($3, a new key)"
}

configure_keys() { # each allowed host's key and the controller key (KEYS, from the secret) into nvmet
  local host dir
  for host in "${HOSTS[@]}"; do
    dir=$NVMET/hosts/$host
    set_attr "$dir/dhchap_hash" "$DHCHAP_HASH"
    set_attr "$dir/dhchap_dhgroup" "$DHCHAP_DHGROUP"
    set_key "$dir/dhchap_key" "${KEYS[hosts/$host]}" "the host's key"
    set_key "$dir/dhchap_ctrl_key" "${KEYS[controllerKey]}" "the controller key"
    KEYED+=("$host")
  done
  KEYS=()
}

configure_port() {
  local link name relink=()
  make_group "$PORT_DIR"
  default_group "$PORT_DIR/subsystems"
  if [[ "$(read_attr "$PORT_DIR/addr_trtype")" != tcp || "$(read_attr "$PORT_DIR/addr_adrfam")" != ipv4 ||
    "$(read_attr "$PORT_DIR/addr_traddr")" != "$LISTEN_ADDRESS" ||
    "$(read_attr "$PORT_DIR/addr_trsvcid")" != "$PORT" ]]; then
    # the address changes only while nothing is linked: unlink (any array's), change, relink
    for link in "$PORT_DIR"/subsystems/*; do
      relink+=("${link##*/}")
      drop_link "$link"
    done
    set_attr "$PORT_DIR/addr_trtype" tcp
    set_attr "$PORT_DIR/addr_adrfam" ipv4
    set_attr "$PORT_DIR/addr_traddr" "$LISTEN_ADDRESS"
    set_attr "$PORT_DIR/addr_trsvcid" "$PORT"
    for name in "${relink[@]}"; do
      if [[ -d $NVMET/subsystems/$name ]]; then
        make_link "$NVMET/subsystems/$name" "$PORT_DIR/subsystems/$name"
      fi
    done
  fi
  for name in "${!WANTED[@]}"; do
    make_link "$NVMET/subsystems/$name" "$PORT_DIR/subsystems/$name"
  done
}

unlink_from_ports() { # unlink this array's subsystem from every port except KEEP
  local nqn=$1 keep=${2:-} link port
  for link in "$NVMET"/ports/*/subsystems/"$nqn"; do
    port=${link%/subsystems/*}
    [[ $port == "$keep" ]] && continue
    TOUCHED_PORTS[$port]=1
    drop_link "$link"
  done
}

remove_subsystem() {
  local nqn=$1 sub=$NVMET/subsystems/$1 ns link
  unlink_from_ports "$nqn"
  for ns in "$sub"/namespaces/*; do
    if [[ "$(read_attr "$ns/enable")" == 1 ]]; then set_attr "$ns/enable" 0; fi
    remove_group "$ns"
    rm -f "$(size_record "$ns")"
  done
  for link in "$sub"/allowed_hosts/*; do
    TOUCHED_HOSTS[${link##*/}]=1
    drop_link "$link"
  done
  remove_group "$sub"
  REMOVED+=("$nqn")
}

prune() { # ports and hosts this run left unused (never another array's)
  local port host links group
  for port in "${!TOUCHED_PORTS[@]}"; do
    links=("$port"/subsystems/*)
    ((${#links[@]} == 0)) || continue
    # configfs removes a group only once the groups made in it are gone: the owners' ANA groups
    # first (group 1 is nvmet's own, removed with the port)
    for group in "$port"/ana_groups/*/; do
      group=${group%/}
      [[ ${group##*/} == 1 ]] || remove_group "$group"
    done
    remove_group "$port"
  done
  for host in "${!TOUCHED_HOSTS[@]}"; do
    if [[ $MODE == apply && $ALLOW_ANY_HOST != true ]] && allowed_host "$host"; then continue; fi
    links=("$NVMET"/subsystems/*/allowed_hosts/"$host")
    if ((${#links[@]} == 0)); then remove_group "$NVMET/hosts/$host"; fi
  done
}

report() {
  local first=1 nqn volume removed="" hosts="" subsystems="" port=null cntlid=null
  for nqn in "${REMOVED[@]}"; do removed+=${removed:+,}$(json "$nqn"); done
  if [[ $MODE == apply ]]; then
    if [[ $ALLOW_ANY_HOST != true ]]; then
      for nqn in "${HOSTS[@]}"; do hosts+=${hosts:+,}$(json "$nqn"); done
    fi
    for volume in "${VOLS[@]}"; do
      nqn=$(subsystem_nqn "$ARRAY_ID" "$volume")
      ((first)) || subsystems+=,
      first=0
      subsystems+=$(printf '{"nqn":%s,"volume":%s,"device":%s,"uuid":%s,"nguid":%s}' \
        "$(json "$nqn")" "$(json "$volume")" "$(json "$DEVICES/$(device_name "$volume")")" \
        "$(json "$(namespace_uuid "$volume")")" "$(json "$(namespace_nguid "$volume")")")
    done
    port=$(printf '{"id":%s,"trtype":"tcp","adrfam":"ipv4","traddr":%s,"trsvcid":%s}' \
      "$PORT_ID" "$(json "$LISTEN_ADDRESS")" "$(json "$PORT")")
    cntlid=$(printf '{"min":%s,"max":%s}' "$CNTLID_MIN" "$CNTLID_MAX")
  fi
  printf '{"document":"%s","arrayId":%s,"mode":"%s","slot":%s,"subsystems":[%s],"serial":%s,"model":%s,' \
    "$DOCUMENT" "$(json "$ARRAY_ID")" "$MODE" "$SLOT" "$subsystems" "$(json "$SERIAL")" "$(json "$MODEL")"
  exports_json
  printf '"cntlid":%s,"port":%s,"allowAnyHost":%s,"hosts":[%s],"removed":[%s],"changes":%s,"authentication":%s,"fencing":%s,"ana":%s,"exports":[%s],"observedAt":%s}\n' \
    "$cntlid" "$port" "$ALLOW_ANY_HOST" "$hosts" "$removed" "$CHANGES" "$(authentication_json)" "$(fencing_json)" "$(ana_json)" "$EXPORTS_JSON" "$(json "$EXPORTS_AT")"
}

authentication_json() { # what was asked and which hosts got their key in nvmet (never a key)
  local keyed="" host
  if [[ $AUTHENTICATION != dh-hmac-chap || $MODE != apply ]]; then
    printf '{"method":"%s"}' "$AUTHENTICATION"
    return 0
  fi
  for host in "${KEYED[@]}"; do keyed+=${keyed:+,}$(json "$host"); done
  printf '{"method":"dh-hmac-chap","keysSecretId":%s,"hash":%s,"dhgroup":%s,"bidirectional":true,"keyedHosts":[%s]}' \
    "$(json "$KEYS_SECRET_ID")" "$(json "$DHCHAP_HASH")" "$(json "$DHCHAP_DHGROUP")" "$keyed"
}

apply() {
  local volume missing=() sub link
  ((${#VOLS[@]} > 0)) || fail "Volumes is empty: list the array's volumes (Mode=teardown removes the array)"
  # every device first: a volume that is not attached changes nothing
  for volume in "${VOLS[@]}"; do
    [[ -e $DEVICES/$(device_name "$volume") ]] || missing+=("$volume ($DEVICES/$(device_name "$volume"))")
  done
  ((${#missing[@]} == 0)) ||
    fail "no EBS NVMe device for ${missing[*]}: attach the volume to this instance first"
  if [[ $AUTHENTICATION == dh-hmac-chap ]]; then
    # the secret first, too: one that cannot be read, or lacks a host's key, changes nothing
    read_secret "$KEYS_SECRET_ID"
    local wanted=(controllerKey) host
    for host in "${HOSTS[@]}"; do wanted+=("hosts/$host"); done
    secret_keys "$KEYS_SECRET_ID" "${wanted[@]}"
    unset SECRET
  fi
  if [[ $FENCING == reservations ]]; then
    fence_and_register
    start_fence_watch
  fi
  "$MODPROBE_COMMAND" nvmet || fail "'$MODPROBE_COMMAND nvmet' failed"
  "$MODPROBE_COMMAND" nvmet-tcp || fail "'$MODPROBE_COMMAND nvmet-tcp' failed"
  [[ -d $NVMET/subsystems && -d $NVMET/ports && -d $NVMET/hosts ]] ||
    fail "no $NVMET/{subsystems,ports,hosts} after loading nvmet: is configfs mounted at $CONFIGFS_ROOT?"
  if [[ $ALLOW_ANY_HOST != true ]]; then
    for host in "${HOSTS[@]}"; do make_group "$NVMET/hosts/$host"; done
  fi
  # keys before the hosts are linked: a newly allowed host is never let in without its key
  [[ $AUTHENTICATION != dh-hmac-chap ]] || configure_keys
  configure_ana_states
  for volume in "${VOLS[@]}"; do configure_subsystem "$volume"; done
  configure_port
  for nqn in "${!WANTED[@]}"; do unlink_from_ports "$nqn" "$PORT_DIR"; done # a former Port
  for sub in "$NVMET"/subsystems/"$PREFIX"*; do
    [[ -n ${WANTED[${sub##*/}]:-} ]] || remove_subsystem "${sub##*/}"
  done
  prune
}

teardown() {
  local sub
  stop_fence_watch
  if [[ ! -d $NVMET/subsystems ]]; then
    log "nvmet is not loaded ($NVMET): nothing to tear down"
    return 0
  fi
  for sub in "$NVMET"/subsystems/"$PREFIX"*; do remove_subsystem "${sub##*/}"; done
  prune
}

# configure-target runs are serialised per kernel: two at once would interleave their writes
exec 9>"$KERNEL.lock"
flock -w 120 9 || fail "another configure-target still runs on this instance after 120 s"
case $MODE in
  apply) apply ;;
  teardown) teardown ;;
esac
report
