"""vsactl: the command line of the VSA control plane (apply, get, list, delete arrays)."""

__version__ = "0.1.0"
