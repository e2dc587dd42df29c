"""Starting a job's processes as its mapped local account.

A worker running as root switches to the account the grid map chose (as a
Globus gatekeeper did with ``setuid``); a worker running as an ordinary user
can only start jobs for its own account and refuses the others with
:class:`RunAsRefused`.  Use the result with :mod:`subprocess`::

    who = run_as(gridmap.authorize(identity, rm))
    subprocess.Popen(argv, env=who.environment(env), cwd=directory,
                     **who.subprocess_kwargs())

``subprocess_kwargs()`` uses Popen's ``user``/``group``/``extra_groups``
(safe with threads); :meth:`RunAs.preexec` is there for launchers that fork
themselves.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from grid_tasks.security.errors import AccountError, RunAsRefused
from grid_tasks.security.gridmap import LocalAccount


@dataclass(frozen=True)
class RunAs:
    """Credentials to start processes with; ``switch`` says whether they differ from ours."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str
    switch: bool

    def subprocess_kwargs(self) -> dict[str, Any]:
        """``user``/``group``/``extra_groups`` for ``subprocess.Popen`` ({} if no switch)."""
        if not self.switch:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: empty) with ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL``
        of the account."""
        env = dict(base or {})
        env.update(HOME=self.home, USER=self.user, LOGNAME=self.user, SHELL=self.shell)
        return env

    def setpriv_args(self) -> list[str]:
        """util-linux ``setpriv`` options that become the account ([] if no switch).

        ``setpriv`` sets the groups, then the gid, then real, effective *and saved*
        uid (so the program cannot switch back), and its ``--pdeathsig`` only after
        that (a uid change clears the death signal).  Unlike Popen's ``user=``, which
        makes CPython fork the whole worker, this lets Popen vfork.  Mind that setpriv
        still holds root's capabilities when it execs: what it runs must be a second,
        unprivileged launcher that execs the program."""
        if not self.switch:
            return []
        groups = ",".join(map(str, self.groups))
        return [f"--reuid={self.uid}", f"--regid={self.gid}",
                f"--groups={groups}" if groups else "--clear-groups"]

    def preexec(self) -> Callable[[], None] | None:
        """A function to call in a forked child before ``exec`` (None if no switch)."""
        if not self.switch:
            return None
        uid, gid, groups = self.uid, self.gid, list(self.groups)

        def drop() -> None:
            # Order matters: groups and gid can only be changed while still root.
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)

        return drop

    def to_dict(self) -> dict[str, Any]:
        return {"user": self.user, "uid": self.uid, "gid": self.gid,
                "groups": list(self.groups), "home": self.home, "switch": self.switch}


def run_as(account: LocalAccount | str, *, allow_root: bool = False,
           worker_uid: int | None = None) -> RunAs:
    """How to run processes as ``account`` from this worker.

    Raises :class:`AccountError` if the account does not exist on this host or
    is root (unless ``allow_root``), and :class:`RunAsRefused` if the worker is
    not root and the account is not the worker's own.  ``worker_uid`` defaults
    to this process's effective uid.
    """
    name = account.name if isinstance(account, LocalAccount) else account
    why = _granted_by(account)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise AccountError(f"local account {name!r}{why} does not exist on host "
                           f"{socket.gethostname()}") from None
    if entry.pw_uid == 0 and not allow_root:
        raise AccountError(f"refusing to run jobs as root (account {name!r}{why}); "
                           "map the identity to an unprivileged account")
    me = os.geteuid() if worker_uid is None else worker_uid
    if me != 0 and entry.pw_uid != me:
        raise RunAsRefused(f"worker runs as {_user_name(me)} (uid {me}), not root: it cannot "
                           f"start jobs as {name!r}{why}; run the worker as root or as {name!r}")
    groups = tuple(sorted(set(os.getgrouplist(name, entry.pw_gid)) - {entry.pw_gid}))
    return RunAs(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir, entry.pw_shell,
                 switch=entry.pw_uid != me)


def _granted_by(account: LocalAccount | str) -> str:
    if isinstance(account, LocalAccount):
        return f" (mapped for {account.identity!r} on {account.rm!r})"
    return ""


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"#{uid}"


def group_name(gid: int) -> str:
    """The name of group ``gid`` (``#<gid>`` if it has none)."""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"#{gid}"

