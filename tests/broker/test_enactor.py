"""The enactor over real tokens: first acceptable schedule, refusals, veto, difference sets."""

from __future__ import annotations

import time

import pytest

from grid_tasks.broker.enactor import (
    AttemptOutcome, Enactor, EnactmentRefused, placement_claims)
from grid_tasks.broker.planner import Placement, Schedule
from grid_tasks.legion.tokens import Claim, TokenStore, scan

T0 = 2_000_000.0
CAPS = {"rmA/node1": 4, "rmA/node2": 4, "rmB/node3": 2, "rmB/node4": 2, "rmC/node5": 8}


def sched(start: float, *places: tuple[int, str, tuple[tuple[str, int], ...]],
          duration: float = 100.0) -> Schedule:
    return Schedule(start, tuple(Placement(i, rm, start, duration, nodes)
                                 for i, rm, nodes in places))


def accept(_schedule: Schedule) -> bool:
    return True


@pytest.fixture
def grid(store: TokenStore) -> TokenStore:
    store.set_capacities(CAPS)
    return store


def test_placement_claims_one_per_node() -> None:
    p = Placement(0, "rmA", T0, 50.0, (("node1", 3), ("node2", 1)))
    assert placement_claims(p) == [Claim("rmA/node1", T0, T0 + 50, 3),
                                   Claim("rmA/node2", T0, T0 + 50, 1)]


def test_first_schedule_that_fits_is_confirmed(grid: TokenStore) -> None:
    s = sched(T0, (0, "rmA", (("node1", 4),)), (1, "rmB", (("node3", 2), ("node4", 1))))
    result = Enactor(grid, owner="b").enact([s], "job-1", accept)
    assert result.schedule == s and [a.outcome for a in result.attempts] == [
        AttemptOutcome.CONFIRMED]
    held = grid.tokens()
    assert {t.id for t in held} == {t.id for t in result.tokens}
    assert all(t.confirmed and t.owner == "job-1" for t in held)
    assert sorted(t.resource for t in held) == ["rmA/node1", "rmB/node3", "rmB/node4"]


def test_busy_resource_moves_on_to_the_next_candidate(grid: TokenStore) -> None:
    grid.take([Claim("rmB/node3", T0, T0 + 10, 1)], "someone-else")
    busy = sched(T0, (0, "rmA", (("node1", 2),)), (1, "rmB", (("node3", 2),)))
    later = sched(T0 + 10, (0, "rmA", (("node1", 2),)), (1, "rmB", (("node3", 2),)))
    result = Enactor(grid).enact([busy, later], "job-2", accept)
    assert result.schedule == later
    first = result.attempts[0]
    assert first.outcome is AttemptOutcome.NO_TOKENS and first.resource == "rmB/node3"
    assert scan(grid).ok


def test_veto_keeps_unchanged_placements_no_thrashing(grid: TokenStore) -> None:
    """Legion difference sets: rmB vetoes; the next candidate reuses rmA's token as is."""
    a = (0, "rmA", (("node1", 4),))
    first = sched(T0, a, (1, "rmB", (("node3", 2),)))
    second = sched(T0, a, (1, "rmC", (("node5", 2),)))
    seen = []

    def no_rmB(schedule: Schedule) -> bool:
        seen.append([t.id for t in grid.tokens()])
        return "rmB" not in schedule.rms

    result = Enactor(grid).enact([first, second], "job-3", no_rmB)
    assert [x.outcome for x in result.attempts] == [AttemptOutcome.VETOED,
                                                    AttemptOutcome.CONFIRMED]
    assert (result.attempts[1].kept, result.attempts[1].released,
            result.attempts[1].acquired) == (1, 1, 1)
    rmA_token = next(t for t in result.tokens if t.resource == "rmA/node1")
    assert rmA_token.id in seen[0]  # the very token taken for the first candidate
    assert sorted(t.resource for t in grid.tokens()) == ["rmA/node1", "rmC/node5"]


def test_all_refused_releases_everything_with_reasons(grid: TokenStore) -> None:
    s1 = sched(T0, (0, "rmA", (("node1", 4),)))
    s2 = sched(T0, (0, "rmB", (("node3", 3),)))  # bigger than the node
    with pytest.raises(EnactmentRefused) as info:
        Enactor(grid).enact([s1, s2], "job-4", lambda s: False)
    outcomes = [a.outcome for a in info.value.attempts]
    assert outcomes == [AttemptOutcome.VETOED, AttemptOutcome.NO_TOKENS]
    assert "rmB/node3" in str(info.value)
    assert grid.tokens() == []


def test_tokens_expiring_during_confirmation_are_lost_and_undone(grid: TokenStore) -> None:
    s1 = sched(T0, (0, "rmA", (("node1", 1),)))
    s2 = sched(T0, (0, "rmA", (("node2", 1),)))
    undone = []

    def slow_rm(schedule: Schedule) -> bool:
        if schedule is s1:
            time.sleep(0.2)  # longer than the token TTL
        return True

    result = Enactor(grid, ttl=0.1).enact([s1, s2], "job-5", slow_rm, undo_fn=undone.append)
    assert [a.outcome for a in result.attempts] == [AttemptOutcome.LOST,
                                                    AttemptOutcome.CONFIRMED]
    assert undone == [s1]
    assert [t.resource for t in grid.tokens()] == ["rmA/node2"]


def test_a_crashing_confirm_releases_what_was_held(grid: TokenStore) -> None:
    def crash(_schedule: Schedule) -> bool:
        raise RuntimeError("RM exploded")

    with pytest.raises(RuntimeError):
        Enactor(grid).enact([sched(T0, (0, "rmA", (("node1", 1),)))], "job-6", crash)
    assert grid.tokens() == []


def test_confirmed_tokens_start_objects(grid: TokenStore) -> None:
    result = Enactor(grid).enact([sched(T0, (0, "rmA", (("node1", 1),)))], "job-7", accept)
    [token] = result.tokens
    assert grid.start_object(token.id, lambda t: (t.owner, t.resource)) == ("job-7",
                                                                           "rmA/node1")
