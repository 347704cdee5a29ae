"""The simulate command's picture: demand against serving capacity, and controllers billed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vsa_core.scaling.simulator import Comparison


def write_plot(comparison: Comparison, path: Path, title: str) -> None:
    """A PNG of demand against each policy's serving capacity (at 100%), and controllers billed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    planner, oracle, static = comparison.results
    hours = [t / 60 for t in range(planner.minutes)]
    per = planner.per_controller_iops / 1e6
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7), sharex=True, height_ratios=[3, 1.4])
    top.plot(hours, [d / 1e6 for d in planner.demand], color="black", linewidth=0.7, label="demand")
    for result, colour in ((planner, "tab:blue"), (oracle, "tab:green"), (static, "tab:red")):
        top.step(
            hours,
            [s * per for s in result.serving],
            where="post",
            color=colour,
            linewidth=1.1,
            label=f"{result.policy}: serving capacity",
        )
    top.set_ylabel("M IOPS")
    top.set_title(title)
    top.legend(loc="upper left", fontsize="small")
    top.grid(alpha=0.3)
    for result, colour in ((planner, "tab:blue"), (oracle, "tab:green")):
        bottom.step(hours, result.billed, where="post", color=colour, linewidth=1.0, label=f"{result.policy}")
    bottom.set_ylabel("controllers billed")
    bottom.set_xlabel("hours")
    bottom.legend(loc="upper left", fontsize="small")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
