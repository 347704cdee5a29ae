"""EBS volumes' blocks in the local cloud: one sparse file per volume, one sparse copy per snapshot.

Where the data lives, under the run directory (``run_dir.data_dir()``, wiped at the next start):

* ``ebs/volumes/nvme-Amazon_Elastic_Block_Store_vol<hex>``: the volume's blocks, a sparse file as
  long as the volume (only what was written takes space), until DeleteVolume (or the termination
  that deletes it). A volume created from a snapshot has it from CreateVolume on, a fresh one
  from its first use (an attach, a snapshot): moto makes and deletes a volume for each of its
  built-in AMIs, well over a thousand, and those need no file. Every managed node the volume is
  attached to shows this one file at its device path (``ssm_nodes``: a symbolic link), so a
  Multi-Attach volume is one set of blocks that every instance it is attached to reads and
  writes (EBS User Guide, "Attach an EBS volume to multiple EC2 instances using Multi-Attach":
  "Each instance to which the volume is attached has full read and write permission to the
  shared volume"). The file bears the device's by-id name because that is how a reader resolving
  the link knows the volume (the test nodes' nvme stand-in, ``tests/fakes/nvme``, keys a
  volume's reservations on the resolved name), as a Nitro instance's NVMe device names the
  volume in its serial.
* ``ebs/snapshots/snap-<hex>``: the snapshot's blocks, a sparse copy of the volume's file made
  during the CreateSnapshot or CreateSnapshots call, before it answers ("Create Amazon EBS
  snapshots": "The snapshot is created immediately, but it remains in the pending state until
  all of data has been transferred to Amazon S3 ... You can continue to use the volume during
  this time without impacting the snapshot. The snapshot includes only the data that was written
  to the volume at the time the snapshot was requested."). Kept until DeleteSnapshot.

A fresh volume (CreateVolume without a snapshot) holds zeros but for its first line, the volume
id: the managed-node tests (tests/localcloud/test_ssm_nodes.py) identify a device by it; nothing
else reads it. A volume created from a snapshot holds the
snapshot's blocks ("Create an Amazon EBS volume": "If you create a volume from a snapshot, the
volume begins as an exact replica of the volume that was used to create that snapshot"; EBS loads
it lazily, but reads return the snapshot's data, as here from the start), grown to the volume's
size when that is larger.

A copy costs what was written, not the volume's size: only the file's data extents are copied
(``SEEK_DATA``/``SEEK_HOLE``, then ``copy_file_range``), the holes stay holes, so a 100 GiB
volume with a few MiB written copies a few MiB. This needs a file system that reports holes
(ext4, XFS, Btrfs, tmpfs; overlayfs passes them through): one that does not would copy zeros.

Crash consistency of a CreateSnapshots set: ``take_snapshots`` holds an exclusive ``flock`` on
every volume file of the set while it copies them all, so a writer that holds a shared ``flock``
on the device while it writes (the lock follows the link to the volume's file) never has one of
its writes in one snapshot of the set while an earlier one is missing from another. A writer that
takes no lock sees the set taken within the copies' few milliseconds, not at one instant.
"""

import errno
import fcntl
import os
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO

from vsa_localcloud.run_dir import data_dir

GIB = 2**30
EBS_DEVICE_PREFIX = "nvme-Amazon_Elastic_Block_Store_"


def device_name(volume_id: str) -> str:
    """The volume's device name under /dev/disk/by-id on a Nitro instance (udev's: the volume id
    without its dash)."""
    return EBS_DEVICE_PREFIX + volume_id.replace("-", "", 1)


def volume_file(volume_id: str) -> Path:
    return data_dir() / "ebs" / "volumes" / device_name(volume_id)


def snapshot_file(snapshot_id: str) -> Path:
    return data_dir() / "ebs" / "snapshots" / snapshot_id


def restore_volume(volume_id: str, size_gib: int, snapshot_id: str) -> None:
    """CreateVolume from a snapshot: the volume's file is a copy of the snapshot's, grown to the
    volume's size. A snapshot without data here (moto's, of its built-in AMIs) gives a volume
    that starts fresh, as any other."""
    source = snapshot_file(snapshot_id)
    if not source.exists():
        return
    target = volume_file(volume_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as held:
        _copy_to(held, target)
    _grow(target, size_gib)


def ensure_volume(volume_id: str, size_gib: int) -> Path:
    """The volume's file, at least ``size_gib`` long (grown in place, never shrunk: EBS refuses to
    shrink a volume); a fresh volume's file when it has none yet."""
    target = volume_file(volume_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with target.open("x") as fresh:  # exclusive: never over a file another thread just made
            fresh.write(volume_id + "\n")
    except FileExistsError:
        pass
    _grow(target, size_gib)
    return target


def delete_volume(volume_id: str) -> None:
    volume_file(volume_id).unlink(missing_ok=True)


def take_snapshots(volumes: Iterable[tuple[str, int, str]]) -> None:
    """Copy each volume's file to its snapshot's (``(volume id, size in GiB, snapshot id)``), all
    under one set of exclusive locks: the copies are of one instant for writers that lock."""
    wanted = sorted(volumes)
    with ExitStack() as stack:
        held: dict[str, BinaryIO] = {}
        for volume_id, size_gib, _ in wanted:  # in one order: two sets never wait on each other
            if volume_id not in held:
                held[volume_id] = stack.enter_context(ensure_volume(volume_id, size_gib).open("rb"))
                fcntl.flock(held[volume_id], fcntl.LOCK_EX)
        for volume_id, _, snapshot_id in wanted:
            target = snapshot_file(snapshot_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_to(held[volume_id], target)


def copy_snapshot(source_id: str, target_id: str) -> None:
    """CopySnapshot: the copy has the source's blocks (none when the source has none here)."""
    source = snapshot_file(source_id)
    if source.exists():
        with source.open("rb") as held:
            _copy_to(held, snapshot_file(target_id))


def delete_snapshot(snapshot_id: str) -> None:
    snapshot_file(snapshot_id).unlink(missing_ok=True)


def describe(volume_id: str | None = None, snapshot_id: str | None = None) -> dict[str, Any]:
    """Where a volume's or a snapshot's data lives, its length and the bytes it takes on disk."""
    if (volume_id is None) == (snapshot_id is None):
        raise ValueError("give exactly one of VolumeId and SnapshotId")
    path = volume_file(volume_id) if volume_id is not None else snapshot_file(str(snapshot_id))
    if not path.exists():
        return {"Path": str(path), "Exists": False}
    found = path.stat()
    allocated = found.st_blocks * 512  # st_blocks counts 512-byte units whatever the block size
    return {"Path": str(path), "Exists": True, "Bytes": found.st_size, "AllocatedBytes": allocated}


def _grow(path: Path, size_gib: int) -> None:
    if path.stat().st_size < size_gib * GIB:
        os.truncate(path, size_gib * GIB)


def _copy_to(source: BinaryIO, target: Path) -> None:
    """A sparse copy of ``source`` (open) to ``target``, replaced whole (written beside it, then
    renamed: a failed copy leaves no half snapshot)."""
    partial = target.with_name(target.name + ".part")
    with partial.open("wb") as written:
        _copy_extents(source.fileno(), written.fileno())
    partial.replace(target)


def _copy_extents(source: int, target: int) -> None:
    """Copy the data extents of ``source`` to the same offsets of ``target``; holes stay holes."""
    length = os.fstat(source).st_size
    offset = 0
    while offset < length:
        try:
            start = os.lseek(source, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from offset to the end
                break
            raise
        end = os.lseek(source, start, os.SEEK_HOLE)
        _copy_range(source, target, start, end)
        offset = end
    os.ftruncate(target, length)


# copy_file_range refused by the file system or the kernel: read and write instead
_NO_COPY_FILE_RANGE = (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)


def _copy_range(source: int, target: int, start: int, end: int) -> None:
    while start < end:
        try:
            copied = os.copy_file_range(source, target, end - start, start, start)
        except OSError as exc:
            if exc.errno not in _NO_COPY_FILE_RANGE:
                raise
            chunk = os.pread(source, min(end - start, 2**20), start)
            copied = os.pwrite(target, chunk, start) if chunk else 0
        if copied == 0:  # the end of the file (it shrank meanwhile: never for a volume)
            return
        start += copied
