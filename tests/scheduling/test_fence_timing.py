"""Redelivery and deferral agree (issue 21, finding 6): the timing relations that bound
how long a killed daemon's jobs wait, and that a fenced part is dead by its deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.celery_app import restore_interval
from grid_tasks.leases import fence_span, lease_timing, renew_bound
from grid_tasks.node.watchdog import tick_for
from grid_tasks.scheduling.recovery import launch_timeout, redelivery_bound
from grid_tasks.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_shipped_settings_start_a_killed_daemons_jobs_again_within_60_s() -> None:
    shipped, timeout = Settings.from_env({}), launch_timeout({})
    assert (shipped.visibility_timeout, timeout) == (30.0, 30.0)
    assert fence_span(shipped) == 18.0
    assert redelivery_bound(shipped, timeout) == 54.0 <= 60.0
    text = " ".join(README.read_text().split())
    assert "start again within 54 s, at most 60 s, with the shipped settings" in text


def test_a_redelivered_launch_never_comes_before_the_launch_timeout() -> None:
    """Redelivery (visibility timeout, then the restore scan) finds the launch fenced:
    its token is a tombstone, so it starts nothing, and the job is not deferred."""
    shipped = Settings.from_env({})
    assert launch_timeout({}) <= shipped.visibility_timeout
    assert restore_interval(shipped.visibility_timeout) > 0


@pytest.mark.parametrize("interval", [0.2, 0.5, 1.0, 5.0, 10.0])
def test_every_part_is_dead_before_its_fence_deadline(interval: float) -> None:
    """Recovery sees a part lost no sooner than one lease TTL after its last renewal; the
    part's processes die one renewal bound (plus a watchdog tick) after it: the fence
    span leaves at least a second more."""
    settings = Settings(heartbeat_interval=interval, heartbeat_ttl=1.8 * interval)
    _, ttl = lease_timing(settings)
    bound = renew_bound(settings)
    # a job manager kills only once its lease has expired anyway, and rides out a
    # short Redis restart (a second or two) even with test-sized heartbeats
    assert bound >= ttl and bound >= 5.0
    assert fence_span(settings) >= bound + tick_for(bound) + 1.0
