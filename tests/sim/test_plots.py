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


def test_gantt_reads_days_and_has_a_processor_axis() -> None:
    from grid_tasks.sim.plots import DAY, gantt_figure

    jobs = [ran("a", 0, 0.5 * DAY, 1.5 * DAY, 2), ran("b", 0, DAY, 2 * DAY, 3)]
    fig = gantt_figure(jobs, (0.0, 2 * DAY), procs=8)
    rows, busy = fig.axes[:2]
    assert rows.get_xlim() == (0.0, 2.0)  # days, as the utilization plot
    assert busy.get_xlabel() == "time since trace start (days)"
    assert busy.get_ylabel() == "processors busy" and busy.get_ylim()[1] >= 8
    running = [p for p in rows.patches if p.get_facecolor()[:3] != (1, 1, 1)][1::2]
    assert [(p.get_x(), p.get_width()) for p in running] == [(0.5, 1.0), (1.0, 1.0)]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in (rows, busy):  # legends beside the axes, never over a bar or a curve
        assert ax.get_legend().get_window_extent(renderer).x0 >= \
            ax.get_window_extent(renderer).x1


def test_busy_steps_count_processors_inside_the_window() -> None:
    from grid_tasks.sim.plots import busy_steps

    jobs = [ran("a", 0, 0, 50, 2), ran("b", 0, 20, 100, 3), ran("c", 0, 200, 300, 4)]
    x, y = busy_steps(jobs, 10, 60)
    steps = dict(zip(x.tolist(), y.tolist()))  # the last level at each time
    assert steps == {10.0: 2.0, 20.0: 5.0, 50.0: 3.0, 60.0: 0.0}
