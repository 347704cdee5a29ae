"""Every spec in examples/ is one the API takes, and none plans a controller for more IOPS than
its instance type sustains.

``perControllerIops`` is what the scaling plans one controller to carry. Above the type's
sustained (baseline) EBS IOPS (``vsa_core.instances``: the smaller sizes reach their
maximum only 30 minutes a day) the array scales out too late, once the bursts are spent. An
example may still go above it when its line says why, in a comment containing ``above
sustained:``.

With ``controllers.launchTemplate`` the instance type is in the launch template, not the spec
(and ``perControllerIops`` is required): the line's comment must name the type the template
launches (e.g. ``# r5b.4xlarge's sustained EBS IOPS``) and the figure is held to that type's; a
comment naming no type in the table fails, since nothing else says what the figure is for.
"""

import re
from pathlib import Path

import pytest
import yaml

from vsa_core.arrays.spec import ArraySpec
from vsa_core.instances import EBS_IOPS, default_controller_iops

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
IOPS_LINE = re.compile(r"^perControllerIops:\s*(?P<iops>\d+)\s*(?:#(?P<comment>.*))?$", re.MULTILINE)
OVER_SUSTAINED = "above sustained:"
INSTANCE_TYPE = re.compile(r"[a-z0-9-]+\.[a-z0-9]+")


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def load(text: str) -> ArraySpec:
    return ArraySpec.model_validate(yaml.safe_load(text))


def iops_problem(text: str) -> str | None:
    """Why the spec ``text``'s ``perControllerIops`` is above its controllers' sustained EBS IOPS
    without saying why (None: it is not, or says why)."""
    spec = load(text)
    line = IOPS_LINE.search(text)
    comment = (line["comment"] or "") if line else ""
    kind = spec.controllers.instance_type
    if kind is None:
        named = [t for t in INSTANCE_TYPE.findall(comment) if t in EBS_IOPS]
        if not named:
            return "with a launchTemplate, name its instance type in the perControllerIops line's comment"
        kind = named[0]
    sustained = default_controller_iops(kind)
    if sustained is None or spec.per_controller_iops <= sustained or OVER_SUSTAINED in comment:
        return None
    return (
        f"perControllerIops {spec.per_controller_iops:,} is above {kind}'s sustained {sustained:,} EBS "
        f"IOPS: lower it, or say why in its comment ({OVER_SUSTAINED} ...)"
    )


def test_the_examples_an_operator_copies_are_there() -> None:
    names = {p.stem for p in examples()}
    assert {"array", "minimal", "launch-template", "open-access", "backup-policy"} <= names


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.name)
def test_example_is_a_valid_spec(path: Path) -> None:
    # Given the example as an operator copies it / Then it validates as the API validates it
    spec = load(path.read_text())
    assert spec.array_id


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.name)
def test_example_controllers_are_planned_within_sustained_iops(path: Path) -> None:
    assert iops_problem(path.read_text()) is None


def test_the_minimal_example_adds_to_the_required_fields_only_what_a_working_array_needs() -> None:
    # Given the minimal example / Then it gives the required fields, an instance profile (without
    # one no controller registers with SSM) and a host, and leaves everything else to defaults
    spec = yaml.safe_load((EXAMPLES / "minimal.yaml").read_text())
    required = {"arrayId", "availabilityZone", "volumes", "controllers", "minControllers", "maxControllers"}
    assert set(spec) == required | {"hosts"}
    assert set(spec["controllers"]) == {"instanceType", "imageId", "instanceProfile"}


MINIMAL_R5B_2XLARGE = """
arrayId: demo
availabilityZone: us-east-1a
volumes: [{name: data, sizeGiB: 100, iops: 3000}]
controllers: {instanceType: r5b.2xlarge, imageId: ami-0a1b2c3d4e5f60001}
minControllers: 2
maxControllers: 4
"""


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ("", False),  # the default: r5b.2xlarge's sustained 21,667
        ("perControllerIops: 21667", False),
        ("perControllerIops: 260000   # r5b.2xlarge", True),  # its burst is 43,333; 260,000 is r5b.24xlarge's
        ("perControllerIops: 43333   # above sustained: a nightly 20-minute batch, within its burst", False),
    ],
)
def test_the_iops_check_refuses_a_figure_above_sustained(line: str, refused: bool) -> None:
    assert (iops_problem(MINIMAL_R5B_2XLARGE + line + "\n") is not None) is refused


def test_the_iops_check_needs_the_type_of_a_launch_template() -> None:
    # Given a launch template spec whose figure's comment names no instance type / Then refused
    spec = MINIMAL_R5B_2XLARGE.replace(
        "{instanceType: r5b.2xlarge, imageId: ami-0a1b2c3d4e5f60001}",
        "{launchTemplate: {launchTemplateName: mine}}",
    )
    assert iops_problem(spec + "perControllerIops: 43333   # the template's type\n") is not None
    assert iops_problem(spec + "perControllerIops: 43333   # r5b.4xlarge (sustains 43,333)\n") is None
    assert iops_problem(spec + "perControllerIops: 43334   # r5b.4xlarge\n") is not None
