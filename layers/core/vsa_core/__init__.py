"""VSA control-plane core: domain model, capacity planning, naming and repositories.

Pure, typed Python. Only ``vsa_core.adapters`` touches boto3; everything else is tested
without AWS.
"""
