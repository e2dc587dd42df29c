"""The job manager's side of fencing, on real processes and Redis: a fenced epoch kills,
an empty (restarted) Redis is ridden out by re-asserting the epoch, and a lease not
renewed for the renewal bound kills."""

from __future__ import annotations

import dataclasses
import time

from redis.exceptions import ConnectionError as RedisConnectionError

from grid_tasks.gram import keys
from grid_tasks.gram.jobmanager import Part
from grid_tasks.gram.report import report_finished
from grid_tasks.states import JobState
from tests.gram import test_jobmanager as jm
from tests.gram.test_jobmanager import _history, _live_members, _manager
from tests.waiting import until

side = jm.side  # the node context and gatekeeper fixture of the job manager tests

SLEEP = "&(executable=/bin/sleep)(arguments=60)"



def _running(manager, redis) -> None:
    manager.start()
    until(lambda: manager.procs and redis.exists(keys.lease_key(manager.req.job_id, "node1")),
           10, "the lease")


def test_a_fenced_epoch_kills_the_processes(side) -> None:
    manager = _manager(side, SLEEP)
    redis = side.ctx.redis
    _running(manager, redis)
    redis.set(keys.token_key(manager.req.job_id), keys.fenced("tok"))  # what recovery does
    manager.join(timeout=10)
    assert not manager.is_alive()
    assert _live_members({p.pid for _, p in manager.procs}) == []
    row, _ = _history(side, manager.req.job_id)
    assert row.gram_error == "SYSTEM_CANCELLED" and "fenced" in row.failure_reason


def test_an_empty_restarted_redis_is_ridden_out_and_the_epoch_reasserted(side) -> None:
    manager = _manager(side, SLEEP)
    redis, job_id = side.ctx.redis, None
    _running(manager, redis)
    job_id = manager.req.job_id
    try:
        # a restarted, empty Redis: no token, no lease (the job was never fenced)
        redis.delete(keys.token_key(job_id), keys.lease_key(job_id, "node1"))
        until(lambda: redis.exists(keys.lease_key(job_id, "node1")), 5, "the lease again")
        assert redis.get(keys.token_key(job_id)) == b"tok"  # its own epoch, re-asserted
        assert manager.is_alive() and manager.procs[0][1].poll() is None
    finally:
        redis.set(keys.cancel_key(job_id), 1)
        manager.join(timeout=10)
    assert _history(side, job_id)[0].gram_error == "USER_CANCELLED"


class _Cut:
    """The job manager's Redis client, cut off on demand (its calls raise)."""

    def __init__(self, client) -> None:
        self.client, self.cut = client, False

    def eval(self, *args, **kwargs):
        if self.cut:
            raise RedisConnectionError("cut off")
        return self.client.eval(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def test_a_lease_not_renewed_for_the_bound_kills_the_processes(side) -> None:
    bound = 1.5
    manager = _manager(side, SLEEP)
    cut = _Cut(side.ctx.redis)
    manager.ctx = dataclasses.replace(side.ctx, redis=cut, renew_bound=bound)
    _running(manager, side.ctx.redis)
    cut.cut = True  # Redis unreachable for longer than the bound
    began = time.monotonic()
    until(lambda: manager.procs[0][1].poll() is not None, bound + 3, "the kill")
    took = time.monotonic() - began
    assert bound * 0.5 < took < bound + 3
    cut.cut = False  # the end is reported once Redis is back
    manager.join(timeout=10)
    row, _ = _history(side, manager.req.job_id)
    assert row.state is JobState.FAILED and row.gram_error == "JM_STOPPED"
    assert "lease not renewed" in row.failure_reason


def test_a_launch_redelivered_after_the_fence_starts_nothing(side) -> None:
    """The launch claim starts only on the current token: not on a tombstone (the
    launch was fenced before its task came back), nor on none at all (an empty Redis)."""
    from grid_tasks.gram.tasks import _launch_all

    manager = _manager(side, SLEEP)
    redis, job_id = side.ctx.redis, manager.req.job_id
    redis.set(keys.token_key(job_id), keys.fenced("tok"))
    assert _launch_all(side.app, [manager.req]) == ["skipped"]
    redis.delete(keys.token_key(job_id))
    assert _launch_all(side.app, [manager.req]) == ["skipped"]
    assert not redis.exists(keys.lease_key(job_id, "node1"))


def test_a_fenced_manager_ending_late_leaves_a_new_launchs_lease(side) -> None:
    """The job was launched again on this node (new token, new lease) while the fenced
    job manager was frozen: its end report keeps the new launch's lease."""
    manager = _manager(side, SLEEP)
    redis, job_id = side.ctx.redis, manager.req.job_id
    lease = keys.lease_key(job_id, "node1")
    redis.set(lease, "the-new-launch", px=60_000)
    report_finished(side.ctx, manager.req, Part({"0": -9}, "fenced", "SYSTEM_CANCELLED").to_json())
    assert redis.get(lease) == b"the-new-launch"
    redis.set(lease, manager.req.token, px=60_000)  # its own lease does go
    report_finished(side.ctx, manager.req, Part({"0": 0}).to_json())
    assert not redis.exists(lease)
