"""Metrics: definitions checked on hand-computed schedules, groups, per-job output."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from grid_tasks.sim.conventions import SimJob
from grid_tasks.sim.metrics import MetricsError, size_class, summarize, write_jobs


def done(jid: str, submit: float, start: float, end: float, procs: int, user: int = 1,
         measured: bool = True, killed: bool = False) -> SimJob:
    job = SimJob(jid, submit, end - start, end - start, procs, user=user, measured=measured)
    job.start, job.end, job.killed = start, end, killed
    return job


def schedule() -> list[SimJob]:
    return [
        done("a", 0, 0, 100, 4, user=1),          # wait 0, run 100: bsld 1
        done("b", 10, 100, 105, 2, user=2),       # wait 90, run 5: bsld (95)/10 = 9.5
        done("c", 20, 120, 320, 8, user=1, killed=True),  # wait 100, run 200: bsld 1.5
        done("x", 5, 5, 6, 1, measured=False),    # left out of every metric
    ]


def test_definitions_on_a_hand_computed_schedule() -> None:
    s = summarize(schedule(), procs=8)
    assert s.jobs_total == 4 and s.jobs_measured == 3 and s.jobs_killed == 1
    assert s.wait_s.mean == pytest.approx((0 + 90 + 100) / 3)
    assert s.response_s.mean == pytest.approx((100 + 95 + 300) / 3)
    assert s.bsld.mean == pytest.approx((1 + 9.5 + 1.5) / 3)
    assert s.bsld.max == pytest.approx(9.5)
    assert s.wait_s.p50 == pytest.approx(90)
    # utilization = sum(run x procs) / (P x (last end - first submit))
    assert s.utilization == pytest.approx((100 * 4 + 5 * 2 + 200 * 8) / (8 * 320))
    assert s.makespan_s == 320 and s.first_submit == 0 and s.last_end == 320


def test_bounded_slowdown_threshold_is_a_parameter() -> None:
    job = [done("b", 10, 100, 105, 2)]  # wait 90, run 5
    assert summarize(job, procs=2, threshold=2).bsld.mean == pytest.approx(95 / 5)
    assert summarize(job, procs=2, threshold=100).bsld.mean == 1.0  # bounded below by 1


def test_size_classes_and_users() -> None:
    assert [size_class(p) for p in (1, 2, 4, 5, 16, 17, 64, 65, 256, 257, 1024)] == [
        "1", "2-4", "2-4", "5-16", "5-16", "17-64", "17-64", "65-256", "65-256", "257+", "257+"]
    s = summarize(schedule(), procs=8)
    assert list(s.by_size) == ["2-4", "5-16"]
    assert s.by_size["2-4"].jobs == 2 and s.by_size["2-4"].mean_wait_s == pytest.approx(45)
    assert s.by_size["5-16"].proc_seconds == pytest.approx(1600)
    # users sorted by processor-seconds used, biggest first
    assert list(s.by_user) == ["1", "2"]
    assert s.by_user["1"].jobs == 2 and s.by_user["1"].mean_bsld == pytest.approx(1.25)


def test_headline_keys_for_json() -> None:
    head = summarize(schedule(), procs=8).to_dict()
    for key in ("jobs_measured", "mean_wait_s", "mean_bsld", "utilization", "makespan_s",
                "by_size", "by_user", "wait"):
        assert key in head
    json.dumps(head)


def test_nothing_measured_is_an_error() -> None:
    with pytest.raises(MetricsError, match="no measured job"):
        summarize([done("x", 0, 0, 1, 1, measured=False)], procs=1)


@pytest.mark.parametrize("name", ["jobs.csv", "jobs.jsonl"])
def test_per_job_output_round_trips(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    assert write_jobs(schedule(), path) == 4
    if name.endswith(".csv"):
        rows = list(csv.DictReader(path.open()))
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b", "c", "x"]
    b = rows[1]
    assert float(b["wait"]) == 90 and float(b["run"]) == 5 and float(b["bsld"]) == 9.5
    assert str(rows[2]["killed"]) in ("True", "true")


def test_per_job_output_refuses_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(MetricsError, match=r"\.csv or \.jsonl"):
        write_jobs(schedule(), tmp_path / "jobs.txt")
