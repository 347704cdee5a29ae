"""The application service and the REST adapters: the arrays API's routes (``aws_arrays``) and
what they run in order (``aws_operations``: apply, delete, rotate keys; the apply's pipeline of
typed values and its decisions in ``apply``, its stages that talk to AWS in ``aws_apply``), the
array's timeline (``timeline`` merges, ``aws_timeline`` reads), the backups API's routes
(``aws_backups``) and what both APIs answer alike (``replies``). Above every capability: an
operation orchestrates the arrays, reconcile and backups."""
