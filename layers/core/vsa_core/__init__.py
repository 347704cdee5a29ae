"""VSA control-plane core, by capability (the Lambda layer; the handlers are thin adapters over it).

- ``arrays/``: an array's spec, what it should produce on AWS, applying it, its status, teardown,
  and the arrays REST API's routes;
- ``scaling/``: demand, the planner and its tuning, ScaleArray's rules and steps, the simulator;
- ``controllers/``: slots, NVMe identities, host batches, the bootstrap / drain steps;
- ``backups/``: backup sets and labels, the ConsistentBackup steps, retention, restore, the
  backups REST API's routes;
- the shared base here: errors, naming, settings, observability, steps (pure); clients, registry,
  waiters (AWS).

In every package, a module whose name starts with ``aws_`` talks to AWS (clients injected);
every other module is pure and imports no boto3 or botocore, not even through another module
(``tests/unit/test_core_shape.py``).
"""

VERSION = "0.1.0"
"""The product's version, written only here: the vsactl distribution reads it (pyproject.toml),
``vsactl version`` prints it, and the stack's output ``Version`` must equal it
(tests/infra/test_cli_package.py)."""
