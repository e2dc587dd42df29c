"""Live Maui scheduling: one iteration per resource manager over the SQL state.

* :func:`trigger_iteration` (submission, completion, cancellation, node change)
  sets the RM's *dirty* flag and enqueues ``grid_tasks.scheduling.tasks.iterate``
  unless one is already queued;
* the task takes a non-blocking Redis lock (one iteration per RM at a time) and
  runs while ``GETDEL dirty`` returns a value, so triggers arriving during a run
  fold into ONE more run; after releasing it re-triggers if a flag slipped in;
* beat also fires it every ``RMPOLLINTERVAL`` of the RM's ``maui.cfg``;
* node changes fire it at once: a node daemon triggers it when it registers, says
  goodbye (Down) or beats again after its heartbeat expired; a node that just goes
  silent is noticed by :mod:`grid_tasks.scheduling.nodes` (beat runs its watch
  every heartbeat TTL), and its jobs then follow the node failure policy.

The pure loader :func:`~grid_tasks.scheduling.state.load_scheduler` is what the
operator CLI uses for showstart / showbf / diagnose.
"""

from __future__ import annotations

from typing import Any

ITERATE = "grid_tasks.scheduling.tasks.iterate"
_KEY = "grid_tasks:sched"


def dirty_key(rm: str) -> str:
    return f"{_KEY}:{rm}:dirty"


def queued_key(rm: str) -> str:
    return f"{_KEY}:{rm}:queued"


def lock_key(rm: str) -> str:
    return f"{_KEY}:{rm}:lock"


#: A queued marker older than this is ignored (the queued task was lost).
QUEUED_TTL_S = 10


# KEYS: dirty, queued, lock.  ARGV: queued TTL.  Returns 1 when a task must be sent.
_TRIGGER = """
redis.call('SET', KEYS[1], 1)
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('SET', KEYS[2], 1, 'NX', 'EX', tonumber(ARGV[1])) then return 1 end
return 0
"""


def trigger_iteration(app: Any, rm: str, *, client: Any = None) -> bool:
    """Ask for an iteration of ``rm`` soon; returns True if a task was enqueued.

    ``client`` is a redis client on the settings' Redis (made from ``app`` if
    omitted).  Cheap enough to call on every event: while an iteration of ``rm``
    runs, the dirty flag alone makes it run once more (and its release re-triggers
    if the flag came after its last look), so no task is sent; nor while one is queued.
    """
    if client is None:
        client = redis_client(app)
    pipe = client.pipeline(transaction=False)
    queue_trigger(pipe, rm)
    return send_triggered(app, [rm], pipe.execute()) == 1


def queue_trigger(pipe: Any, rm: str) -> None:
    """Add :func:`trigger_iteration`'s Redis side for ``rm`` to ``pipe`` (a pipeline
    that also carries other commands: one round trip); hand its reply to
    :func:`send_triggered`.  EVAL, not EVALSHA: a pipeline with a registered script
    asks SCRIPT EXISTS first, a round trip of its own."""
    pipe.eval(_TRIGGER, 3, dirty_key(rm), queued_key(rm), lock_key(rm), QUEUED_TTL_S)


def send_triggered(app: Any, rms: list[str], replies: list[Any]) -> int:
    """Enqueue the iteration task of each RM whose trigger reply asks for one; how many."""
    from grid_tasks.celery_app import readable

    sent = 0
    for rm, fresh in zip(rms, replies):
        if fresh:
            # ignore_result: no result subscription (a Redis round trip per send, and an
            # unsubscribe from AsyncResult.__del__ that fails once the Redis is gone)
            app.send_task(ITERATE, kwargs={"rm": rm}, ignore_result=True,
                          **readable("iterate", rm=rm))
            sent += 1
    return sent


_clients: dict[tuple[int, str], Any] = {}


def redis_client(app_or_settings: Any) -> Any:
    """A cached redis client for an app's (or a Settings') ``redis_url``."""
    import os

    from grid_tasks.security.connections import redis_client as configured_client

    settings = getattr(app_or_settings, "grid_settings", app_or_settings)
    if settings is None or not hasattr(settings, "redis_url"):
        from grid_tasks.settings import Settings

        settings = Settings.from_env()
    key = (os.getpid(), settings.redis_url)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = configured_client(settings)  # rediss:// + TLS options
    return client


__all__ = ["ITERATE", "queue_trigger", "redis_client", "send_triggered", "trigger_iteration"]
