"""A plan made for showq's order and a kept digest: its priorities as totals only
(load_plan's ``scores``), the same floats and decisions as the plan with its
breakdowns, and the digest's ranking in showq's order sorted column-wise."""

from __future__ import annotations

from datetime import timedelta

from grid_tasks.ops.plan import load_plan
from grid_tasks.ops.plan_digest import Ranked
from grid_tasks.ops.plan_replay import ranked_of
from grid_tasks.states import JobState

from .conftest import NOW


def _deep(add_job, bulk_jobs):
    add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=2, nodes={"a1": 2},
            walltime=3600, started=-600)
    bulk_jobs("rmA", 250)
    bulk_jobs("rmA", 30, user_name="alice")  # USERCFG priority 500: ahead of the rest
    # the same priority and submission: the id breaks the tie
    bulk_jobs("rmA", 40, submit_time=NOW - timedelta(seconds=300))


def test_scores_only_plan_ranks_and_decides_as_the_full_one(session, add_job, bulk_jobs):
    _deep(add_job, bulk_jobs)
    full = load_plan(session, "rmA", NOW)
    lean = load_plan(session, "rmA", NOW, breakdowns=False, scores=True)
    assert lean.priorities is None and full.scores is None
    totals = {p.job_id: p.total for p in full.priorities}
    assert list(lean.idle) == list(full.idle)
    assert [float(s) for s in lean.scores] == [totals[j] for j in lean.idle]
    assert {k: s.allocation for k, s in lean.started.items()} == \
        {k: s.allocation for k, s in full.started.items()}
    assert [(r.name, r.start, r.allocation) for r in lean.scheduler.reservations()] == \
        [(r.name, r.start, r.allocation) for r in full.scheduler.reservations()]


def test_digest_ranking_is_showq_order(session, add_job, bulk_jobs):
    _deep(add_job, bulk_jobs)
    full = load_plan(session, "rmA", NOW)
    by_python = Ranked.of({int(p.job_id): (p.total, full.idle[p.job_id].submit_time)
                           for p in full.priorities})
    lean = load_plan(session, "rmA", NOW, breakdowns=False, scores=True)
    assert ranked_of(lean) == by_python == ranked_of(full)
    ranked = ranked_of(lean)
    assert len(ranked) == len(full.idle) and len(set(ranked.priority)) < len(ranked)


def test_ids_that_are_not_gram_ids_and_unknown_submissions_keep_their_meaning():
    """The column-wise conversions: a core id that is not a number is -1 (left out of the
    digest), an unknown submission time (0 or None) sorts last."""
    from grid_tasks.maui import Job as CoreJob
    from grid_tasks.ops.plan_replay import _ids_of, _submitted

    numbered = [CoreJob("12", submit_time=5.0), CoreJob("7", submit_time=0.0)]
    assert _ids_of(numbered).tolist() == [12, 7]
    assert _submitted(numbered).tolist() == [5.0, float("inf")]
    mixed = numbered + [CoreJob("showstart"), CoreJob("3")]
    mixed[2].submit_time = None
    assert _ids_of(mixed).tolist() == [12, 7, -1, 3]
    assert _submitted(mixed).tolist() == [5.0, float("inf"), float("inf"), float("inf")]
