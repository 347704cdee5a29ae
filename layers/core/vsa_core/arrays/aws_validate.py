"""Validate an array spec against AWS: read-only checks, every problem collected and reported
in one message (``InvalidSpecError``: fix the spec; ``ConflictError``: the running array
conflicts)."""

import itertools
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_observe, aws_volumes, exposure, keys
from vsa_core.arrays.aws_observe import SERVING_STATES, ArrayClients, error_code, tag_dict
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, MULTI_ATTACH_LIMIT, ArraySpec, RegisteredArray
from vsa_core.errors import ConflictError, InvalidSpecError
from vsa_core.naming import deployment, launch_template_name
from vsa_core.nvme import host_nqn


def validate(clients: ArrayClients, spec: ArraySpec, current: RegisteredArray | None) -> None:
    """Read-only checks; every problem is collected and reported in one message.

    Raises ``InvalidSpecError`` when any problem is in the spec itself, else
    ``ConflictError`` when the spec conflicts with the array's running state.
    """
    problems: list[str] = []
    conflicts: list[str] = []
    if current is not None and current.spec.availability_zone != spec.availability_zone:
        conflicts.append(
            f"availabilityZone cannot change from {current.spec.availability_zone} to "
            f"{spec.availability_zone}: declare a new array in {spec.availability_zone} instead"
        )
    if current is not None and current.spec.fencing == "reservations" and spec.fencing != "reservations":
        # every controller holds the volumes Write Exclusive - All Registrants: one that joins
        # without registering could not write; releasing the reservations is not built yet
        conflicts.append(
            "fencing cannot go from reservations back to none on a running array: its volumes are "
            "reserved for the registered controllers; keep fencing: reservations"
        )
    instances = aws_observe.group_instances(clients, spec.array_id)
    problems += _volume_problems(clients, spec, {i["InstanceId"] for i in instances})
    conflicts += aws_volumes.modification_conflicts(clients, spec)
    problems += _controller_problems(clients, spec)
    problems += _host_problems(clients, spec)
    problems += _copy_problems(clients, spec)
    if spec.authentication == keys.DH_HMAC_CHAP and (too_big := keys.size_problem(map(host_nqn, spec.hosts))):
        problems.append(too_big)
    serving = [i["InstanceId"] for i in instances if i["LifecycleState"] in SERVING_STATES]
    if spec.max_controllers < len(serving):
        conflicts.append(
            f"maxControllers={spec.max_controllers} is below the {len(serving)} serving controllers "
            f"({', '.join(sorted(serving))}): scale the array in first (lower minControllers and wait "
            "for low demand) or keep maxControllers >= "
            f"{len(serving)}"
        )
    if problems:
        raise InvalidSpecError(_problems_message(spec.array_id, problems + conflicts))
    if conflicts:
        raise ConflictError(_problems_message(spec.array_id, conflicts))


def _copy_problems(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    """A backup copy goes out of the deployment's Region: a copy into it protects nothing."""
    region = str(clients.ec2.meta.region_name)
    copies = spec.backup.copies if spec.backup else ()
    return [
        f"backup copies: {c.region} is this deployment's own Region: copy to another Region (a copy "
        "beside its source survives no Region event)"
        for c in copies
        if c.region == region
    ]


def _volume_problems(clients: ArrayClients, spec: ArraySpec, controllers: set[str]) -> list[str]:
    problems: list[str] = []
    ids = list(spec.existing_volume_ids)
    found = {
        v["VolumeId"]: v
        for v in aws_observe.describe_volumes(clients, [{"Name": "volume-id", "Values": ids}])
    }
    for volume_id in ids:
        volume = found.get(volume_id)
        if volume is None:
            problems.append(f"volume {volume_id} does not exist in this account and region: check the id")
            continue
        problems += _volume_shape_problems(spec, volume, controllers)
    for name, observed in aws_observe.owned_volumes(clients, spec.array_id).items():
        declared = next((v for v in spec.new_volumes if v.name == name), None)
        if declared is not None and declared.size_gib < observed["Size"]:
            problems.append(
                f"volume {name}: sizeGiB {declared.size_gib} is below its current {observed['Size']} "
                "GiB and EBS cannot shrink a volume: keep sizeGiB >= "
                f"{observed['Size']}"
            )
    return problems


def _volume_shape_problems(spec: ArraySpec, volume: Mapping[str, Any], controllers: set[str]) -> list[str]:
    problems: list[str] = []
    volume_id = volume["VolumeId"]
    if volume["AvailabilityZone"] != spec.availability_zone:
        problems.append(
            f"volume {volume_id} is in {volume['AvailabilityZone']}, the array is in "
            f"{spec.availability_zone}: use a volume in {spec.availability_zone} (or snapshot and "
            "restore it there)"
        )
    if volume.get("VolumeType") != "io2" or not volume.get("MultiAttachEnabled", False):
        problems.append(
            f"volume {volume_id} is not io2 with Multi-Attach (it is {volume.get('VolumeType')}, "
            f"Multi-Attach {'on' if volume.get('MultiAttachEnabled') else 'off'}): use an io2 volume "
            "created with MultiAttachEnabled"
        )
    foreign = {a["InstanceId"] for a in volume.get("Attachments", [])} - controllers
    if len(foreign) + spec.max_controllers > MULTI_ATTACH_LIMIT:
        problems.append(
            f"volume {volume_id} is attached to {len(foreign)} other instance(s) "
            f"({', '.join(sorted(foreign))}); with maxControllers={spec.max_controllers} it would "
            f"exceed the {MULTI_ATTACH_LIMIT}-instance Multi-Attach limit: detach them or lower "
            "maxControllers"
        )
    return problems


def _controller_problems(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    settings = spec.controllers
    if settings.launch_template is not None:
        return _launch_template_problems(clients, spec)
    problems = _foreign_template_problems(clients, spec.array_id)
    try:
        images = clients.ec2.describe_images(ImageIds=[settings.image_id])["Images"]
    except ClientError as error:
        if not error_code(error).startswith("InvalidAMIID"):
            raise
        images = []
    if not images:
        problems.append(f"controllers.imageId {settings.image_id} does not exist: use an AMI in this region")
    problems += _instance_type_problems(clients, spec)
    problems += _instance_profile_problems(clients, spec)
    vpc = None
    if settings.subnet_id is not None:
        try:
            subnets = clients.ec2.describe_subnets(SubnetIds=[settings.subnet_id])["Subnets"]
        except ClientError as error:
            if not error_code(error).startswith("InvalidSubnetID"):
                raise
            subnets = []
        if not subnets:
            problems.append(f"controllers.subnetId {settings.subnet_id} does not exist: check the id")
        elif subnets[0]["AvailabilityZone"] != spec.availability_zone:
            problems.append(
                f"controllers.subnetId {settings.subnet_id} is in {subnets[0]['AvailabilityZone']}, the "
                f"array is in {spec.availability_zone}: use a subnet in {spec.availability_zone}"
            )
        if subnets:
            vpc = subnets[0].get("VpcId")
    return problems + _security_group_problems(clients, spec, vpc)


def _instance_type_problems(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    kind = spec.controllers.instance_type
    offered = clients.ec2.describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[
            {"Name": "location", "Values": [spec.availability_zone]},
            {"Name": "instance-type", "Values": [kind]},
        ],
    )["InstanceTypeOfferings"]
    if offered:
        return []
    return [
        f"controllers.instanceType {kind} is not offered in {spec.availability_zone}: use an instance "
        "type EC2 offers there (aws ec2 describe-instance-type-offerings --location-type availability-zone)"
    ]


def _instance_profile_problems(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    name = spec.controllers.instance_profile
    if name is None:
        return []
    return _node_role_problems(clients, name, f"controllers.instanceProfile {name}")


def _node_role_problems(clients: ArrayClients, profile: str, label: str) -> list[str]:
    """The instance profile ``profile`` exists and every role it holds is one this deployment
    may give its nodes: under the stack's NodeRolePath, the only roles its iam:PassRole names.
    Checked before anything is created, so a caller cannot launch controllers under a role the
    operator did not name for nodes (an administrator's), and AWS's PassRole refusal never
    surfaces halfway through an apply."""
    allowed = clients.node_role_path
    try:
        found = clients.iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]
    except ClientError as error:
        if error_code(error) != "NoSuchEntity":
            raise
        return [
            f"{label} does not exist: give the name of an IAM instance profile whose role is under "
            f"{allowed or 'the NodeRolePath'} and has AmazonSSMManagedInstanceCore"
        ]
    roles = found.get("Roles", [])
    if not roles:
        return [f"{label} holds no role: add a role created under {allowed or 'the NodeRolePath'}"]
    return [
        f"{label} carries role {role['Arn']}, outside the node roles this deployment may pass "
        f"(path {allowed or '(none configured)'}, stack parameter NodeRolePath): use an instance "
        f"profile whose role was created with --path {allowed or '<NodeRolePath>'}"
        for role in roles
        if not allowed or not str(role.get("Path", "/")).startswith(allowed)
    ]


def _template_profile(version: Mapping[str, Any]) -> str | None:
    """The instance profile name a launch template version carries (by name or ARN; an ARN's
    last segment is the name, after any path), or None."""
    profile = version.get("LaunchTemplateData", {}).get("IamInstanceProfile") or {}
    if profile.get("Name"):
        return str(profile["Name"])
    if profile.get("Arn"):
        return str(profile["Arn"]).rsplit("/", 1)[-1]
    return None


def _security_group_problems(clients: ArrayClients, spec: ArraySpec, vpc: str | None) -> list[str]:
    ids = list(spec.controllers.security_group_ids)
    if not ids:
        return []
    # a filter, not GroupIds: GroupIds fails the whole call on the first unknown id
    groups = clients.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": ids}])[
        "SecurityGroups"
    ]
    found = {g["GroupId"]: g for g in groups}
    problems = [
        f"controllers.securityGroupIds {g} does not exist: check the id" for g in ids if g not in found
    ]
    problems += [
        f"controllers.securityGroupIds {g['GroupId']} is in {g.get('VpcId')}, controllers.subnetId in "
        f"{vpc}: use security groups of the subnet's VPC"
        for g in groups
        if vpc is not None and g.get("VpcId") != vpc
    ]
    return problems + exposure.problems(groups, _host_access(clients, spec))


EC2_FILTER_VALUES = 200
"""EC2's most filter values in one Describe call (its FilterLimitExceeded error)."""


def _host_access(clients: ArrayClients, spec: ArraySpec) -> list[exposure.HostAccess]:
    ids = [h.instance_id for h in spec.hosts]
    if not ids:
        return []
    # EC2 refuses more than 200 filter values in one call (FilterLimitExceeded: "The maximum
    # number of filter values specified on a single call is 200"); a spec holds up to 256 hosts
    pages = (
        page
        for batch in itertools.batched(ids, EC2_FILTER_VALUES, strict=False)
        for page in clients.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-id", "Values": list(batch)}]
        )
    )
    found = []
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                interfaces = instance.get("NetworkInterfaces", [])
                addresses = {
                    a["PrivateIpAddress"] for i in interfaces for a in i.get("PrivateIpAddresses", [])
                }
                addresses |= {a["Ipv6Address"] for i in interfaces for a in i.get("Ipv6Addresses", [])}
                if instance.get("PrivateIpAddress"):
                    addresses.add(instance["PrivateIpAddress"])
                found.append(
                    exposure.HostAccess(
                        instance_id=instance["InstanceId"],
                        groups=frozenset(g["GroupId"] for g in instance.get("SecurityGroups", [])),
                        addresses=frozenset(addresses),
                    )
                )
    return found


def _foreign_template_problems(clients: ArrayClients, array_id: str) -> list[str]:
    name = launch_template_name(array_id)
    template = aws_observe.named_template(clients, array_id)
    tags = tag_dict(template.get("Tags")) if template is not None else {}
    if template is None or (tags.get(ARRAY_TAG) == array_id and tags.get(DEPLOYMENT_TAG) == deployment()):
        return []
    return [
        f"launch template {name} exists and was not created by the control plane for array {array_id} "
        f"(no tags {ARRAY_TAG}={array_id}, {DEPLOYMENT_TAG}={deployment()}): "
        "give it as controllers.launchTemplate, or rename or delete it"
    ]


def _launch_template_problems(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    ref = spec.controllers.launch_template
    assert ref is not None
    label = ref.launch_template_id or ref.launch_template_name
    selector = (
        {"LaunchTemplateId": ref.launch_template_id}
        if ref.launch_template_id
        else {"LaunchTemplateName": ref.launch_template_name}
    )
    try:
        versions = clients.ec2.describe_launch_template_versions(**selector, Versions=[ref.version])
    except ClientError as error:
        code = error_code(error)
        if "NotFound" in code or "Malformed" in code:
            return [f"controllers.launchTemplate {label} does not exist: check the id or name"]
        if "Version" in code:
            return [
                f"controllers.launchTemplate {label} has no version {ref.version}: use an existing "
                "version, $Latest or $Default"
            ]
        raise
    problems: list[str] = []
    for version in versions.get("LaunchTemplateVersions", []):
        profile = _template_profile(version)
        if profile is not None:
            problems += _node_role_problems(
                clients, profile, f"controllers.launchTemplate {label}'s instance profile {profile}"
            )
    return problems


def _host_problems(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    ids = [h.instance_id for h in spec.hosts]
    if not ids:
        return []
    nodes = aws_observe.managed_nodes(clients, ids)
    problems: list[str] = []
    for instance_id in ids:
        node = nodes.get(instance_id)
        if node is None:
            problems.append(
                f"host {instance_id} is not an SSM managed node: install/start the SSM agent and give "
                "it an instance profile with AmazonSSMManagedInstanceCore"
            )
        elif node.get("PingStatus") != "Online":
            problems.append(
                f"host {instance_id} is an SSM managed node but {node.get('PingStatus')}: start its SSM "
                "agent and check its network path to SSM (paths are connected by Run Command)"
            )
    return problems


def _problems_message(array_id: str, problems: list[str]) -> str:
    numbered = "; ".join(f"{i}) {p}" for i, p in enumerate(problems, start=1))
    return f"array {array_id}: {len(problems)} problem(s) to fix before it can be applied: {numbered}"
