"""Backups: sets, labels and retention rules (``sets``), what hosts report (``reports``), the step
requests; on AWS (``aws_*``), the sets' registry, admission and sets, preflight, the snapshot,
finish, retention and restore (``aws_service.BackupService``)."""
