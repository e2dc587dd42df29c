"""Authorization as the gatekeepers use it: the configured grid map, reloaded on change.

At submission (the RM's gatekeeper, before anything is recorded)::

    from grid_tasks.security.authorization import authorize
    granted = authorize(settings, identity, rm, account=requested_or_None)
    # None: no grid map configured (GRID_TASKS_GRIDMAP unset), authorization off;
    # else a LocalAccount; Unauthorized (a GridTasksError) for an unmapped identity.

At launch (on the node, before starting the job's processes)::

    from grid_tasks.security.accounts import run_as
    who = run_as(account_name)          # AccountError / RunAsRefused when impossible
    subprocess.Popen(argv, env=who.environment(env), **who.subprocess_kwargs())

The identity is the string the submitter presents (an X.509 distinguished
name as in Globus, or ``user@host`` from :func:`local_identity`).  It travels in
the task message, so turn message signing on (``GRID_TASKS_SIGNING=1``) to make
sure only trusted hosts can claim one.
"""

from __future__ import annotations

import getpass
import os
import socket
import threading
from pathlib import Path
from typing import Any

from grid_tasks.security.errors import Unauthorized
from grid_tasks.security.gridmap import GridMap, LocalAccount

_lock = threading.Lock()
_cache: dict[Path, tuple[tuple[int, int], GridMap]] = {}


def load_cached(path: Path) -> GridMap:
    """The grid map at ``path``, re-read only when its mtime or size changed."""
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        return GridMap.load(path)  # raises the typed "cannot read" error
    with _lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    gridmap = GridMap.load(path)
    with _lock:
        _cache[path] = (stamp, gridmap)
    return gridmap


def gridmap_for(settings: Any) -> GridMap | None:
    """The grid map of ``settings.gridmap_file``, or None when none is configured."""
    path = getattr(settings, "gridmap_file", None)
    return None if path is None else load_cached(Path(path))


def authorize(settings: Any, identity: str, rm: str,
              account: str | None = None) -> LocalAccount | None:
    """Map ``identity`` to its local account on ``rm``; None if authorization is off.

    Raises :class:`~grid_tasks.security.errors.Unauthorized` for an identity
    the grid map does not map on ``rm`` (or an ``account`` it may not use) and
    :class:`~grid_tasks.security.errors.GridMapError` for a malformed grid map.
    """
    gridmap = gridmap_for(settings)
    if gridmap is None:
        return None
    return gridmap.authorize(identity, rm, account)


def check_owner(settings: Any, owner: str | None, identity: str | None, what: str,
                rm: str = "") -> None:
    """Only ``what``'s owner, as verified (``identity``), may change it when a grid map
    says who is who; a one-user grid (no grid map) lets anyone trusted.  Unauthorized
    naming both otherwise (the gatekeepers' and the DUROC door's one rule)."""
    if gridmap_for(settings) is not None and identity != owner:
        raise Unauthorized(f"{what} belongs to {owner!r}, not to "
                           f"{identity or 'an unverified requester'!r}",
                           identity=identity or "", rm=rm)


def local_identity() -> str:
    """``<login>@<host>``: the identity a local submitter presents by default."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.getfqdn()}"
