"""The spacing policy: a costly RM rests after an iteration only while others wait."""

from __future__ import annotations

import pytest

from grid_tasks.errors import ConfigError
from grid_tasks.scheduling.spacing import CostlySpacing, LastIteration

POLICY = CostlySpacing(costly_s=0.2, factor=1.0, max_rest_s=5.0)


def test_a_costly_rm_rests_as_long_as_its_iteration_took_while_others_wait():
    last = LastIteration(duration=1.0, ended=100.0)
    assert POLICY.rest(last, others_waiting=True, now=100.25) == pytest.approx(0.75)
    assert POLICY.rest(last, others_waiting=False, now=100.25) == 0.0  # nobody waits
    assert POLICY.rest(last, others_waiting=True, now=101.0) == 0.0  # its rest is over


def test_a_cheap_rm_is_never_delayed():
    for duration in (0.0, 0.01, 0.19):
        last = LastIteration(duration=duration, ended=100.0)
        assert POLICY.rest(last, others_waiting=True, now=100.0) == 0.0
    assert POLICY.rest(None, others_waiting=True, now=100.0) == 0.0  # no figures yet


def test_a_rest_is_bounded_and_a_late_timer_tick_runs():
    slow = LastIteration(duration=30.0, ended=100.0)
    assert POLICY.rest(slow, others_waiting=True, now=100.0) == 5.0  # max_rest_s
    ahead = LastIteration(duration=1.0, ended=160.0)  # the host that ran it runs ahead
    assert POLICY.rest(ahead, others_waiting=True, now=100.0) == 1.0  # one rest, no more
    last = LastIteration(duration=1.0, ended=100.0)
    # the held-off iteration comes a tick before the rest ends: it runs, not sent again
    assert POLICY.rest(last, others_waiting=True, now=100.99) == 0.0
    half = CostlySpacing(factor=0.5)
    assert half.rest(last, others_waiting=True, now=100.0) == pytest.approx(0.5)


def test_last_iteration_figures_round_trip_and_garbage_is_none():
    last = LastIteration(duration=0.734, ended=1_700_000_000.5)
    assert LastIteration.decode(last.encode().encode()) == last
    assert LastIteration.decode(None) is None
    assert LastIteration.decode(b"soon") is None


def test_negative_figures_are_a_typed_error():
    with pytest.raises(ConfigError, match="non-negative"):
        CostlySpacing(factor=-1.0)
