"""Each instance type's own EBS IOPS limit: what one controller can move to and from its volumes. Pure.

Source: AWS, "Amazon EBS-optimized instances", Amazon EC2 User Guide, the tables "EBS optimized
by default" (baseline and maximum IOPS, 16 KiB I/O)
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ebs-optimized.html; today the Amazon EC2
Instance Types guide's https://docs.aws.amazon.com/ec2/latest/instancetypes/ebs-optimized.html),
transcribed from the page's markdown source as AWS published it on GitHub
(awsdocs/amazon-ec2-user-guide, doc_source/ebs-optimized.md, the last version, 2023). Every
figure below is the page's; no row is inferred from a neighbour. Only the families a storage
controller would run on are listed (memory-optimized r5b/r5/r6i/r6in; general-purpose
m5/m6i/m6in; network-optimized c6in/c6gn; storage-optimized i3en/i4i; x2idn/x2iedn); a type not
listed (e.g. the r7i/m7i/c7i generation, newer than that version of the page) has no default,
and the spec must say its ``perControllerIops``.

Two figures per type: **baseline** and **maximum**. Types marked with an asterisk on the page
(the smaller sizes) reach their maximum for only 30 minutes at least once every 24 hours, then
fall back to the baseline; the others sustain the maximum (baseline = maximum). A controller
serves for hours, so its default per-controller IOPS is the **baseline**: what it sustains.
"""

from collections.abc import Mapping
from dataclasses import dataclass

Rows = Mapping[str, tuple[int, int] | int]


@dataclass(frozen=True)
class EbsIops:
    """An instance type's EBS IOPS (16 KiB I/O): sustained (baseline) and burst (maximum)."""

    baseline: int
    maximum: int


def _ladder(family: str, rows: Rows) -> dict[str, EbsIops]:
    """``{"<family>.<size>": EbsIops}`` from ``size: (baseline, maximum)`` for the types that
    burst, or ``size: iops`` for the types that sustain their maximum."""
    table: dict[str, EbsIops] = {}
    for size, iops in rows.items():
        baseline, maximum = iops if isinstance(iops, tuple) else (iops, iops)
        table[f"{family}.{size}"] = EbsIops(baseline=baseline, maximum=maximum)
    return table


# Each ladder is one family's rows; families whose rows on the page are identical share one.
_R5B: Rows = {
    "large": (5_417, 43_333),
    "xlarge": (10_833, 43_333),
    "2xlarge": (21_667, 43_333),
    "4xlarge": 43_333,
    "8xlarge": 86_667,
    "12xlarge": 130_000,
    "16xlarge": 173_333,
    "24xlarge": 260_000,
    "metal": 260_000,
}
_GEN5: Rows = {  # m5, m5d, m5n, m5dn, r5, r5d, r5n, r5dn
    "large": (3_600, 18_750),
    "xlarge": (6_000, 18_750),
    "2xlarge": (12_000, 18_750),
    "4xlarge": 18_750,
    "8xlarge": 30_000,
    "12xlarge": 40_000,
    "16xlarge": 60_000,
    "24xlarge": 80_000,
    "metal": 80_000,
}
_GEN6I: Rows = {  # m6i, m6id, r6i, r6id, c6i, c6id
    "large": (3_600, 40_000),
    "xlarge": (6_000, 40_000),
    "2xlarge": (12_000, 40_000),
    "4xlarge": (20_000, 40_000),
    "8xlarge": 40_000,
    "12xlarge": 60_000,
    "16xlarge": 80_000,
    "24xlarge": 120_000,
    "32xlarge": 160_000,
    "metal": 160_000,
}
_GEN6IN: Rows = {  # m6in, m6idn, r6in, r6idn, c6in (no metal size in that version of the page)
    "large": (5_468, 87_500),
    "xlarge": (10_937, 87_500),
    "2xlarge": (21_875, 87_500),
    "4xlarge": (43_750, 87_500),
    "8xlarge": 87_500,
    "12xlarge": 131_250,
    "16xlarge": 175_000,
    "24xlarge": 262_500,
    "32xlarge": 350_000,
}
_C6GN: Rows = {
    "medium": (2_500, 40_000),
    "large": (5_000, 40_000),
    "xlarge": (10_000, 40_000),
    "2xlarge": (20_000, 40_000),
    "4xlarge": 40_000,
    "8xlarge": 80_000,
    "12xlarge": 120_000,
    "16xlarge": 160_000,
}
_I3EN: Rows = {
    "large": (3_000, 20_000),
    "xlarge": (6_000, 20_000),
    "2xlarge": (12_000, 20_000),
    "3xlarge": (15_000, 20_000),
    "6xlarge": 20_000,
    "12xlarge": 40_000,
    "24xlarge": 80_000,
    "metal": 80_000,
}
_I4I: Rows = {
    "large": (2_500, 40_000),
    "xlarge": (5_000, 40_000),
    "2xlarge": (10_000, 40_000),
    "4xlarge": (20_000, 40_000),
    "8xlarge": 40_000,
    "16xlarge": 80_000,
    "32xlarge": 160_000,
    "metal": 160_000,
}
_X2IDN: Rows = {
    "16xlarge": 173_333,
    "24xlarge": 260_000,
    "32xlarge": 260_000,
    "metal": 260_000,
}
_X2IEDN: Rows = {
    "xlarge": (8_125, 65_000),
    "2xlarge": (16_250, 65_000),
    "4xlarge": (32_500, 65_000),
    "8xlarge": 65_000,
    "16xlarge": 130_000,
    "24xlarge": 195_000,
    "32xlarge": 260_000,
    "metal": 260_000,
}

EBS_IOPS: dict[str, EbsIops] = {
    **_ladder("r5b", _R5B),
    **{
        k: v
        for f in ("m5", "m5d", "m5n", "m5dn", "r5", "r5d", "r5n", "r5dn")
        for k, v in _ladder(f, _GEN5).items()
    },
    **{k: v for f in ("m6i", "m6id", "r6i", "r6id", "c6i", "c6id") for k, v in _ladder(f, _GEN6I).items()},
    **{k: v for f in ("m6in", "m6idn", "r6in", "r6idn", "c6in") for k, v in _ladder(f, _GEN6IN).items()},
    **_ladder("c6gn", _C6GN),
    **_ladder("i3en", _I3EN),
    **_ladder("i4i", _I4I),
    **_ladder("x2idn", _X2IDN),
    **_ladder("x2iedn", _X2IEDN),
}
"""Instance type -> its EBS IOPS, for the types listed above."""


def ebs_iops(instance_type: str) -> EbsIops | None:
    """The type's EBS IOPS from the table, or None for a type it does not list."""
    return EBS_IOPS.get(instance_type)


def default_controller_iops(instance_type: str) -> int | None:
    """One controller's IOPS when the spec does not say: the type's sustained (baseline) EBS
    IOPS; None for a type the table does not list."""
    found = ebs_iops(instance_type)
    return None if found is None else found.baseline
