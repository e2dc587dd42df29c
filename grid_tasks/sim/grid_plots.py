"""Plots of a grid simulation: utilization over time per policy, wait CDFs local vs grid."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from grid_tasks.sim.grid import PolicyRun
from grid_tasks.sim.plots import DAY, OUTSIDE, _save, plt, utilization_series

__all__ = ["plot_grid_utilization", "plot_grid_waits", "write_grid_plots"]


def plot_grid_utilization(runs: Sequence[PolicyRun], path: Path) -> Path:
    """Busy fraction of the whole grid over time, one solid line per policy, and the
    grid jobs' part of it dashed in the same colour."""
    fig, ax = plt.subplots(figsize=(10, 4))
    for run in runs:
        total = sum(run.procs.values())
        x, y = utilization_series(run.busy_jobs(), total)
        (line,) = ax.plot(x / DAY, y, linewidth=1, label=f"{run.policy} (all jobs)")
        gx, gy = utilization_series([p for p in run.subjobs() if p.end >= 0], total)
        if gx.size:
            ax.plot(gx / DAY, gy, linewidth=0.8, linestyle="--", color=line.get_color(),
                    label=f"{run.policy} (grid jobs)")
    ax.set_xlabel("time since trace start (days)")
    ax.set_ylabel("utilization of the grid")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(**OUTSIDE)
    ax.set_title("Grid utilization over time, per metascheduling policy")
    return _save(fig, path)


def _cdf(ax: object, waits: np.ndarray, label: str) -> None:
    if waits.size == 0:
        return
    waits = np.sort(waits)
    ax.step(np.maximum(waits, 1.0), np.arange(1, waits.size + 1) / waits.size,  # type: ignore[attr-defined]
            where="post", label=f"{label} ({waits.size})")


def plot_grid_waits(runs: Sequence[PolicyRun], path: Path) -> Path:
    """One panel per policy: the wait CDF of local jobs against grid jobs."""
    fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 4), squeeze=False,
                             sharey=True)
    for ax, run in zip(axes[0], runs, strict=True):
        local = np.array([j.start - j.submit for j in run.local if j.end >= 0], float)
        grid = np.array([v.start - v.submit for v in run.grid_views()], float)
        _cdf(ax, local, "local")
        _cdf(ax, grid, "grid")
        ax.set_xscale("log")
        ax.set_xlabel("wait (s, log; < 1 s drawn at 1 s)")
        ax.set_title(run.policy)
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="best", fontsize="small")
    axes[0][0].set_ylabel("fraction of jobs")
    fig.suptitle("Wait-time CDF, local vs grid jobs")
    return _save(fig, path)


def write_grid_plots(runs: Sequence[PolicyRun], folder: Path) -> list[Path]:
    """``grid_utilization.png`` and ``grid_wait_cdf.png`` in ``folder``."""
    return [plot_grid_utilization(runs, folder / "grid_utilization.png"),
            plot_grid_waits(runs, folder / "grid_wait_cdf.png")]
