"""Backups: sets, labels and retention rules (``sets``), what hosts report (``reports``), the step
requests; on AWS, admission and sets, preflight, the snapshot, finish, retention, restore and
the API's routes (``aws_*``)."""
