"""Grid daemons whose memory and environment the jobs cannot read.

A daemon's environment holds the grid's secrets (broker and Redis URLs with their
passwords, the database URL).  A job that runs under the daemon's own uid (no grid
map: the embedded single-user stack, or a node daemon not run as root) could read
them from ``/proc/$PPID/environ`` (or ``mem``, ``maps``, ``fd``...): Linux lets a
process inspect another of the same uid.  Those ``/proc`` files are guarded by the
*ptrace access mode check* (``ptrace_may_access``), and that check refuses a
process that is not dumpable unless the inspector has ``CAP_SYS_PTRACE``; the
kernel also makes the ``/proc/<pid>`` entries of such a process owned by root.  So
``prctl(PR_SET_DUMPABLE, 0)`` is the one switch that closes all of them at once,
for the daemon alone: its children get their own, dumpable, state at ``exec``.
Dropping ``environ`` from memory instead would leave the URLs in the settings
objects, readable through ``/proc/<pid>/mem``.

The price: the daemon leaves no core dump, and a same-uid debugger (``gdb -p``,
``py-spy``) needs root or ``CAP_SYS_PTRACE``.  ``/proc/<pid>/stat``, ``status`` and
``cmdline`` stay world-readable (so never put a secret on a command line).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Any

log = logging.getLogger(__name__)

_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4

_libc: Any = None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # pragma: no cover - non-Linux: nothing to switch, nothing to read
    _libc = None


def deny_inspection() -> bool:
    """Make this process non-dumpable (see the module doc); whether it now is."""
    if _libc is None or _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("could not make this process non-dumpable: jobs of its uid may read "
                    "its environment")
        return False
    return True


def inspectable() -> bool:
    """Whether processes of this uid may read this process's ``/proc`` files."""
    return _libc is not None and _libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 1


def on_daemon_start(**_: Any) -> None:
    """Celery ``worker_init`` / ``beat_init`` receiver: once per daemon process, before
    it takes any task (a prefork pool's children inherit the setting with the fork)."""
    deny_inspection()
