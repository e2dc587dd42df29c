"""Opening files as a job's mapped account from the root worker, in this thread only.

A root node daemon must open a job's ``stdin``/``stdout``/``stderr`` and enter its
``directory`` with the rights of the account the job runs as, not its own: else a
job mapped to ``nobody`` reads a root-only file as its stdin, or has root create its
output file in a root-only folder.  Forking a helper that drops privileges costs
milliseconds in a large worker; instead :func:`as_account` switches the *filesystem*
credentials of the calling thread for the few calls that open or check paths.

On Linux the kernel checks file access against a thread's fsuid, fsgid and
supplementary groups, and all three are per thread in the kernel: ``setfsuid`` and
``setfsgid`` only ever change the calling thread, and the raw ``setgroups`` system
call (unlike glibc's wrapper, which applies it to every thread) too.  While the
fsuid is not 0 the kernel also drops the thread's file capabilities
(``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``, ``CAP_FOWNER``...), so root's
overrides are gone, and a file created meanwhile belongs to the account.  Other
threads of the worker keep running as root all along.

Use ``os.access(..., effective_ids=True)`` inside the switch: plain ``access(2)``
checks with the *real* uid (root), whatever the fsuid.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from grid_tasks.security.errors import AccountError

#: ``setgroups`` system call numbers (32-bit gids) of the architectures we know.
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159, "riscv64": 159, "ppc64le": 81,
                  "s390x": 206}

_libc: Any = None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # pragma: no cover - non-Linux hosts cannot switch; supported() says so
    _libc = None
_SETGROUPS = _SYS_SETGROUPS.get(platform.machine())
_QUERY = 0xFFFFFFFF  # an invalid id: setfs[ug]id then changes nothing and returns the current


class Credentials(Protocol):
    """What :func:`as_account` needs of a :class:`~grid_tasks.security.accounts.RunAs`."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    switch: bool


def supported() -> bool:
    """Whether this host can switch a thread's filesystem credentials (Linux, known arch)."""
    return _libc is not None and _SETGROUPS is not None and hasattr(_libc, "setfsuid")


def _setgroups(groups: list[int]) -> None:
    array = (ctypes.c_uint * max(1, len(groups)))(*groups)
    if _libc.syscall(_SETGROUPS, len(groups), array) != 0:
        err = ctypes.get_errno()
        raise AccountError(f"setgroups of this thread failed: {os.strerror(err)}")


def _set_fs(uid: int, gid: int) -> None:
    """fsgid then fsuid (changing the gid needs CAP_SETGID, which the fsuid keeps)."""
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    if _libc.setfsuid(_QUERY) != uid or _libc.setfsgid(_QUERY) != gid:
        raise AccountError(f"could not set this thread's filesystem ids to {uid}:{gid}")


@contextmanager
def as_account(who: Credentials | None) -> Iterator[None]:
    """Within the block, this thread opens and checks paths as ``who``.

    A no-op when ``who`` is None or needs no switch (the worker runs as the account).
    AccountError if the switch is needed but impossible here, or could not be undone
    (the thread then keeps the lesser rights, never more).
    """
    if who is None or not who.switch:
        yield
        return
    if not supported():
        raise AccountError(f"cannot open files as {who.user!r} on this host "
                           f"({platform.system()} {platform.machine()})")
    uid, gid, groups = _libc.setfsuid(_QUERY), _libc.setfsgid(_QUERY), os.getgroups()
    _setgroups(list(who.groups))
    try:
        _set_fs(who.uid, who.gid)
        yield
    finally:
        _set_fs(uid, gid)
        _setgroups(groups)
