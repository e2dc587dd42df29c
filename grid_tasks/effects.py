"""After-commit effects: the messages a committed change sets moving, by task name.

Every follow-up message of the grid leaves from here: an RM's iteration trigger,
job events, a coallocated job's settling and its chord's signatures, launches, node
reports and registrations.  The module *names* the tasks it sends (strings routed by
:class:`~grid_tasks.celery_app.GridRouter`) and never imports a task module, so any
layer may call it without importing the layers above: the record of a job ending
(:mod:`grid_tasks.gram.records`) settles its coallocated job without knowing DUROC's
tasks, and the iteration launches without knowing the node's.

Callers hand in what they hold (the Celery ``app``, a Redis ``client`` or pipeline):
nothing here builds a connection.  Send after the commit, never inside the
transaction (a waiter reading SQL after an event must see the change).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from grid_tasks.events import JobEvent, publish
from grid_tasks.queues import readable

# -- the tasks this module sends -------------------------------------------------------
ITERATE = "grid_tasks.scheduling.tasks.iterate"
LAUNCH = "grid_tasks.gram.tasks.launch"
#: Every part one iteration starts on one node, in one message.
LAUNCH_BATCH = "grid_tasks.gram.tasks.launch_batch"
RECORD_REPORTS = "grid_tasks.gram.report_tasks.record_reports"
RECORD_NODE = "grid_tasks.gram.report_tasks.record_node"
WATCH = "grid_tasks.duroc.tasks.watch_subjob"
RELEASE = "grid_tasks.duroc.tasks.release"
FAILED = "grid_tasks.duroc.tasks.coalloc_failed"
SETTLE = "grid_tasks.duroc.tasks.settle"
#: An RM's grid reservations that should go (the metascheduler protocol's prune).
PRUNE = "grid_tasks.scheduling.rm_tasks.prune"

#: kombu's retry policy for a node's publish: about 25 s of a broker restarting.
PUBLISH_RETRY: dict[str, float] = {"max_retries": 12, "interval_start": 0.1,
                                   "interval_step": 0.5, "interval_max": 3.0}

# -- iteration triggers -------------------------------------------------------------------
#: Prefix of the scheduler's coordination keys of an RM.
KEY_PREFIX = "grid_tasks:sched"
#: A queued marker older than this is ignored (the queued task was lost).
QUEUED_TTL_S = 10


def dirty_key(rm: str) -> str:
    return f"{KEY_PREFIX}:{rm}:dirty"


def queued_key(rm: str) -> str:
    return f"{KEY_PREFIX}:{rm}:queued"


def lock_key(rm: str) -> str:
    return f"{KEY_PREFIX}:{rm}:lock"


# KEYS: dirty, queued, lock.  ARGV: queued TTL.  Returns 1 when a task must be sent.
_TRIGGER = """
redis.call('SET', KEYS[1], 1)
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('SET', KEYS[2], 1, 'NX', 'EX', tonumber(ARGV[1])) then return 1 end
return 0
"""


def trigger_iteration(app: Any, rm: str, *, client: Any) -> bool:
    """Ask for an iteration of ``rm`` soon; True if a task was enqueued.

    Cheap enough to call on every event: while an iteration of ``rm`` runs, the
    dirty flag alone makes it run once more (its release re-triggers if the flag
    came after its last look), so no task is sent; nor while one is queued.
    ``client``: a Redis client on the grid's coordination Redis.
    """
    pipe = client.pipeline(transaction=False)
    queue_trigger(pipe, rm)
    return send_triggered(app, [rm], pipe.execute()) == 1


def queue_trigger(pipe: Any, rm: str) -> None:
    """Add :func:`trigger_iteration`'s Redis side for ``rm`` to ``pipe`` (one round
    trip with the pipeline's other commands); hand its reply to :func:`send_triggered`.
    EVAL, not EVALSHA: a pipeline with a registered script asks SCRIPT EXISTS first."""
    pipe.eval(_TRIGGER, 3, dirty_key(rm), queued_key(rm), lock_key(rm), QUEUED_TTL_S)


def send_triggered(app: Any, rms: Sequence[str], replies: Sequence[Any]) -> int:
    """Enqueue the iteration of each RM whose trigger reply asks for one; how many."""
    sent = 0
    for rm, fresh in zip(rms, replies):
        if fresh:
            # ignore_result: no result subscription (a Redis round trip per send, and an
            # unsubscribe from AsyncResult.__del__ that fails once the Redis is gone)
            app.send_task(ITERATE, kwargs={"rm": rm}, ignore_result=True,
                          **readable("iterate", rm=rm))
            sent += 1
    return sent


def send_iteration(app: Any, rm: str, *, why: str, **options: Any) -> None:
    """Send an iteration of ``rm`` for a reason of its own (the lease watch, a grid
    reservation's start) rather than through a trigger; ``options`` of ``send_task``
    (``countdown``, ``eta``)."""
    app.send_task(ITERATE, kwargs={"rm": rm}, ignore_result=True,
                  **readable("iterate", rm=rm, why=why), **options)


def send_prune(app: Any, rm: str, *, why: str) -> None:
    """Have ``rm``'s scheduler prune its grid reservations now (a Slurm RM's job bound
    to one ended: its reservation and tokens go at once, not at beat's next prune)."""
    app.send_task(PRUNE, kwargs={"rm": rm}, ignore_result=True,
                  **readable("prune", rm=rm, why=why))


# -- what a committed change announces ------------------------------------------------------
class Announcements(Protocol):
    """What :func:`announce` sends: an outbox of committed changes."""

    events: list[JobEvent]
    rms: set[str]
    coallocations: set[int]


def announce(outbox: Announcements, client: Any, app: Any = None) -> None:
    """Send what ``outbox`` collected, after its commit, and empty it.

    With an ``app``: trigger the RMs' iterations and publish the events in one Redis
    round trip, then send the iteration tasks the triggers ask for and settle the
    coallocated jobs whose subjobs ended.  Without one, only the events."""
    rms = sorted(outbox.rms) if app is not None else []
    if rms or outbox.events:
        pipe = client.pipeline(transaction=False)
        for rm in rms:  # first: every waiting job's start hangs on its iteration
            queue_trigger(pipe, rm)
        for event in outbox.events:
            publish(pipe, event)
        replies = pipe.execute()
        if rms:
            send_triggered(app, rms, replies[:len(rms)])
    if app is not None:
        for job in sorted(outbox.coallocations):
            settle_signature(app, job).apply_async(ignore_result=True)
    outbox.events.clear()
    outbox.rms.clear()
    outbox.coallocations.clear()


# -- coallocated jobs: the chord's parts and the settling -----------------------------------
def settle_signature(app: Any, job: int) -> Any:
    """The task settling coallocated job ``job``'s fate after one of its subjobs ended."""
    return app.signature(SETTLE, kwargs={"job": job}) \
        .set(**readable("duroc-settle", job=f"coalloc-{job}"))


def send_deadline(app: Any, job: int, at: float, *, hop_s: float) -> None:
    """Send the settle due at ``job``'s barrier deadline ``at`` (epoch seconds): with an
    ETA at ``at``, or ``hop_s`` from now when the deadline is further (a Redis broker
    hands an unacknowledged ETA message out again after its visibility timeout; the
    settle then sends the next hop)."""
    left = at - time.time()
    options: dict[str, Any] = {"ignore_result": True}
    if left > hop_s:
        options["countdown"] = hop_s
    else:
        options["eta"] = datetime.fromtimestamp(at, timezone.utc)
    app.signature(SETTLE, kwargs={"job": job, "deadline": at}) \
        .set(**readable("duroc-deadline", job=f"coalloc-{job}")).apply_async(**options)


def watch_signature(app: Any, job: int, address: int, rm: str, deadline: float, *,
                    submitter: str | None = None, account: str | None = None) -> Any:
    """The header signature watching subjob ``address`` of ``job`` at ``rm``, for the
    job's owner ``submitter`` (vouched for by the scheduler sending it)."""
    return app.signature(WATCH, kwargs={"rm": rm, "job": job, "address": address,
                                        "deadline": deadline, "submitter": submitter,
                                        "account": account}) \
        .set(**readable("duroc-watch", job=f"coalloc-{job}/{address}", rm=rm))


def release_signature(app: Any, job: int) -> Any:
    """The chord body: releases ``job``'s barrier once every header is in it."""
    return app.signature(RELEASE, kwargs={"job": job}) \
        .set(**readable("duroc-release", job=f"coalloc-{job}"))


def failed_signature(app: Any, job: int) -> Any:
    """The chord's error path: cancels every subjob of ``job``."""
    return app.signature(FAILED, kwargs={"job": job}) \
        .set(**readable("duroc-failed", job=f"coalloc-{job}"))


# -- launches (scheduler -> node) -----------------------------------------------------------
class Launch(Protocol):
    """What a launch message needs of a LaunchRequest."""

    job_id: int
    rm: str
    node: str
    tasks: int

    def to_dict(self) -> dict[str, Any]: ...


def launch_options(req: Launch) -> dict[str, Any]:
    """``apply_async`` options of a readable launch of ``req``."""
    return {"kwargs": {"rm": req.rm, "node": req.node, "on_node": True,
                       "request": req.to_dict()}, "ignore_result": True,
            **readable("launch", job=req.job_id, rm=req.rm, node=req.node,
                       tasks=req.tasks)}


def send_launch_batch(app: Any, rm: str, node: str, reqs: Sequence[Launch]) -> None:
    """One message to ``node`` carrying every part an iteration started there."""
    jobs = ",".join(str(r.job_id) for r in reqs)
    app.send_task(LAUNCH_BATCH, kwargs={"rm": rm, "node": node, "on_node": True,
                                        "requests": [r.to_dict() for r in reqs]},
                  ignore_result=True, **readable("launch", job=jobs, rm=rm, node=node,
                                                 tasks=sum(r.tasks for r in reqs)))


# -- node -> gatekeeper ---------------------------------------------------------------------
def send_reports(app: Any, rm: str, node: str, jobs: Iterable[int],
                 wire: list[dict[str, Any]]) -> None:
    """Job managers' reports of ``node`` (wire form) to ``rm``'s gatekeeper, in one
    durable message; publishing rides out a broker restarting."""
    app.send_task(RECORD_REPORTS, kwargs={"rm": rm, "node": node, "reports": wire},
                  ignore_result=True, retry=True, retry_policy=PUBLISH_RETRY,
                  **readable("report", job=",".join(str(j) for j in jobs), rm=rm,
                             node=node))


def send_registration(app: Any, rm: str, node: str, resources: dict[str, Any],
                      at: float) -> None:
    """Ask ``rm``'s gatekeeper to record this node's registration (fire and forget:
    the message is durable, the gatekeeper waits for a database not yet prepared)."""
    app.send_task(RECORD_NODE, kwargs={"rm": rm, "node": node, "resources": resources,
                                       "at": at},
                  ignore_result=True, retry=True, retry_policy=PUBLISH_RETRY,
                  **readable("register", rm=rm, node=node))
