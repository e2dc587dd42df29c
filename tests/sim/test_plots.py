"""Plots: the utilization series is exact; the PNGs are written; bad windows refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.sim.conventions import SimJob
from grid_tasks.sim.plots import PlotError, plot_gantt, plot_utilization, plot_wait_cdf, utilization_series
from grid_tasks.sim.replay import ReservationSpan


def ran(jid: str, submit: float, start: float, end: float, procs: int, killed: bool = False) -> SimJob:
    job = SimJob(jid, submit, end - start, end - start, procs)
    job.start, job.end, job.killed = start, end, killed
    return job


def test_utilization_series_integrates_the_busy_step_function() -> None:
    # 4 processors: 4 busy over [0, 50), 2 busy over [50, 100)  -> bins of 25 s
    jobs = [ran("a", 0, 0, 50, 2), ran("b", 0, 0, 100, 2)]
    x, y = utilization_series(jobs, procs=4, bins=4)
    assert list(x) == [12.5, 37.5, 62.5, 87.5]
    assert list(y) == pytest.approx([1.0, 1.0, 0.5, 0.5])
    # a bin straddling the change averages it
    _, y = utilization_series(jobs, procs=4, bins=1)
    assert list(y) == pytest.approx([0.75])
    assert utilization_series([], procs=4)[0].size == 0


def test_plots_are_png_files(tmp_path: Path) -> None:
    jobs = [ran("a", 0, 0, 50, 2), ran("b", 5, 10, 100, 2, killed=True), ran("c", 20, 50, 90, 1)]
    spans = [ReservationSpan("c0", "job.c", "job", "c", 40, 80, 1),
             ReservationSpan("c0", "maint", "admin", None, 60, 70, 4)]
    paths = [plot_utilization([("easy", jobs, 4)], tmp_path / "u.png"),
             plot_wait_cdf([("easy", jobs), ("fcfs", jobs)], tmp_path / "w.png"),
             plot_gantt(jobs, (0, 100), tmp_path / "sub" / "g.png", reservations=spans)]
    for path in paths:
        assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 2000


def test_gantt_refuses_an_empty_window(tmp_path: Path) -> None:
    with pytest.raises(PlotError, match="empty Gantt window"):
        plot_gantt([], (10, 10), tmp_path / "g.png")
