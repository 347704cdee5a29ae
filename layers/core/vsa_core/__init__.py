"""VSA control-plane core, by capability (the Lambda layer; the handlers are thin adapters over it).

Layered, top to bottom (pyproject.toml's import-linter contracts; ``make check`` enforces them):

- ``health/``: the scheduled check over every array;
- ``api/``: the REST routes and the operations they run (apply, delete, rotate keys, backups,
  restores), the array's timeline;
- ``reconcile/``, ``scaling/``, ``backups/``: the workflows' domains, none importing another;
- ``controllers/``: slots, host batches, the bootstrap / drain steps;
- ``arrays/``: the shared kernel: an array's spec, its AWS resources, demand and capacity, the
  array registry;
- the base here: errors, naming, settings, observability, steps, alarm tuning, instance facts,
  NVMe identities (pure); clients, waiters (AWS).

In every package, a module whose name starts with ``aws_`` talks to AWS (clients injected);
every other module is pure and imports no boto3 or botocore, not even through another module
(``tests/unit/test_core_shape.py``).
"""

VERSION = "0.1.0"
"""The product's version, written only here: the vsactl distribution reads it (pyproject.toml),
``vsactl version`` prints it, and the stack's output ``Version`` must equal it
(tests/infra/test_cli_package.py)."""
