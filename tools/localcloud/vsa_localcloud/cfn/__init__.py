"""CloudFormation resource providers for the resource types the product's templates use that
community LocalStack only "deploys as a fallback" (CREATE_COMPLETE, nothing created, ``Ref`` is
``unknown``): AWS::SSM::Document, AWS::EC2::Volume, AWS::EC2::LaunchTemplate,
AWS::AutoScaling::AutoScalingGroup and AWS::AutoScaling::LifecycleHook.

Each provider drives the local cloud's own service APIs (through the clients the resource
provider framework hands it), so what a stack creates is visible through those APIs exactly as
on AWS. ``plugins`` holds the light plugin classes LocalStack discovers through the
``localstack.cloudformation.resource_providers`` entry points; ``catalog`` answers which resource
types are supported, so that ``CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=0`` can be used offline.
"""
