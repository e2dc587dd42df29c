"""What job managers report: ACTIVE once per launch, and the job's end when all parts are in.

Each node's part lands in a Redis hash; the node whose part completes the hash
(checked atomically in one MULTI) reports DONE or FAILED with the exit codes.
Reports go to the RM's gatekeeper as signed messages, batched per process
(:mod:`grid_tasks.gram.report_sender`); the gatekeeper checks and records them in
SQL, writes the accounting record and triggers the RM's iteration
(:mod:`grid_tasks.gram.report_tasks`).  A node daemon holds no database credentials.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from grid_tasks.effects import send_reports
from grid_tasks.gram import keys
from grid_tasks.gram.report_sender import FINISHED, STARTED, Report, ReportSender, to_wire
from grid_tasks.leases import lease_timing, renew_bound
from grid_tasks.node.registry import daemon_client
from grid_tasks.node.watchdog import Watchdog, watchdog_for
from grid_tasks.settings import app_settings

log = logging.getLogger(__name__)

#: How long per-launch bookkeeping stays in Redis after a job ended (seconds).
PARTS_TTL_S = 3600
#: How long a finished launch's parts stay in Redis while its end is not recorded in
#: SQL (seconds): they are that end's record through a database outage (the RM's
#: iteration writes the end from them, :mod:`grid_tasks.scheduling.reconcile`), so
#: they must outlive any outage; once the end is recorded (or its report refused)
#: the gatekeeper shortens this to :data:`PARTS_TTL_S` (:func:`settle_parts`).  The
#: bound only keeps a launch nobody reports on (superseded, lost) from staying forever.
UNRECORDED_PARTS_TTL_S = 30 * 24 * 3600


@dataclass
class NodeContext:
    """Connections a node daemon's job managers share."""

    app: Any
    settings: Any
    redis: Any
    lease_interval: float
    lease_ttl: float
    sender: Any = None  # the ReportSender of this context (made on first report)
    #: seconds without a renewed lease after which a job's processes are killed
    renew_bound: float = 5.0

    def watchdog(self) -> Watchdog:
        """This daemon's watchdog process (see :mod:`grid_tasks.node.watchdog`)."""
        return watchdog_for(self.renew_bound)

    def reporter(self) -> Any:
        """The batching sender of this context's job manager reports."""
        with _lock:
            if self.sender is None:
                self.sender = ReportSender(self._send)
            return self.sender


    def _send(self, batch: list[Report]) -> None:
        """Publish ``batch`` to its RMs' gatekeepers: one message per RM and node."""
        groups: dict[tuple[str, str], list[Report]] = {}
        for report in batch:
            groups.setdefault((report.req.rm, report.req.node), []).append(report)
        for (rm, node), reports in groups.items():
            send_reports(self.app, rm, node, [r.req.job_id for r in reports],
                         [to_wire(r) for r in reports])


_contexts: dict[tuple[int, int], NodeContext] = {}
_lock = threading.Lock()


def node_context(app: Any) -> NodeContext:
    """The shared context of this process for ``app`` (made on first use): a node
    daemon's composition root (it holds no database credentials)."""
    key = (os.getpid(), id(app))
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None or ctx.app is not app:  # ids of closed apps get reused
            settings = app_settings(app)
            interval, ttl = lease_timing(settings)
            ctx = _contexts[key] = NodeContext(app, settings, daemon_client(app, settings),
                                               interval, ttl,
                                               renew_bound=renew_bound(settings))
        return ctx


#: Backoff before each retry of a Redis call that found the server gone (seconds):
#: about 20 s in all, so a redis-server restart is ridden out.
REDIS_RETRY_DELAYS = (0.1, 0.2, 0.5, 1.0, 1.0, 2.0, 2.0, 3.0, 4.0, 5.0)


def redis_retrying(action: Any, delays: tuple[float, ...] = REDIS_RETRY_DELAYS) -> Any:
    """Run ``action``, retrying it while Redis is unreachable (restarting, loading)."""
    for delay in (*delays, None):
        try:
            return action()
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if delay is None:
                raise
            log.warning("redis unavailable (%s); retrying in %.1f s", exc, delay)
            time.sleep(delay)
    return None


def report_started(ctx: NodeContext, req: Any, started: float | None = None) -> None:
    """Lease up; the first node of the launch records ACTIVE (at ``started``, POSIX
    seconds, else when it is written)."""
    def lease_and_claim() -> Any:
        pipe = ctx.redis.pipeline(transaction=False)
        pipe.set(keys.lease_key(req.job_id, req.node), req.token, px=int(ctx.lease_ttl * 1000))
        # kept as long as the parts: the RM's iteration confirms the launch from it
        # should the ACTIVE report not reach SQL (scheduling.reconcile)
        pipe.set(keys.started_key(req.job_id, req.token), req.node, nx=True,
                 ex=UNRECORDED_PARTS_TTL_S)
        return pipe.execute()[1]

    first = redis_retrying(lease_and_claim)
    if first:
        ctx.reporter().write(Report(STARTED, req, started=started))


# KEYS: lease.  ARGV: token.  Deletes the lease if it is still this launch's.
_DROP_OWN_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def report_finished(ctx: NodeContext, req: Any, part_json: str) -> None:
    """Store this node's part; the last part in reports the job's end.

    The parts stay in Redis until the end is in SQL (:data:`UNRECORDED_PARTS_TTL_S`):
    the lease goes with the same MULTI, so from here on they, not the lease, tell
    recovery this part ended rather than was lost."""
    parts = keys.parts_key(req.job_id, req.token)

    def store_part() -> Any:
        pipe = ctx.redis.pipeline(transaction=True)
        pipe.hset(parts, req.node, part_json)
        pipe.expire(parts, UNRECORDED_PARTS_TTL_S)
        pipe.hgetall(parts)
        # only our own lease: a fenced job manager waking up after its job was launched
        # again on this node must not drop the new launch's lease
        pipe.eval(_DROP_OWN_LEASE, 1, keys.lease_key(req.job_id, req.node), req.token)
        return pipe.execute()[2]

    everything = redis_retrying(store_part)
    if len(everything) < req.nodes:
        return
    results = {k.decode(): json.loads(v) for k, v in everything.items()}
    ctx.reporter().write(Report(FINISHED, req, results))


def settle_parts(redis: Any, launches: list[Any]) -> None:
    """The ends of ``launches`` (each with ``job_id`` and ``token``) are decided in SQL:
    their parts and start mark expire after :data:`PARTS_TTL_S` now, not the long
    unrecorded TTL."""
    if not launches:
        return
    pipe = redis.pipeline(transaction=False)
    for req in launches:
        pipe.expire(keys.parts_key(req.job_id, req.token), PARTS_TTL_S)
        pipe.expire(keys.started_key(req.job_id, req.token), PARTS_TTL_S)
    pipe.execute()
