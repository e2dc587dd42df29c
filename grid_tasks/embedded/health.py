"""Container healthchecks: is this grid process doing its job, not merely running?

``python -m grid_tasks.embedded.health KIND ARGS...`` exits 0 when healthy, else 1 with
the reason on stderr (what ``docker compose ps`` and ``docker inspect`` then show):

* ``worker NAME`` - the Celery worker ``NAME@<this host>`` answers a ping (schedulers
  and gatekeepers: their key may send remote control);
* ``node RM NODE`` - the node daemon's heartbeat in the registry is fresh (a node's key
  may not send remote control, and its heartbeat is what the scheduler trusts anyway);
* ``beat NAME`` - the HA beat ``NAME`` reported itself to the others recently;
* ``http URL`` - a plain GET answers 2xx (Flower's ``/healthcheck``, ``/metrics``).

Settings come from the ``GRID_TASKS_*`` environment, as for the process checked.
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from grid_tasks.celery_app import create_app
from grid_tasks.errors import GridTasksError
from grid_tasks.ha.status import read_status
from grid_tasks.node.registry import NodeRegistry, connect_redis
from grid_tasks.settings import Settings
from grid_tasks.states import NodeState

#: Seconds a check may take before it counts as failed (compose's own timeout is longer).
TIMEOUT_S = 5.0
#: A beat whose last report is older than this many seconds is unhealthy (beats report
#: every few seconds; a follower too).
BEAT_STALE_S = 60.0

#: Each kind of check and the arguments it takes.
KINDS: dict[str, tuple[str, ...]] = {"worker": ("NAME",), "node": ("RM", "NODE"),
                                     "beat": ("NAME",), "http": ("URL",)}
USAGE = "usage: python -m grid_tasks.embedded.health " + " | ".join(
    " ".join((kind, *args)) for kind, args in KINDS.items())


class HealthError(GridTasksError):
    """The process checked is not healthy (the reason is the message)."""


def check_worker(settings: Settings, name: str, timeout: float = TIMEOUT_S) -> str:
    """Ping the worker ``name@<host>``; what it answered."""
    app = create_app(settings)
    target = name if "@" in name else f"{name}@{socket.gethostname()}"
    try:
        replies = app.control.ping(destination=[target], timeout=timeout)
    finally:
        app.close()
    for reply in replies:
        if target in reply:
            return f"{target}: {reply[target]}"
    raise HealthError(f"worker {target} did not answer a ping within {timeout:g} s")


def check_node(settings: Settings, rm: str, node: str) -> str:
    """The node daemon's registry state; unhealthy when Unknown (heartbeat expired) or Down."""
    status = NodeRegistry.from_settings(settings).status(rm, node)
    if status.state in (NodeState.UNKNOWN, NodeState.DOWN):
        raise HealthError(f"node {rm}/{node} is {status.state.value}: no fresh heartbeat")
    return f"node {rm}/{node} is {status.state.value}"


def check_beat(settings: Settings, name: str, now: float,
               stale_s: float = BEAT_STALE_S) -> str:
    """The beat's role, when it reported itself within ``stale_s`` seconds of ``now``."""
    client = connect_redis(settings.redis_url, settings=settings)
    try:
        members = {m.identity: m for m in read_status(client).members}
    finally:
        client.close()
    member = members.get(name)
    if member is None:
        raise HealthError(f"beat {name} never reported itself (known: "
                          f"{', '.join(sorted(members)) or 'none'})")
    if now - member.seen > stale_s:
        raise HealthError(f"beat {name} last reported {now - member.seen:.0f} s ago")
    return f"beat {name} is {member.role}"


def check_http(url: str, timeout: float = TIMEOUT_S) -> str:
    """A GET of ``url`` answered 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return f"{url}: HTTP {reply.status}"
    except (urllib.error.URLError, OSError) as exc:
        raise HealthError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def check(argv: Sequence[str], settings: Settings | None = None) -> str:
    """Run the check ``argv`` names (see the module's docstring); what it found."""
    kind, args = (argv[0], list(argv[1:])) if argv else ("", [])
    if kind not in KINDS or len(args) != len(KINDS[kind]):
        raise HealthError(USAGE)
    if kind == "http":
        return check_http(args[0])
    settings = settings or Settings.from_env()
    if kind == "worker":
        return check_worker(settings, args[0])
    if kind == "node":
        return check_node(settings, args[0], args[1])
    return check_beat(settings, args[0], time.time())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(check(sys.argv[1:] if argv is None else argv))
    except Exception as exc:  # Redis refusing, a bad setting: unhealthy too, in one line
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
