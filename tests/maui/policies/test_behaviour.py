"""What distinguishes one policy object from another, asked directly."""

from grid_tasks.maui import Job, Node
from grid_tasks.maui.policies import (
    BestFit, Combined, CurrentHighest, Dedicated, FirstFit, Greedy, Highest, NoBackfill,
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
