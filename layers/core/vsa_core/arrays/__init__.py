"""Arrays, the shared kernel every capability builds on: the spec (``spec``), what it should
produce and the diff (``plan``), the demand signal its alarms watch (``demand``), what it can
deliver (``capacity``), the array lock, keys and data-plane reports; on AWS (``aws_*``), the
registry (``aws_registry``, ``aws_index``) and the array's AWS side: validate, apply, observe,
status, teardown (``aws_service.ArrayService``)."""
