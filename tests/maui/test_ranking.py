"""The scheduler's ranking (memo and numpy columns) gives prioritize's order, bit for bit."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from grid_tasks.maui import FSTarget, Job, Node, Scheduler, SchedulerConfig
from grid_tasks.maui import ranking as ranking_module
from grid_tasks.maui.priority import Fairshare, prioritize, score, weighted_terms
from grid_tasks.maui.ranking import Ranking

USERS = [f"u{i}" for i in range(12)]


def _config() -> SchedulerConfig:
    return SchedulerConfig(
        fs_policy="DEDICATEDPS",
        weights={"QUEUETIMEWEIGHT": 1, "XFACTORWEIGHT": 7, "FSUSERWEIGHT": 3, "FSGROUPWEIGHT": 2,
                 "USERWEIGHT": 1, "QOSWEIGHT": 10, "PROCWEIGHT": 0.3, "PEWEIGHT": 0.1, "MEMWEIGHT": 0.01},
        fs_targets={"USER": {u: FSTarget(8.0, m) for u, m in zip(USERS, ["", "+", "-"] * 4)},
                    "GROUP": {"g1": FSTarget(30.0)}},
        cred_priority={"USER": {"u3": 50, "u7": -20}, "QOS": {"high": 100}},
    )


def _queue(n: int, seed: int) -> tuple[list[Job], dict[str, int], Fairshare, SchedulerConfig]:
    rng = random.Random(seed)
    cfg = _config()
    fs = Fairshare(cfg)
    fs.machine = (512.0, 2048.0, 0.0, 0.0)
    for i in range(300):  # usage spread over several fairshare windows
        start = rng.uniform(0, 5 * 86400)
        fs.charge(Job(f"h{i}", user=rng.choice(USERS), group=rng.choice(["g0", "g1"])),
                  rng.choice([1, 3, 64]), start, start + rng.uniform(10, 7200))
    jobs = [Job(f"j{i}", tasks=rng.choice([1, 2, 7, 64]), walltime=rng.choice([60, 999, 3600.5, 86400]),
                submit_time=rng.choice([0, 1, rng.uniform(0, 5 * 86400)]), user=rng.choice(USERS + [None]),
                group=rng.choice(["g0", "g1", None]), qos=rng.choice(["high", None]),
                mem_per_task=rng.choice([0, 100]), priority=rng.choice([0, 0, 0, 5]))
            for i in range(n)]
    return jobs, {j.id: k for k, j in enumerate(jobs)}, fs, cfg


@pytest.mark.parametrize("vector_from", [1, 10**9])
def test_rank_is_prioritize_exactly(monkeypatch: pytest.MonkeyPatch, vector_from: int) -> None:
    monkeypatch.setattr(ranking_module, "VECTOR_FROM", vector_from)
    jobs, seq, fs, cfg = _queue(600, seed=5)
    ranking = Ranking(cfg, fs)
    for now in (5 * 86400.0, 5 * 86400.0 + 0.25, 6 * 86400.0):  # the memo is reused
        assert ranking.rank(jobs, seq, now) == prioritize(jobs, seq, now, cfg, fs)


def test_column_scores_are_the_same_floats_as_score() -> None:
    jobs, _, fs, cfg = _queue(400, seed=9)
    ranking = Ranking(cfg, fs)
    now = 5 * 86400.0 + 17
    terms = weighted_terms(cfg)
    expected = [score(j, now, cfg, fs, terms) for j in jobs]
    assert ranking.vector_scores(jobs, now).tolist() == expected
    assert [ranking.score(j, now) for j in jobs] == expected


def test_ties_keep_submission_order_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = SchedulerConfig(weights={"QUEUETIMEWEIGHT": 0, "PROCWEIGHT": 1})
    jobs = [Job(f"t{i}", tasks=1 + i % 2, submit_time=0) for i in range(300)]
    seq = {j.id: 1000 - k for k, j in enumerate(jobs)}  # later ids were submitted first
    for vector_from in (1, 10**9):
        monkeypatch.setattr(ranking_module, "VECTOR_FROM", vector_from)
        got = Ranking(cfg, Fairshare(cfg)).rank(jobs, seq, 10.0)
        assert got == prioritize(jobs, seq, 10.0, cfg, Fairshare(cfg))
        assert [j.id for j in got[:2]] == ["t299", "t297"]


@pytest.mark.parametrize("vector_from", [1, 10**9])
@pytest.mark.parametrize("by_position", [False, True])
def test_a_fifo_queue_is_ordered_by_submission_then_seq(monkeypatch: pytest.MonkeyPatch,
                                                        vector_from: int, by_position: bool) -> None:
    """Queue time alone (config.fifo): submission time, ties by seq, on both paths; with
    ``by_position`` the jobs come in seq order."""
    monkeypatch.setattr(ranking_module, "VECTOR_FROM", vector_from)
    cfg = SchedulerConfig(weights={"QUEUETIMEWEIGHT": 1})
    assert cfg.fifo
    rng = random.Random(3)
    jobs = [Job(f"f{i}", submit_time=rng.choice([0.0, 5.0, rng.uniform(0, 99)])) for i in range(300)]
    seq = {j.id: (k if by_position else rng.randrange(10**6)) for k, j in enumerate(jobs)}
    got = Ranking(cfg, Fairshare(cfg)).rank(jobs, seq, 100.0, by_position=by_position)
    assert got == prioritize(jobs, seq, 100.0, cfg, Fairshare(cfg))
    assert got == sorted(jobs, key=lambda j: (j.submit_time, seq[j.id]))
    assert [j.submit_time for j in got[:2]] == [0.0, 0.0] and got != jobs


def test_the_memo_forgets_jobs_that_leave_the_queue() -> None:
    # the general engine's memo (one node would otherwise run on the site pool)
    sched = Scheduler([Node("n0", procs=4)], replace(_config(), fast_path=False))
    for i in range(6):
        sched.submit(Job(f"j{i}", tasks=4, walltime=100, user=USERS[i % 3], submit_time=0), now=0)
    sched.iterate(0)
    assert set(sched.ranking.memo) <= {f"j{i}" for i in range(1, 6)}
    sched.cancel("j5", now=1)
    sched.iterate(1)
    assert "j5" not in sched.ranking.memo
    for k in range(1, 6):
        (running,) = sched.running_jobs()
        sched.job_ended(running, now=100 * k)
        sched.iterate(100 * k)
        assert set(sched.ranking.memo) == {j.id for j in sched.idle_jobs()}
    assert sched.ranking.memo == {} and not sched.running_jobs()
