"""The parts of an array spec most tests do not vary (volumes, controller launch settings: r5b.24xlarge,
whose 260,000 EBS IOPS is the per-controller default the tests are written for)."""

from typing import Any

VOLUMES: tuple[dict[str, Any], ...] = ({"volumeId": "vol-0a1b2c3d4e5f60001"},)
CONTROLLERS: dict[str, Any] = {"instanceType": "r5b.24xlarge", "imageId": "ami-0a1b2c3d4e5f60001"}
BASE: dict[str, Any] = {"volumes": VOLUMES, "controllers": CONTROLLERS}
SPREAD_VOLUMES: tuple[dict[str, Any], ...] = tuple(
    {"volumeId": f"vol-0a1b2c3d4e5f6{i:04x}"} for i in range(1, 17)
)
SPREAD: dict[str, Any] = {"volumes": SPREAD_VOLUMES, "controllers": CONTROLLERS}
"""An array whose IO is spread over 16 volumes: with the default fencing (one owner controller per
volume) every controller up to the Multi-Attach limit can own one and carry IO, so the scaling
tests see the planner's rules rather than the owners' bound (shown on its own in test_capacity)."""
