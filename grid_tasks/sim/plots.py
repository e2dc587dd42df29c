"""PNG plots of replays (matplotlib, Agg backend: no display needed).

* :func:`plot_utilization`: busy fraction of the machine over time, per run;
* :func:`plot_wait_cdf`: the cumulative distribution of waits, per run;
* :func:`plot_gantt`: a window of the schedule, one row per job (wait drawn
  light, run solid, killed jobs red), with the reservations the core held
  during the window shaded (job reservations hatched on their job's row,
  administrative ones as grey bands), and the processors busy below.

Times are in days since the trace's start in every plot; legends sit outside the
axes so that they never cover a curve.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from grid_tasks.errors import GridTasksError  # noqa: E402
from grid_tasks.sim.conventions import SimJob  # noqa: E402

__all__ = ["PlotError", "utilization_series", "plot_utilization", "plot_wait_cdf",
           "plot_gantt", "gantt_figure", "busy_steps", "DAY", "OUTSIDE"]

DAY = 86400.0
#: Legend placement: outside the axes, on their right, so that it covers no curve.
OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0),
                           "fontsize": "small"}


class PlotError(GridTasksError):
    """A plot cannot be drawn or saved."""


def utilization_series(jobs: Sequence[SimJob], procs: int,
                       bins: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres (s) and the mean busy fraction of ``procs`` processors in each bin.

    Exact: the busy count is a step function, integrated between bin edges.
    """
    ran = [j for j in jobs if j.end >= 0]
    if not ran:
        return np.zeros(0), np.zeros(0)
    times = np.fromiter((t for j in ran for t in (j.start, j.end)), float, 2 * len(ran))
    delta = np.fromiter((d for j in ran for d in (j.procs, -j.procs)), float, 2 * len(ran))
    order = np.argsort(times, kind="stable")
    times, delta = times[order], delta[order]
    level = np.cumsum(delta)
    area = np.concatenate(([0.0], np.cumsum(level[:-1] * np.diff(times))))
    lo = min(j.submit for j in ran)
    edges = np.linspace(lo, times[-1], bins + 1)
    cum = np.interp(edges, times, area, left=0.0)
    width = np.diff(edges)
    width[width == 0] = 1.0
    return (edges[:-1] + edges[1:]) / 2, np.diff(cum) / (procs * width)


def _save(fig: Any, path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise PlotError(f"{path}: cannot save the plot: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path


def _title(text: str, basis: str) -> str:
    return f"{text}\n({basis})" if basis else text


def plot_utilization(runs: Sequence[tuple[str, Sequence[SimJob], int]], path: Path, *,
                     basis: str = "") -> Path:
    """Utilization over time, one line per ``(label, jobs, procs)``; ``basis`` says in the
    title which jobs are drawn (a comparison draws the jobs every policy finished)."""
    fig, ax = plt.subplots(figsize=(10, 4))
    for label, jobs, procs in runs:
        x, y = utilization_series(jobs, procs)
        ax.plot(x / DAY, y, label=label, linewidth=1)
    ax.set_xlabel("time since trace start (days)")
    ax.set_ylabel("utilization")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(**OUTSIDE)
    ax.set_title(_title("Utilization over time", basis))
    return _save(fig, path)


def plot_wait_cdf(runs: Sequence[tuple[str, Sequence[SimJob]]], path: Path, *,
                  basis: str = "") -> Path:
    """Empirical CDF of the measured jobs' waits, one curve per ``(label, jobs)``.

    Each curve climbs to 1 over the jobs it is given: a comparison passes every policy
    the same jobs (those all finished), or a policy that dropped its hardest jobs would
    look best; ``basis`` says in the title which jobs these are.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, jobs in runs:
        waits = np.sort(np.fromiter((j.start - j.submit for j in jobs if j.measured and j.end >= 0),
                                    float))
        if waits.size == 0:
            continue
        frac = np.arange(1, waits.size + 1) / waits.size
        ax.step(np.maximum(waits, 1.0), frac, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("wait (s, log scale; waits under 1 s drawn at 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3, which="both")
    ax.legend(**OUTSIDE)
    ax.set_title(_title("Wait-time CDF", basis))
    return _save(fig, path)


def plot_gantt(jobs: Sequence[SimJob], window: tuple[float, float], path: Path, *,
               reservations: Sequence[Any] = (), title: str = "Schedule",
               max_rows: int = 150, procs: int | None = None) -> Path:
    """Jobs overlapping ``window`` (waiting or running) as rows, reservations shaded, and
    below them the processors busy (against the machine's ``procs`` when given)."""
    return _save(gantt_figure(jobs, window, reservations=reservations, title=title,
                              max_rows=max_rows, procs=procs), path)


#: Colours of the Gantt chart: waiting, running, killed, reservation edge.
GANTT_COLOURS = {"waiting": "#d0d8e8", "running": "#2e6fb7", "killed": "#c0392b",
                 "reservation": "#e67e22"}


def gantt_figure(jobs: Sequence[SimJob], window: tuple[float, float], *,
                 reservations: Sequence[Any] = (), title: str = "Schedule",
                 max_rows: int = 150, procs: int | None = None) -> Any:
    """The figure of :func:`plot_gantt`; times in days since the trace's start, as the
    utilization plot reads them."""
    lo, hi = window
    if not hi > lo:
        raise PlotError(f"empty Gantt window [{lo}, {hi}]")
    shown = sorted((j for j in jobs if j.end >= 0 and j.submit < hi and j.end > lo),
                   key=lambda j: (j.start, j.submit))[:max_rows]
    fig, (ax, busy) = plt.subplots(
        2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]},
        figsize=(11, max(4.5, 0.12 * len(shown) + 3.0)))
    _gantt_rows(ax, shown, reservations, lo, hi)
    _busy_panel(busy, jobs, lo, hi, procs)
    ax.set_title(f"{title}: days {lo / DAY:,.2f} to {hi / DAY:,.2f}")
    return fig


def _gantt_rows(ax: Any, shown: Sequence[SimJob], reservations: Sequence[Any],
                lo: float, hi: float) -> None:
    row = {j.id: i for i, j in enumerate(shown)}
    for i, job in enumerate(shown):
        ax.barh(i, (job.start - job.submit) / DAY, left=job.submit / DAY, height=0.8,
                color=GANTT_COLOURS["waiting"])
        ax.barh(i, (job.end - job.start) / DAY, left=job.start / DAY, height=0.8,
                color=GANTT_COLOURS["killed" if job.killed else "running"])
    for res in reservations:
        if res.end <= lo or res.start >= hi:
            continue
        if res.job_id is not None and res.job_id in row:
            ax.barh(row[res.job_id], (res.end - res.start) / DAY, left=res.start / DAY,
                    height=0.8, color="none", edgecolor=GANTT_COLOURS["reservation"],
                    hatch="///", linewidth=0.6)
        elif res.kind == "admin":
            ax.axvspan(res.start / DAY, res.end / DAY, color="grey", alpha=0.15)
    ax.set_xlim(lo / DAY, hi / DAY)
    ax.set_ylim(-1, max(len(shown), 1))
    ax.invert_yaxis()
    ax.set_ylabel("jobs (by start)")
    keys = [Patch(facecolor=GANTT_COLOURS[k], label=k) for k in ("waiting", "running", "killed")]
    keys += [Patch(facecolor="none", edgecolor=GANTT_COLOURS["reservation"], hatch="///",
                   label="job reservation"),
             Patch(facecolor="grey", alpha=0.15, label="admin reservation")]
    ax.legend(handles=keys, **OUTSIDE)


def _busy_panel(ax: Any, jobs: Sequence[SimJob], lo: float, hi: float,
                procs: int | None) -> None:
    """Processors running jobs over the window: the processor axis of the chart."""
    x, y = busy_steps(jobs, lo, hi)
    ax.step(x / DAY, y, where="post", color=GANTT_COLOURS["running"], label="busy")
    if procs:
        ax.axhline(procs, color="black", linestyle="--", linewidth=0.8,
                   label=f"machine ({procs})")
    ax.set_ylim(0, max(procs or 0, float(y.max()) if y.size else 0.0, 1.0) * 1.05)
    ax.set_ylabel("processors busy")
    ax.set_xlabel("time since trace start (days)")
    ax.legend(**OUTSIDE)


def busy_steps(jobs: Sequence[SimJob], lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """(times, processors running from each time on) over ``[lo, hi]``: a step function."""
    ran = [j for j in jobs if j.end >= 0 and j.start < hi and j.end > lo]
    events = sorted([(max(j.start, lo), j.procs) for j in ran]
                    + [(min(j.end, hi), -j.procs) for j in ran] + [(lo, 0), (hi, 0)])
    times = np.array([t for t, _ in events], float)
    level = np.cumsum([d for _, d in events], dtype=float)
    return times, level
