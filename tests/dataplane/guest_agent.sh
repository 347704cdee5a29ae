#!/bin/bash
# The in-guest agent of tests/dataplane (a stand-in for the SSM agent): the guest's only
# process besides the kernel's, started by virtme-ng's init as `bash guest_agent.sh DIR`.
#
# DIR is this guest's directory on the host, shared read-write over virtio-9p at the same path.
# Boot: load the drivers udev would have loaded (there is no udev), mount configfs as systemd
# does, bring up each NIC with the
# address boot.env gives it, make the EBS-style device names (/dev/disk/by-id/nvme-Amazon_
# Elastic_Block_Store_vol<hex> -> the virtio disk whose serial is the volume id, as a Nitro
# instance shows an attached EBS volume), then write DIR/ready.
# Then, forever: every DIR/req/<id>.sh (written elsewhere and renamed in, so never seen half
# written) is moved to DIR/run/ and started in the background as the SSM agent runs a command
# (`/bin/sh -c <script file>`, its own process group, cwd its own directory, root); its stdout,
# stderr and exit code land in DIR/out/<id>.{out,err,rc} (rc last, renamed in when complete),
# with its start and end instants (guest clock, epoch seconds) in DIR/out/<id>.times.
set -u
DIR=$1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
exec >>"$DIR/agent.log" 2>&1
echo "agent: booted at $(date +%s.%N), kernel $(uname -r)"

# shellcheck source=/dev/null
source "$DIR/boot.env" # ADDRESSES (one per NIC, in order), MODULES, VOLUMES (vol-id ...)
for module in $MODULES; do modprobe "$module" || echo "agent: modprobe $module failed"; done
# what systemd does on a stock instance: configfs mounted (nvmet is configured through it)
modprobe configfs && mount -t configfs configfs /sys/kernel/config
ip link set lo up
i=0
for address in $ADDRESSES; do
  ip link set "eth$i" up
  ip addr add "$address" dev "eth$i"
  i=$((i + 1))
done
mkdir -p /dev/disk/by-id
for volume in $VOLUMES; do
  for block in /sys/block/vd*; do
    if [[ "$(cat "$block/serial" 2>/dev/null)" == "${volume//-/}" ]]; then
      ln -sfn "../../${block##*/}" "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_${volume//-/}"
    fi
  done
done
ip -br addr
ls -l /dev/disk/by-id
date +%s.%N >"$DIR/ready.tmp" && mv "$DIR/ready.tmp" "$DIR/ready"

mkdir -p "$DIR/req" "$DIR/run" "$DIR/out"
while :; do
  for request in "$DIR"/req/*.sh; do
    [[ -e $request ]] || continue
    id=${request##*/}
    id=${id%.sh}
    mkdir -p "$DIR/run/$id"
    mv "$request" "$DIR/run/$id/_script.sh"
    chmod +x "$DIR/run/$id/_script.sh"
    (
      cd "$DIR/run/$id" || exit 1
      start=$(date +%s.%N)
      setsid -w /bin/sh -c "$DIR/run/$id/_script.sh" </dev/null >"$DIR/out/$id.out" 2>"$DIR/out/$id.err"
      rc=$?
      printf '%s %s\n' "$start" "$(date +%s.%N)" >"$DIR/out/$id.times"
      echo "$rc" >"$DIR/out/$id.rc.tmp"
      mv "$DIR/out/$id.rc.tmp" "$DIR/out/$id.rc"
    ) &
  done
  sleep 0.1
done
