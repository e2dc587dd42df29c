"""The environment a job's process starts with: built up, never inherited wholesale.

A node daemon's own environment holds the grid's secrets (broker and Redis URLs
with their passwords, ``PGPASSWORD``, ``DATABASE_URL``, ``AWS_*``, Flower's
credentials...), and a job is untrusted code.  So a job gets, in this order (later
wins):

1. :data:`HOST_VARIABLES` from the daemon's environment: how this host is set up for
   any program (``PATH``, locale, time zone, scratch directory), nothing more;
2. ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL`` of the account it runs as;
3. the RSL ``environment`` (the job's own request);
4. the runtime variables of the job manager (``GRID_TASKS_JOB_ID``, rank, size,
   node, RM) and ``extra_env``, through which DUROC passes the job's runtime URL with
   its per-job Redis ACL user: a credential of this job only, so it stays.

``TERM`` is left out: a job has no terminal, its output goes to pipes.
"""

from __future__ import annotations

import os
import pwd
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grid_tasks.gram.launch import LaunchRequest
    from grid_tasks.security.accounts import RunAs

#: Host variables a job inherits (and every ``LC_*``): see the module doc.
HOST_VARIABLES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR"})


@lru_cache(maxsize=4)
def _own_account(uid: int) -> dict[str, str]:
    """HOME, USER, LOGNAME, SHELL of the account ``uid`` (the worker's own)."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:  # a uid without a passwd entry (containers): HOME from the host
        home = os.environ.get("HOME", "/")
        return {"HOME": home, "USER": f"#{uid}", "LOGNAME": f"#{uid}"}
    return {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name,
            "SHELL": entry.pw_shell}


def host_environment() -> dict[str, str]:
    """The part of this process's environment a job may see (:data:`HOST_VARIABLES`)."""
    env = {k: v for k, v in os.environ.items() if k in HOST_VARIABLES or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    return env


def process_env(req: LaunchRequest, rank: int, who: RunAs | None = None) -> dict[str, str]:
    """The environment of rank ``rank`` of the LaunchRequest ``req`` run as ``who``
    (a :class:`~grid_tasks.security.accounts.RunAs`; None: the worker's account)."""
    env = host_environment()
    if who is not None:
        env = who.environment(env)
    else:
        env.update(_own_account(os.geteuid()))
    env.update(req.environment)
    env.update({"GRID_TASKS_JOB_ID": str(req.job_id), "GRID_TASKS_RANK": str(rank),
                "GRID_TASKS_SIZE": str(req.process_size()), "GRID_TASKS_NODE": req.node,
                "GRID_TASKS_RM": req.rm})
    env.update(req.extra_env)
    return env
