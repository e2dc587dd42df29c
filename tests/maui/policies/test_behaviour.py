"""What distinguishes one policy object from another, asked directly."""

import random

import pytest

from grid_tasks.maui import Job, Node
from grid_tasks.maui.policies import (
    BestFit, Combined, CurrentHighest, Dedicated, FirstFit, Greedy, Highest, NoBackfill,
    UnknownPolicyError, backfill_metric,
)


def _jobs(*sizes):
    return [Job(f"j{i}", tasks=p) for i, p in enumerate(sizes)]


def test_highest_keeps_ranked_reservations_and_currenthighest_drops_all():
    reserved = ["a", "b", "c"]
    ranked = {"a", "c"}
    assert Highest(2).dropped(reserved, ranked) == ["b"]
    assert CurrentHighest(2).dropped(reserved, ranked) == reserved
    assert Highest.reoptimizes and not CurrentHighest.reoptimizes


def test_backfill_orders_differ_on_the_same_candidates():
    picks = _jobs(3, 6, 5, 5)
    free = lambda: 10  # noqa: E731
    assert [j.procs for j in FirstFit().order(picks, free)] == [3, 6, 5, 5]
    assert [j.procs for j in BestFit().order(picks, free)] == [6, 5, 5, 3]
    # greedy puts first the subset that fills all ten processors
    assert [j.procs for j in Greedy().order(picks, free)][:2] == [5, 5]


def test_only_greedy_asks_for_the_free_processors():
    calls = []

    def free():
        calls.append(1)
        return 4

    BestFit().order(_jobs(2, 3), free)
    FirstFit().order(_jobs(2, 3), free)
    assert calls == []
    Greedy().order(_jobs(2, 3), free)
    assert calls == [1]


def test_greedy_keeps_candidates_past_its_window_in_order():
    picks = _jobs(*([1] * (Greedy.window + 3)))
    out = Greedy().order(picks, lambda: 2)
    assert out[Greedy.window:] == picks[Greedy.window:]
    assert sorted(j.id for j in out) == sorted(j.id for j in picks)


def test_no_backfill_neither_backfills_nor_starts_at_once():
    assert not NoBackfill.backfills and not NoBackfill.at_once
    assert FirstFit.backfills and FirstFit.at_once
    assert BestFit.backfills and not BestFit.at_once


def test_dedicated_ignores_measured_use_and_combined_subtracts_it():
    node = Node("n", procs=8, memory=1000, utilized_procs=3, utilized_memory=400)
    assert (Combined().procs_now(node), Combined().memory_now(node)) == (5, 600)
    assert Dedicated().procs_now(node) == float("inf") and not Dedicated.counts_utilized


def _timed(*shapes):
    """Jobs of (processors, walltime)."""
    return [Job(f"t{i}", tasks=p, walltime=w) for i, (p, w) in enumerate(shapes)]


def test_bestfit_ranks_by_the_backfill_metric():
    picks = _timed((4, 100), (2, 1000), (3, 10))
    free = lambda: 10  # noqa: E731
    by = {name: [j.id for j in BestFit(backfill_metric(name)).order(picks, free)]
          for name in ("PROCS", "PROCSECONDS", "SECONDS")}
    assert by == {"PROCS": ["t0", "t2", "t1"], "PROCSECONDS": ["t1", "t0", "t2"],
                  "SECONDS": ["t1", "t0", "t2"]}


def test_greedy_maximises_the_metric_within_the_free_processors():
    # 6 free: PROCS fills them (4+2); SECONDS prefers the long 3+3 pair
    picks = _timed((4, 10), (2, 10), (3, 500), (3, 400))
    free = lambda: 6  # noqa: E731
    assert [j.id for j in Greedy(backfill_metric("PROCS")).order(picks, free)][:2] == ["t0", "t1"]
    assert [j.id for j in Greedy(backfill_metric("SECONDS")).order(picks, free)][:2] == ["t2", "t3"]


def test_greedy_with_procs_is_the_subset_sum_it_always_was():
    """PROCS must keep the decisions of the plain subset-sum (first subset found for
    the largest total), on many random candidate lists."""
    def subset_sum(jobs, free):
        best = {0: ()}
        for i, job in enumerate(jobs):
            for used, chosen in list(best.items()):
                if used + job.procs <= free and used + job.procs not in best:
                    best[used + job.procs] = chosen + (i,)
        chosen = best[max(best)]
        return [jobs[i] for i in chosen] + [j for i, j in enumerate(jobs) if i not in chosen]

    rng = random.Random(7)
    for _ in range(200):
        jobs = _jobs(*(rng.randint(1, 9) for _ in range(rng.randint(1, 12))))
        free = rng.randint(0, 30)
        assert Greedy.knapsack(jobs, free) == subset_sum(jobs, free)


def test_pe_values_a_memory_heavy_job_by_its_memory_share():
    machine = (10.0, 1000.0, 0.0, 0.0)
    light, heavy = Job("l", tasks=2), Job("h", tasks=1, mem_per_task=500)
    pe = backfill_metric("PE", machine)
    assert (pe(light), pe(heavy)) == (2.0, 5.0)
    assert backfill_metric("NODES")(Job("n", tasks=8, tasks_per_node=4)) == 2.0


def test_an_unknown_metric_names_the_parameter():
    with pytest.raises(UnknownPolicyError, match="BACKFILLMETRIC 'WIDTH'"):
        backfill_metric("WIDTH")
