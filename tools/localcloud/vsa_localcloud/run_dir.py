"""The local cloud's run directory: where the state that is not LocalStack's own lives (managed
nodes' sandboxes, Run Command's work directories, EBS volumes' and snapshots' data)."""

import os
from pathlib import Path

from localstack import config


def data_dir() -> Path:
    """The local cloud's run directory (``.localcloud/run-<port>/data``): the parent of
    FILESYSTEM_ROOT that ``tools/localcloud.sh`` sets, so it is wiped with the rest of the state at
    the next start; LocalStack's own state dir otherwise."""
    root = os.environ.get("FILESYSTEM_ROOT")
    return Path(root).resolve().parent if root else Path(config.dirs.data)
