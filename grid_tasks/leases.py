"""Lease and fence timing, shared by node daemons (job managers, their watchdog) and
the scheduler (recovery), which must agree on it.

A job manager refreshes its job's lease every *interval* with a *TTL*.  A job manager
that has not renewed its lease for the *renewal bound* kills its processes (and the
node daemon's watchdog kills them if the daemon itself is frozen), so a part the
scheduler declared lost is surely dead one *fence span* (bound plus kill grace) after
the scheduler first saw its lease gone: only then are its resources reused and the
job launched again (DESIGN.md invariant 9).
"""

from __future__ import annotations

from typing import Any

#: A job manager never kills over a missed renewal sooner than this (seconds): a
#: short Redis restart, a second or two, is ridden out even with test-sized heartbeats.
MIN_RENEW_BOUND_S = 5.0
#: Time from the renewal bound's end to the processes being dead and reaped: the
#: watchdog's look (a quarter second at most), SIGKILL, and clock skew of the
#: scheduler's iteration; one lease interval is added on top.
KILL_GRACE_S = 2.0


def lease_timing(settings: Any) -> tuple[float, float]:
    """(refresh interval, TTL) of job manager leases, from the heartbeat settings."""
    interval = min(1.0, float(settings.heartbeat_interval))
    return interval, max(2.0, 3 * float(settings.heartbeat_interval))


def renew_bound(settings: Any) -> float:
    """Seconds a job manager may go without renewing its lease before its processes
    are killed: the lease TTL, at least :data:`MIN_RENEW_BOUND_S`."""
    _, ttl = lease_timing(settings)
    return max(ttl, MIN_RENEW_BOUND_S)


def fence_span(settings: Any) -> float:
    """Seconds from when recovery first sees a part lost (or its launch unconfirmed)
    to its fence deadline, after which none of its processes can still run."""
    interval, _ = lease_timing(settings)
    return renew_bound(settings) + KILL_GRACE_S + interval
