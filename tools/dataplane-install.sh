#!/usr/bin/env bash
# What the data-plane tier (tests/dataplane: the documents on real Linux kernels in QEMU guests)
# needs, idempotently; called by tools/install.sh with the Python to build the venv with.
#   apt (root only, when missing): qemu-system-x86 (the guests, TCG), nvme-cli, fio, xfsprogs,
#     kmod, iproute2, util-linux, busybox-static (the guests run the host's own tools: virtme-ng
#     shares the host's root file system with them read-only over virtio-9p)
#   .dataplane/kernel/   Debian bookworm's 6.12 kernel (below) unpacked with dpkg -x, never
#                        installed: boot/vmlinuz-* and lib/modules/* (nvmet, nvmet-tcp, nvme-tcp,
#                        xfs, 9p, virtio...). Fetched once; a newer point release is taken up
#                        when the cache is removed (rm -rf .dataplane/kernel).
#   .dataplane/venv/     virtme-ng, pinned in requirements/dataplane.txt (boots a kernel on a
#                        copy-on-write view of this machine's root file system; the initramfs it
#                        builds per boot takes a fraction of a second)
# Without root and apt, what is missing is named and the tier skips (fails under CI=true).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${1:-python3}"
STATE="$ROOT/.dataplane"
mkdir -p "$STATE"

missing=()
for pkg in qemu-system-x86 nvme-cli fio xfsprogs kmod iproute2 util-linux busybox-static dmsetup e2fsprogs; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing ${missing[*]} (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
  else
    echo "note: ${missing[*]} not installed and cannot be here (needs root and apt): tests/dataplane will skip" >&2
  fi
fi

# QEMU 10 or newer. Bookworm's own (7.2) now and then corrupts a TCG guest's RFLAGS under network
# load: the low bits of a pointer land in them (TF and DF set in kernel code), a string copy then
# runs backwards over the heap and the guest's kernel dies in net_rx_action. Under the load of
# `make dataplane-soak` (megabyte writes over NVMe/TCP, other work on the machine) it killed a
# guest within a minute in 2 of 3 runs; the tier's own paced scenarios met it in 1 of 8 runs.
# Bookworm's backports carry 10.0, which met it in none (docs/measurements.md). Installed from
# there for qemu-system-x86 and what it needs from there alone: backports have apt priority 100,
# so nothing else is upgraded from them.
QEMU_MAJOR_MIN=10
qemu_major() { qemu-system-x86_64 --version 2>/dev/null | awk 'NR == 1 {split($4, v, "."); print v[1] + 0}'; }
if (($(qemu_major || true) + 0 < QEMU_MAJOR_MIN)); then
  codename=$(sed -n "s/^VERSION_CODENAME=//p" /etc/os-release 2>/dev/null)
  if [[ $EUID -eq 0 && $codename == bookworm ]] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing qemu-system-x86 from bookworm-backports (QEMU $QEMU_MAJOR_MIN or newer)"
    export DEBIAN_FRONTEND=noninteractive
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "deb http://deb.debian.org/debian bookworm-backports main" >/etc/apt/sources.list.d/bookworm-backports.list
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null
  else
    echo "note: QEMU $QEMU_MAJOR_MIN or newer is needed (root on Debian bookworm installs it from backports): tests/dataplane will skip" >&2
  fi
fi

# The guest kernel: Debian bookworm's 6.12 series (VSA_DATAPLANE_SERIES, default 6.12: the newest
# point release apt offers of linux-image-6.12.<n>+deb12-amd64-unsigned, the plain amd64 flavour,
# whose config has the 9p modules virtme-ng needs; Amazon Linux 2023 ships the same series). Its
# NVMe/TCP host fails a lost controller's IO over at the keep-alive's first timeout, where 6.1
# waits for a second one (docs/dataplane.md, Failover settings). VSA_DATAPLANE_SERIES=6.1 takes bookworm's
# default kernel (the package linux-image-amd64 depends on). A cached kernel of another series
# is replaced.
SERIES="${VSA_DATAPLANE_SERIES:-6.12}"
kernel="$STATE/kernel"
if [[ -f $kernel/PACKAGE ]] && ! grep -q "^Package: linux-image-${SERIES}\." "$kernel/PACKAGE"; then
  echo "==> the cached guest kernel is not of the $SERIES series: fetching it anew"
  rm -rf "$kernel"
fi
pick_image() {
  if [[ $SERIES == 6.1 ]]; then
    apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}'
  else
    apt-cache search --names-only "^linux-image-${SERIES//./\\.}\.[0-9]+\+deb12-amd64-unsigned\$" 2>/dev/null |
      awk '{print $1}' | sort -V | tail -1
  fi
}
if ! compgen -G "$kernel/boot/vmlinuz-*" >/dev/null; then
  if command -v apt-get >/dev/null 2>&1; then
    image=$(pick_image)
    if [[ -z $image && $EUID -eq 0 ]]; then
      apt-get update -qq
      image=$(pick_image)
    fi
    if [[ -n $image ]]; then
      echo "==> fetching the guest kernel $image (apt-get download, unpacked into .dataplane/kernel)"
      work="$STATE/kernel.tmp"
      rm -rf "$work"
      mkdir -p "$work"
      (cd "$work" && apt-get download -qq -o APT::Sandbox::User=root "$image" >/dev/null)
      dpkg -x "$work"/*.deb "$work/root"
      version=$(basename "$(ls -d "$work"/root/lib/modules/*)")
      depmod -b "$work/root" "$version" # the guests' modprobe reads modules.dep
      dpkg-deb -f "$work"/*.deb Package Version >"$work/root/PACKAGE"
      rm -rf "$kernel"
      mv "$work/root" "$kernel"
      rm -rf "$work"
    else
      echo "note: no $SERIES guest kernel in apt's lists (apt-get update as root): tests/dataplane will skip" >&2
    fi
  fi
fi

# virtme-ng, in its own venv (it is a host tool, not a dependency of the product).
venv="$STATE/venv"
digest="$(cat "$ROOT/requirements/dataplane.txt" | sha256sum | cut -c1-16)"
if [[ "$(cat "$venv/.stamp" 2>/dev/null)" != "$digest" ]]; then
  echo "==> installing $venv (virtme-ng)"
  rm -rf "$venv"
  if [[ -n ${VSA_UV:-} ]]; then # tools/install.sh's uv
    "$VSA_UV" venv --quiet --python "$PYTHON" "$venv"
    "$VSA_UV" pip install --quiet --python "$venv/bin/python" -r "$ROOT/requirements/dataplane.txt"
  else
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/requirements/dataplane.txt"
  fi
  echo "$digest" >"$venv/.stamp"
fi
