"""Arrays: the spec (``spec``), what it should produce and the diff (``plan``); on AWS, validate,
apply, observe, status, teardown (``aws_*``), the API's operations and routes."""
