"""StepProfile searches against a plain, obviously correct reading of the profile."""

from __future__ import annotations

from math import inf

from hypothesis import given, settings
from hypothesis import strategies as st

from grid_tasks.maui.profile import StepProfile


def _free_at(prof: StepProfile, t: float, own: tuple[float, float, float]) -> float:
    ex_start, ex_end, amount = own
    return prof.value_at(t) + (amount if ex_start <= t < ex_end else 0)


def _naive_earliest_without(prof: StepProfile, start: float, duration: float, need: float,
                            limit: float, own: tuple[float, float, float]) -> float:
    """Try every candidate start (``start`` and each breakpoint after it) in order."""
    points = sorted({p for p in (*prof.times, own[0], own[1]) if p not in (-inf, inf)})
    for t in [start] + [p for p in points if p > start]:
        if t >= limit:
            return inf
        window = [t] + [p for p in points if t < p < t + duration]
        if all(_free_at(prof, x, own) >= need for x in window):
            return t
    return inf


_changes = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20), st.integers(-4, 4)),
                    max_size=12)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(changes=_changes, start=st.integers(0, 50), duration=st.integers(1, 25),
       need=st.integers(1, 8), own_start=st.integers(1, 60), extra=st.integers(0, 30))
def test_earliest_without_matches_the_plain_reading(changes, start, duration, need, own_start,
                                                    extra):
    prof = StepProfile(8)
    for a, length, delta in changes:
        prof.add(a, a + length, delta)
    # as conservative backfill asks: the job's own reservation starts at the limit
    own = (float(own_start), float(own_start + duration), float(need))
    prof.add(own[0], own[1], -need)
    limit = own_start if extra % 2 else own_start + extra  # and a general limit too
    expected = _naive_earliest_without(prof.copy(), start, duration, need, limit, own)
    assert prof.earliest_without(start, duration, need, limit, own) == expected


def test_earliest_without_finds_the_gap_before_the_reservation():
    prof = StepProfile(4)
    prof.add(0, 10, -4)   # full until 10
    prof.add(20, 30, -4)  # the job's own reservation [20, 30) of all 4
    own = (20.0, 30.0, 4.0)
    assert prof.earliest_without(0, 10, 4, 20, own) == 10
    assert prof.earliest_without(0, 11, 4, 20, own) == 10  # runs into its own slot: fine
    prof.add(15, 16, -1)  # a one-processor job in the gap
    assert prof.earliest_without(0, 10, 4, 20, own) == 16
    assert prof.earliest_without(0, 10, 4, 16, own) == inf
