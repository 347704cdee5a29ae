"""VSA control-plane core, by capability (the Lambda layer; the handlers are thin adapters over it).

- ``health/``: the scheduled health check;
- ``api/``: the REST APIs' routes and the operations they run, the array's timeline;
- ``reconcile/``, ``scaling/``, ``backups/``: ReconcileArray; demand, the planner, ScaleArray's
  rules and steps, the simulator; backup sets, the ConsistentBackup steps, retention, restore;
- ``controllers/``: slots, host batches, the bootstrap / drain steps;
- ``arrays/``: the shared kernel: an array's spec, what it should produce on AWS, applying it,
  its status, teardown, the registry;
- the shared base here: errors, naming, settings, observability, steps, the NVMe identities,
  the instance types' EBS IOPS, the scaling alarms' tuning (pure); clients, waiters (AWS).

Each layer above imports only from those below it (the contract is pyproject.toml's
``[tool.importlinter]``; ``lint-imports`` checks it). In every package, a module whose name
starts with ``aws_`` talks to AWS (clients injected); every other module is pure and imports no
boto3 or botocore, not even through another module (``tests/unit/test_core_shape.py``).
"""

VERSION = "0.1.0"
"""The product's version, written only here: the vsactl distribution reads it (pyproject.toml),
``vsactl version`` prints it, and the stack's output ``Version`` must equal it
(tests/infra/test_cli_package.py)."""
