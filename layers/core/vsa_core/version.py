"""The product's version: the one place it is written. The vsactl distribution reads it
(pyproject.toml, dynamic version), ``vsactl version`` prints it, and the stack's output ``Version``
must equal it (tests/infra/test_version.py)."""

VERSION = "0.1.0"
