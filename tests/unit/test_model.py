"""ArraySpec validation: what a spec may declare, and what it is told to fix when it may not."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.specs import BASE
from vsa_core.arrays.spec import (
    MAX_CONTROLLER_IOPS,
    MULTI_ATTACH_LIMIT,
    ArraySpec,
    RegisteredArray,
    keep_unsaid,
)
from vsa_core.naming import ARRAY_ID_PATTERN


def spec_fields(**overrides: Any) -> dict[str, Any]:
    return {
        "arrayId": "demo",
        "availabilityZone": "us-east-1a",
        **BASE,
        "minControllers": 2,
        "maxControllers": 4,
        **overrides,
    }


def error_fields(error: ValidationError) -> set[str]:
    return {str(part) for detail in error.errors() for part in detail["loc"]}


def test_minimal_spec_gets_its_instance_types_defaults():
    # Given a spec with only the required fields (r5b.24xlarge controllers) / When validated
    spec = ArraySpec.model_validate(spec_fields())
    # Then one controller is worth the type's sustained EBS IOPS (260,000), at a 70 % target,
    # spec version 1 (a smaller size's default is its own: tests/unit/test_capacity.py)
    assert spec.controllers.instance_type == "r5b.24xlarge"
    assert spec.per_controller_iops == 260_000
    assert spec.target_utilisation == 0.7
    assert spec.spec_version == 1


def test_min_above_max_is_rejected_naming_both_fields():
    # Given a spec whose minimum is above its maximum
    # When validated
    with pytest.raises(ValidationError) as raised:
        ArraySpec.model_validate(spec_fields(minControllers=5, maxControllers=4))
    # Then the message names both fields and their values
    message = str(raised.value)
    assert "minControllers (5)" in message
    assert "maxControllers (4)" in message


def test_min_equal_to_max_is_a_fixed_size_array():
    spec = ArraySpec.model_validate(spec_fields(minControllers=3, maxControllers=3))
    assert spec.min_controllers == spec.max_controllers == 3


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"maxControllers": MULTI_ATTACH_LIMIT + 1}, "maxControllers"),
        ({"minControllers": MULTI_ATTACH_LIMIT + 1, "maxControllers": MULTI_ATTACH_LIMIT}, "minControllers"),
        ({"minControllers": 0}, "minControllers"),
        ({"perControllerIops": 0}, "perControllerIops"),
        ({"targetUtilisation": 0.0}, "targetUtilisation"),
        ({"targetUtilisation": 1.01}, "targetUtilisation"),
        ({"availabilityZone": ""}, "availabilityZone"),
        ({"specVersion": 2}, "specVersion"),
    ],
    ids=[
        "max-17",
        "min-17",
        "min-0",
        "zero-iops",
        "zero-utilisation",
        "over-full-utilisation",
        "empty-az",
        "unknown-version",
    ],
)
def test_out_of_range_fields_are_rejected(overrides: dict[str, Any], field: str):
    # Given a spec with one field out of range / When validated / Then that field is named
    with pytest.raises(ValidationError) as raised:
        ArraySpec.model_validate(spec_fields(**overrides))
    assert field in error_fields(raised.value)


def test_sixteen_controllers_and_full_utilisation_are_allowed():
    # Given the io2 Multi-Attach limit and a 100 % target / When validated / Then both are accepted
    spec = ArraySpec.model_validate(spec_fields(maxControllers=16, targetUtilisation=1.0))
    assert spec.max_controllers == MULTI_ATTACH_LIMIT


@pytest.mark.parametrize(
    "array_id",
    ["ab", "a" * 33, "Demo", "-demo", "demo-", "de_mo", "de mo", "démo", "demo\n", ""],
    ids=["too-short", "too-long", "upper", "leading-dash", "trailing-dash", "underscore", "space",
         "non-ascii", "trailing-newline", "empty"],
)  # fmt: skip
def test_bad_array_ids_are_rejected(array_id: str):
    with pytest.raises(ValidationError) as raised:
        ArraySpec.model_validate(spec_fields(arrayId=array_id))
    assert "arrayId" in error_fields(raised.value)


@pytest.mark.parametrize("array_id", ["abc", "a" * 32, "0-9", "prod-db-01"])
def test_good_array_ids_are_accepted(array_id: str):
    assert ArraySpec.model_validate(spec_fields(arrayId=array_id)).array_id == array_id


def test_extra_fields_are_rejected():
    # Given a spec with a field the model does not know (a typo must not pass silently)
    # When validated / Then the unknown field is named
    with pytest.raises(ValidationError) as raised:
        ArraySpec.model_validate(spec_fields(maxControlers=8))
    assert "maxControlers" in error_fields(raised.value)
    assert raised.value.errors()[0]["type"] == "extra_forbidden"


def test_spec_is_immutable():
    spec = ArraySpec.model_validate(spec_fields())
    with pytest.raises(ValidationError):
        spec.max_controllers = 8  # type: ignore[misc]


def test_python_names_are_accepted_too():
    spec = ArraySpec(
        array_id="demo", availability_zone="us-east-1a", **BASE, min_controllers=1, max_controllers=2
    )
    assert spec.model_dump(by_alias=True)["arrayId"] == "demo"


@given(
    array_id=st.from_regex(ARRAY_ID_PATTERN, fullmatch=True),
    bounds=st.integers(1, MULTI_ATTACH_LIMIT).flatmap(lambda hi: st.tuples(st.integers(1, hi), st.just(hi))),
    per_controller_iops=st.integers(1, MAX_CONTROLLER_IOPS),
    target_utilisation=st.floats(0.0, 1.0, exclude_min=True),
)
def test_spec_round_trips_through_its_json_as_the_registry_stores_it(
    array_id: str, bounds: tuple[int, int], per_controller_iops: int, target_utilisation: float
):
    # Given any valid spec
    spec = ArraySpec(
        arrayId=array_id,
        availabilityZone="us-east-1a",
        **BASE,
        minControllers=bounds[0],
        maxControllers=bounds[1],
        perControllerIops=per_controller_iops,
        targetUtilisation=target_utilisation,
    )
    # When written as JSON by alias (the registry's format) and read back
    # Then it is the same spec
    assert ArraySpec.model_validate_json(spec.model_dump_json(by_alias=True)) == spec


@pytest.mark.parametrize("desired", [-1, MULTI_ATTACH_LIMIT + 1])
def test_registered_array_desired_count_stays_within_the_attach_limit(desired: int):
    spec = ArraySpec.model_validate(spec_fields())
    with pytest.raises(ValidationError):
        RegisteredArray(spec=spec, desired_controllers=desired, version=1)


def test_the_documented_example_spec_is_valid():
    # Given the example in examples/ (the README points operators at it) / Then it validates
    import pathlib

    import yaml

    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "array.yaml"
    spec = ArraySpec.model_validate(yaml.safe_load(example.read_text()))
    assert spec.backup is not None
    assert spec.backup.mode == "application"
    assert [v.name for v in spec.new_volumes] == ["data2"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"volumes": []}, "volumes"),
        (
            {"volumes": [{"volumeId": "vol-0a1b2c3d4e5f60001"}, {"volumeId": "vol-0a1b2c3d4e5f60001"}]},
            "twice",
        ),
        ({"volumes": [{"name": "big", "sizeGiB": 10, "iops": 20000}]}, "sizeGiB >= 20"),
        ({"controllers": {"instanceType": "r5b.2xlarge"}}, "imageId"),
        (
            {
                "controllers": {
                    "instanceType": "r5b.2xlarge",
                    "imageId": "ami-0a1b2c3d",
                    "launchTemplate": {"launchTemplateName": "x-template"},
                }
            },
            "not both",
        ),
        ({"controllers": {"launchTemplate": {}}}, "exactly one"),
        ({"hosts": [{"instanceId": "i-0a1b2c3d4e5f60101", "mountpoints": ["data"]}]}, "absolute"),
        ({"backup": {"schedule": "every day"}}, "rate("),
        ({"backup": {"schedule": "rate(1 day)", "mode": "application"}}, "mountpoints"),
        ({"availabilityZone": "us-east-1"}, "availabilityZone"),
    ],
)
def test_invalid_array_parts_say_what_to_fix(overrides: dict[str, Any], message: str):
    with pytest.raises(ValidationError) as raised:
        ArraySpec.model_validate(spec_fields(**overrides))
    assert message in str(raised.value)


HOST = "i-0a1b2c3d4e5f60101"


@pytest.mark.parametrize(
    "mountpoint",
    [
        "/data;reboot",
        "/data$(id)",
        "/data`id`",
        "/data\nx",
        "/da\x00ta",
        "/a,/b",
        "/da ta",
        "/",
        "data",
        "/" + "a" * 256,
    ],
)
def test_a_mountpoint_freeze_io_would_refuse_is_refused_and_named(mountpoint: str):
    # (before, the API stored these and only freeze-io's own pattern refused them, at backup time;
    # a comma split one mountpoint into two)
    with pytest.raises(ValidationError) as raised:
        ArraySpec.model_validate(spec_fields(hosts=[{"instanceId": HOST, "mountpoints": [mountpoint]}]))
    assert "mountpoints must be absolute paths" in str(raised.value)
    assert repr(mountpoint)[:40] in str(raised.value)


def test_mountpoints_freeze_io_takes_are_accepted_once_each_and_at_most_64():
    good = ["/data", "/var/lib/pg-13", "/mnt/a_b.c+d@e:f=g", "/" + "a" * 255]
    spec = ArraySpec.model_validate(spec_fields(hosts=[{"instanceId": HOST, "mountpoints": good}]))
    assert spec.hosts[0].mountpoints == tuple(good)
    with pytest.raises(ValidationError, match="more than once: /data"):
        ArraySpec.model_validate(spec_fields(hosts=[{"instanceId": HOST, "mountpoints": ["/data", "/data"]}]))
    many = [f"/m{i}" for i in range(65)]
    with pytest.raises(ValidationError, match="at most 64"):
        ArraySpec.model_validate(spec_fields(hosts=[{"instanceId": HOST, "mountpoints": many}]))
    ArraySpec.model_validate(spec_fields(hosts=[{"instanceId": HOST, "mountpoints": many[:64]}]))


# --- authentication ---------------------------------------------------------------------------


def _auth_spec(**overrides: object) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            **BASE,
            "minControllers": 2,
            "maxControllers": 4,
            "hosts": [{"instanceId": "i-0a1b2c3d4e5f60101"}],
            **overrides,
        }
    )


def test_a_new_array_authenticates_its_hosts_unless_told_not_to() -> None:
    assert _auth_spec().authentication == "dh-hmac-chap"
    assert _auth_spec(authentication="none").authentication == "none"
    with pytest.raises(ValueError, match="authentication"):
        _auth_spec(authentication="chap")


def test_any_host_needs_no_authentication_said_so() -> None:
    with pytest.raises(ValueError, match="set authentication: none to admit any host"):
        _auth_spec(allowAnyHost=True)
    assert _auth_spec(allowAnyHost=True, authentication="none").allow_any_host


def test_two_hosts_cannot_share_an_nqn() -> None:
    nqn = "nqn.2014-08.org.nvmexpress:uuid:0b1b3c1e-0000-4000-8000-00000000000a"
    with pytest.raises(ValueError, match="given to more than one host"):
        _auth_spec(
            hosts=[
                {"instanceId": "i-0a1b2c3d4e5f60101", "hostNqn": nqn},
                {"instanceId": "i-0a1b2c3d4e5f60102", "hostNqn": nqn},
            ]
        )


def test_an_update_that_does_not_say_keeps_the_arrays_authentication() -> None:
    running = _auth_spec(authentication="none")
    unsaid = ArraySpec.model_validate(
        {k: v for k, v in _auth_spec().model_dump(by_alias=True).items() if k != "authentication"}
    )
    assert keep_unsaid(running, unsaid).authentication == "none"
    assert keep_unsaid(running, _auth_spec(authentication="dh-hmac-chap")).authentication == "dh-hmac-chap"
    assert keep_unsaid(None, unsaid).authentication == "dh-hmac-chap"


def test_a_new_array_fences_and_a_running_one_without_keeps_none_until_its_spec_says() -> None:
    # a new array: one owner per volume, fenced by NVMe reservations (round-robin only if asked)
    assert _auth_spec().fencing == "reservations"
    assert _auth_spec(fencing="none").fencing == "none"
    running = _auth_spec(fencing="none", authentication="none")
    unsaid = ArraySpec.model_validate(
        {
            k: v
            for k, v in _auth_spec().model_dump(by_alias=True).items()
            if k not in ("fencing", "authentication")
        }
    )
    # an update that names neither keeps both as they run; one that names fencing takes it
    kept = keep_unsaid(running, unsaid)
    assert (kept.fencing, kept.authentication) == ("none", "none")
    said = ArraySpec.model_validate(
        {**unsaid.model_dump(by_alias=True, exclude_unset=True), "fencing": "reservations"}
    )
    assert (keep_unsaid(running, said).fencing, keep_unsaid(running, said).authentication) == (
        "reservations",
        "none",
    )
    assert keep_unsaid(None, unsaid).fencing == "reservations"
