"""One follower per Slurm RM, run by the workers that serve its gatekeeper queue.

A worker consuming ``gram.<rm>`` of a Slurm RM starts a thread that follows that RM's
jobs (:class:`~grid_tasks.scheduling.slurm_follow.Follower`), every :data:`INTERVAL` while jobs
are open.  Several such workers may run (one per host, a standby): a Redis lease
(:data:`LEASE_MS`, renewed every pass) lets exactly one of them follow at a time, so a
job's state keeps one writer; when its holder dies another takes over within a lease
(and the rows' version column refuses a write of a holder that overstayed it).
Slurm not answering is logged once per outage and the passes go on: its jobs are
followed again as soon as slurmctld is back.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from grid_tasks.celery_app import gatekeeper_queue
from grid_tasks.db.errors import ConcurrentUpdateError
from grid_tasks.scheduling.slurm_follow import Follower
from grid_tasks.scheduling.slurm_jobs import SlurmSide, lease_key, slurm_sides, wake_key
from grid_tasks.services import Services, services_for
from grid_tasks.slurm.errors import SlurmUnavailable

log = logging.getLogger(__name__)

#: Seconds between passes while the RM has open jobs, and while it has none; a
#: submission wakes the follower at once (:func:`~grid_tasks.scheduling.slurm_jobs.wake_key`).
INTERVAL, IDLE_INTERVAL = 0.25, 0.5
#: After a wake-up, passes this often for :data:`HURRY_S`: Slurm starts a job on a free
#: cluster within milliseconds of sbatch, and its start should be seen as soon.
HURRY_INTERVAL, HURRY_S = 0.05, 3.0
#: Pauses shorter than this are slept, not spent blocked on the wake-up list.
BLOCK_MIN_S = 0.2
#: Seconds between passes while Slurm does not answer, or the lease is another's.
RETRY_INTERVAL = 1.0
#: The lease outlasts the longest pass (a client command gives up after
#: :data:`~grid_tasks.slurm.client.COMMAND_TIMEOUT`; Slurm's own clients retry a
#: stopped controller for 9 s), so a living follower never loses it mid-pass; a dead
#: one's jobs are taken up by another worker within it.
LEASE_MS = 20_000

# KEYS: lease.  ARGV: token, TTL (ms).  1 if the lease is (now) ours, else 0.
_HOLD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then return 1 end
return 0
"""
_DROP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


class SlurmWatch(threading.Thread):
    """The follower thread of one Slurm RM in this process."""

    def __init__(self, services: Services, side: SlurmSide) -> None:
        super().__init__(name=f"slurm follower {side.rm}", daemon=True)
        self.services, self.rm = services, side.rm
        self.follower = Follower(services, side.rm, side.backend)
        self.token = uuid.uuid4().hex
        self.stopping = threading.Event()
        self.outage = False
        self.hurry_until = 0.0
        self.holding = False

    def run(self) -> None:
        delay = 0.0
        while not self.stopping.is_set():
            self.pause(delay)
            if self.stopping.is_set():
                break
            delay = self.step()
        try:
            self.services.redis.eval(_DROP, 1, lease_key(self.rm), self.token)
        except Exception:  # the lease lapses by itself
            pass

    def pause(self, delay: float) -> None:
        """Wait ``delay`` seconds, or less when a submission wakes this follower."""
        if delay <= 0:
            return
        if not self.holding or delay < BLOCK_MIN_S:
            # the holder's wake-up calls are the holder's to take; and a short pause is
            # no time to block in Redis, whose timeouts run in 100 ms ticks (hz 10)
            self.stopping.wait(delay)
            return
        try:
            woken = self.services.redis.blpop([wake_key(self.rm)], timeout=delay)
        except Exception:  # Redis away: the step says so; just wait
            self.stopping.wait(delay)
            return
        if woken:
            self.services.redis.delete(wake_key(self.rm))  # one pass serves them all
            self.hurry_until = time.monotonic() + HURRY_S

    def step(self) -> float:
        """One pass if the lease is ours; the seconds until the next."""
        try:
            self.holding = bool(self.services.redis.eval(_HOLD, 1, lease_key(self.rm),
                                                         self.token, LEASE_MS))
            if not self.holding:
                return RETRY_INTERVAL
            still_open = self.follower.once()
        except ConcurrentUpdateError as exc:  # e.g. a cancel recorded a pending job's end
            log.info("Slurm RM %s: a job changed under this pass, again: %s", self.rm, exc)
            return HURRY_INTERVAL
        except SlurmUnavailable as exc:
            if not self.outage:
                log.warning("Slurm RM %s: %s; its jobs are followed again once it answers",
                            self.rm, exc)
            self.outage = True
            return RETRY_INTERVAL
        except Exception:
            log.exception("Slurm RM %s: following its jobs failed; trying again", self.rm)
            return RETRY_INTERVAL
        if self.outage:
            log.warning("Slurm RM %s answers again: following its jobs", self.rm)
            self.outage = False
        if not still_open:
            return IDLE_INTERVAL
        return HURRY_INTERVAL if time.monotonic() < self.hurry_until else INTERVAL

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.join(timeout)


_running: list[SlurmWatch] = []


def start_watches(app: Any, queues: list[str]) -> list[SlurmWatch]:
    """Start a follower for every Slurm RM whose gatekeeper queue is in ``queues``."""
    services = services_for(app)
    for rm, side in slurm_sides(services.settings).items():
        if gatekeeper_queue(rm) in queues and not any(w.rm == rm for w in _running):
            watch = SlurmWatch(services, side)
            watch.start()
            _running.append(watch)
    return list(_running)


def stop_watches() -> None:
    while _running:
        _running.pop().stop()


def _on_ready(sender: Any = None, **_: Any) -> None:
    try:
        queues = list(sender.app.amqp.queues.consume_from or {})
        start_watches(sender.app, queues)
    except Exception:
        log.exception("Slurm followers not started")


def _on_shutdown(**_: Any) -> None:
    stop_watches()


def install() -> None:
    """Have this process's worker start its Slurm RMs' followers once ready (and stop
    them at shutdown); the gatekeeper's task module calls it (idempotent)."""
    worker_ready.connect(_on_ready, weak=False, dispatch_uid="grid_tasks.scheduling.slurm_watch.ready")
    worker_shutdown.connect(_on_shutdown, weak=False,
                            dispatch_uid="grid_tasks.scheduling.slurm_watch.stop")
