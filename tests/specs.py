"""The parts of an array spec most tests do not vary (volumes, controller launch settings: r5b.24xlarge,
whose 260,000 EBS IOPS is the per-controller default the tests are written for)."""

from typing import Any

VOLUMES: tuple[dict[str, Any], ...] = ({"volumeId": "vol-0a1b2c3d4e5f60001"},)
CONTROLLERS: dict[str, Any] = {"instanceType": "r5b.24xlarge", "imageId": "ami-0a1b2c3d4e5f60001"}
BASE: dict[str, Any] = {"volumes": VOLUMES, "controllers": CONTROLLERS}
