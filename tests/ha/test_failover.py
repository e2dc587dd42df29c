"""Two real ``grid-tasks beat`` processes: one sends, the standby takes over when it dies.

A probe task every 0.3 s is executed by a real worker which records, in Redis,
when it ran and which beat sent it (the scheduler tags every message).
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.ha.conftest import EVERY, LEASE, POLL

pytestmark = pytest.mark.timeout(120)


def _window(runs: list[tuple[float, str]], start: float, end: float) -> list[tuple[float, str]]:
    return [r for r in runs if start <= r[0] < end]


def _assert_steady(runs: list[tuple[float, str]], sender: str, seconds: float) -> None:
    """Exactly one beat sends, once per period: no double firing, no gap."""
    assert {s for _, s in runs} == {sender}, runs
    expected = seconds / EVERY
    # Upper bound: a second sender would double the count.  The lower bound is loose
    # because a loaded machine (2 cores, parallel suites) delays ticks, never adds them.
    assert expected * 0.5 <= len(runs) <= expected + 1, (len(runs), expected)
    gaps = [b[0] - a[0] for a, b in zip(runs, runs[1:])]
    assert min(gaps) > EVERY / 3, f"two sends close together: {gaps}"


def test_standby_takes_over_within_the_lease_after_sigkill(beats, probe_runs):
    beats.start("A")
    beats.wait(lambda: beats.leader() == "A", 30, "A to lead")
    beats.start("B")
    beats.wait(lambda: beats.role("B") == "standby", 30, "B to stand by")

    t0 = time.time()
    time.sleep(3.0)
    _assert_steady(_window(probe_runs(), t0, time.time()), "A", time.time() - t0)

    beats.signal("A", signal.SIGKILL)
    killed = time.time()
    beats.wait(lambda: any(s == "B" for _, s in probe_runs()), LEASE + POLL + 5,
               "the standby's first send")
    first_b = min(t for t, s in probe_runs() if s == "B")
    failover = first_b - killed
    assert failover <= LEASE + POLL + 1.5, f"failover took {failover:.2f} s"
    assert beats.leader() == "B"

    t1 = time.time()
    time.sleep(2.0)
    after = _window(probe_runs(), t1, time.time())
    _assert_steady(after, "B", time.time() - t1)
    assert {s for _, s in probe_runs()} == {"A", "B"}, "every send is tagged by its beat"


def test_paused_leader_sends_nothing_and_a_clean_stop_hands_over_at_once(beats, probe_runs):
    beats.start("A")
    beats.wait(lambda: beats.leader() == "A", 30, "A to lead")
    beats.start("B")
    beats.wait(lambda: beats.role("B") == "standby", 30, "B to stand by")

    beats.signal("A", signal.SIGSTOP)  # a frozen leader: its lease runs out
    stopped = time.time()
    beats.wait(lambda: beats.leader() == "B", LEASE + POLL + 3, "B to lead")
    time.sleep(0.5)
    beats.signal("A", signal.SIGCONT)
    beats.wait(lambda: beats.role("A") == "standby", 10, "the woken A to stand by")
    time.sleep(1.0)
    late_a = [r for r in probe_runs() if r[1] == "A" and r[0] > stopped + 0.5]
    assert late_a == [], f"the paused leader sent after losing its lease: {late_a}"

    beats.children["B"].process.send_signal(signal.SIGTERM)  # clean stop releases the lease
    released = time.time()
    took = beats.wait(lambda: beats.leader() == "A", LEASE, "A to lead again") - released
    assert took < LEASE * 0.75, f"hand-over after a clean stop took {took:.2f} s"
    beats.wait(lambda: any(s == "A" and t > released for t, s in probe_runs()), 5,
               "A to send again")
