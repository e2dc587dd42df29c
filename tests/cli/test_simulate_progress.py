"""The replay's progress bar: redrawn by wall time in the shell, fed per events."""

from __future__ import annotations

from pathlib import Path

from rich.progress import Progress

from grid_tasks.cli.simulate_input import BarTicker, progress_bar
from grid_tasks.sim.replay import ClusterSpec, Replay
from tests.sim.conftest import swf_line, write_swf


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ticker_redraws_at_most_once_per_interval() -> None:
    bar = Progress(disable=True)
    task = bar.add_task("easy", total=100, submitted=0)
    clock = Clock()
    ticker = BarTicker(bar, task, interval=0.5, clock=clock)
    for step in range(20):  # 20 calls, one every 1/8 s
        clock.now = step / 8
        ticker(step * 5, step * 4)
    assert ticker.updates == 5  # at 0.0, 0.5, 1.0, 1.5 and 2.0 s
    assert bar.tasks[0].completed == 64 and bar.tasks[0].fields["submitted"] == 80


def test_every_policy_moves_on_the_bar(tmp_path: Path) -> None:
    lines = [swf_line(i, 10 * i, 100, 1 + i % 4, req_time=200) for i in range(1, 401)]
    trace = write_swf(tmp_path / "t.swf", lines, header=["MaxProcs: 8", "MaxJobs: 400"])
    bar = progress_bar(True, submitted=True)
    assert bar is not None
    bar.disable = True
    seen: dict[str, list[int]] = {}
    for policy in ("easy", "fcfs"):
        replay = Replay([ClusterSpec(trace)], policy=policy)
        task = bar.add_task(policy, total=replay.expected_jobs(), submitted=0)
        ticker = BarTicker(bar, task, interval=0.0)
        replay.run(progress=lambda s, f, t=ticker, p=policy: (t(s, f), seen.setdefault(p, []).append(f)))
        assert bar.tasks[task].total == 400
    for counts in seen.values():
        assert len(counts) > 10 and counts == sorted(counts) and counts[-1] == 400
