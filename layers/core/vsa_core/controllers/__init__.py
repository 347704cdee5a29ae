"""Controllers: slots and paths (``slots``), host batches, the lifecycle events and the step
requests; on AWS, the bootstrap / drain / Run Command steps and starting a workflow per
lifecycle event (``aws_*``)."""
