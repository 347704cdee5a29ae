"""vsactl: the command line of the VSA control plane (apply, get, list and delete arrays; back
them up and restore them; simulate the scaling planner)."""

from vsa_core import VERSION

__version__ = VERSION
