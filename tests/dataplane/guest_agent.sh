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
# The root is the host's over 9p, uncached, so every exec re-reads its files (under TCG ~0.5 s
# for /bin/true, 5-9 s for a python3 start). lab.py attaches a read-only ext4 image of /usr's
# program directories (serial vsaprograms); they are bound from it over /usr's, so programs load
# from a virtio disk through the guest's own page cache. A disk, not a second cache=loose 9p
# export: with that export the authentication lab's controllers oopsed in nvmet_tcp_io_work.
programs=""
for block in /sys/block/vd*; do
  [[ "$(cat "$block/serial" 2>/dev/null)" == vsaprograms ]] && programs=/dev/${block##*/}
done
mkdir -p /run/programs
if [[ -n $programs ]] && modprobe ext4 && mount -t ext4 -o ro "$programs" /run/programs; then
  for dir in /run/programs/*/ /run/programs/lib/*/; do
    dir=${dir%/}
    [[ $dir == /run/programs/lib || $dir == /run/programs/lost+found ]] && continue
    mount --bind "$dir" "/usr/${dir#/run/programs/}"
  done
  echo "agent: programs bound from $programs"
else
  echo "agent: no program image; programs load through uncached 9p"
fi
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
# The loop sleeps on the virtio-serial port lab.py gives the guest (name vsa.agent): the test
# writes a line into it after each request it drops, so a request starts at once and an idle
# guest looks at req/ only every 2 s. Polling req/ ten times a second (a 9p directory read each
# time) kept each idle guest's emulator busy under TCG, taking CPU from the guests that had work
# (docs/measurements.md, "The data-plane tier"). Without the port: a read with a 0.1 s timeout
# on a FIFO nobody writes (never /bin/sleep: a fork ten times a second costs the emulated CPU
# more).
port=""
for name in /sys/class/virtio-ports/*/name; do
  [[ "$(cat "$name" 2>/dev/null)" == vsa.agent ]] && port=/dev/$(basename "$(dirname "$name")")
done
if [[ -n $port ]] && exec 3<>"$port"; then
  pause() { read -r -t 2 -u 3 || true; }
  echo "agent: woken through $port"
elif mkfifo /run/agent-tick && exec 3<>/run/agent-tick; then
  pause() { read -r -t 0.1 -u 3 || true; }
  echo "agent: no vsa.agent port; polling req/ every 0.1 s"
else
  echo "agent: no port and no FIFO for the poll's pause; forking sleep instead"
  pause() { sleep 0.1; }
fi
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
      start=$EPOCHREALTIME
      setsid -w /bin/sh -c "$DIR/run/$id/_script.sh" </dev/null >"$DIR/out/$id.out" 2>"$DIR/out/$id.err"
      rc=$?
      printf '%s %s\n' "$start" "$EPOCHREALTIME" >"$DIR/out/$id.times"
      echo "$rc" >"$DIR/out/$id.rc.tmp"
      mv "$DIR/out/$id.rc.tmp" "$DIR/out/$id.rc"
    ) &
  done
  pause
done
