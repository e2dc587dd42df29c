"""Child processes in their own process groups, stopped together, none left behind.

Each child starts in a new session (so a terminal's Ctrl-C reaches only the
supervising process, which then stops children in order) and, on Linux, with
a parent-death signal so that even a SIGKILLed supervisor takes its children down.

The signal is set by util-linux's ``setpriv --pdeathsig`` in front of the child's
argv where it is installed, not by a Python ``preexec_fn``: with one, every spawn
forks a copy of this (large) process that must run Python before its exec, and
waits for it.  Beside daemons already starting, that cost 80-140 ms a spawn and
serialized a grid's start-up (issue 25); setpriv lets ``subprocess`` use vfork
(about 10 ms).  Without setpriv the ``preexec_fn`` does the same job.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from grid_tasks.errors import GridTasksError
from grid_tasks.private_files import open_private, private_dir

_PR_SET_PDEATHSIG = 1

log = logging.getLogger(__name__)

#: A child that ran this long before exiting had been healthy: its restart count resets.
HEALTHY_RUN_S = 60.0


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``preexec_fn``: SIGTERM this child when the thread that started it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the process-group kill on exit still applies


@functools.lru_cache(maxsize=1)
def death_signal_prefix() -> tuple[str, ...]:
    """The argv prefix that gives a child its parent-death signal (``setpriv
    --pdeathsig TERM --``), or () where setpriv cannot (then :func:`die_with_parent`
    runs as a ``preexec_fn``)."""
    if not sys.platform.startswith("linux"):
        return ()
    setpriv = shutil.which("setpriv") or shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        return ()
    try:
        usage = subprocess.run([setpriv, "--help"], capture_output=True, text=True,
                               timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return (setpriv, "--pdeathsig", "TERM", "--") if "--pdeathsig" in usage else ()


@dataclass
class Child:
    """One supervised process and where its output goes."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    # psutil handles, not bare PIDs: they notice PID reuse, so we never kill a stranger
    known: set[psutil.Process] = field(default_factory=set)
    argv: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: Path | None = None
    restarts: int = 0  # since it last ran healthily
    started: float = field(default_factory=time.monotonic)
    restart_at: float | None = None  # when a dead child is due to be started again
    stopped: bool = False  # stopped on purpose: never restarted

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


class ChildFailed(GridTasksError):
    """A supervised process exited when it should still be running."""


class Supervisor:
    """Starts named children, restarts those that die, stops them all on exit.

    :meth:`check` (called periodically by whoever runs the grid) restarts a child
    that exited unexpectedly, after ``backoff`` seconds doubling with each restart,
    at most ``max_restarts`` times in a row; past that it raises :class:`ChildFailed`.
    A child that exits within ``startup`` seconds of its first start never came up
    (bad configuration, port taken): that raises at once.  ``max_restarts=0`` turns
    restarting off.
    """

    def __init__(self, log_dir: Path, max_restarts: int = 5, backoff: float = 1.0,
                 startup: float = 5.0) -> None:
        self.log_dir = Path(log_dir)
        self.children: list[Child] = []
        self.max_restarts = max_restarts
        self.backoff = backoff
        self.startup = startup
        self._stopping = False

    def spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> Child:
        """Start ``argv`` in its own session, output to ``<log_dir>/<name>.log``."""
        child = Child(name, self._popen(name, argv, env, cwd), self.log_dir / f"{name}.log",
                      argv=tuple(argv), env=dict(env) if env is not None else None, cwd=cwd)
        child.known = {psutil.Process(child.pid)}
        self.children.append(child)
        return child

    def _popen(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None,
               cwd: Path | None) -> subprocess.Popen[bytes]:
        private_dir(self.log_dir)  # logs show jobs' output and settings: owner only
        prefix = death_signal_prefix()
        preexec = die_with_parent if sys.platform.startswith("linux") and not prefix else None
        with open_private(self.log_dir / f"{name}.log", "ab") as out:
            return subprocess.Popen(
                [*prefix, *argv], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=dict(env) if env is not None else None, cwd=cwd,
                start_new_session=True, preexec_fn=preexec)

    def check(self) -> list[str]:
        """Restart children that exited unexpectedly (once their backoff is over); the
        names restarted.  Raises :class:`ChildFailed` for a child past its restart limit."""
        restarted = []
        for child in list(self.children):
            if child.stopped or self._stopping or child.alive():
                continue
            code = child.process.returncode
            if time.monotonic() - child.started >= HEALTHY_RUN_S and child.restart_at is None:
                child.restarts = 0
            never_up = child.restarts == 0 and child.restart_at is None and \
                time.monotonic() - child.started < self.startup
            if child.restarts >= self.max_restarts or never_up:
                tail = child.log_tail(3).replace("\n", " | ")
                after = f" (after {child.restarts} restarts)" if child.restarts else ""
                raise ChildFailed(f"{child.name} exited with code {code}{after}"
                                  + (f": {tail}" if tail else ""))
            if child.restart_at is None:
                delay = self.backoff * 2 ** child.restarts
                child.restart_at = time.monotonic() + delay
                log.warning("%s exited with code %s; restarting in %.1f s (restart %d of %d)",
                            child.name, code, delay, child.restarts + 1, self.max_restarts)
            if time.monotonic() >= child.restart_at:
                self._restart(child)
                restarted.append(child.name)
        return restarted

    def _restart(self, child: Child) -> None:
        _kill_stragglers(child.known)  # its pool processes must not outlive it
        child.process = self._popen(child.name, child.argv, child.env, child.cwd)
        child.known = {psutil.Process(child.pid)}
        child.restarts += 1
        child.started, child.restart_at = time.monotonic(), None
        log.warning("%s restarted (pid %d)", child.name, child.pid)

    def all_pids(self) -> set[int]:
        """PIDs of every child and its descendants (e.g. prefork pool processes)."""
        pids: set[int] = set()
        for child in self.children:
            pids |= {p.pid for p in child.known | self._descendants(child)}
        return pids

    def stop(self, child: Child, timeout: float = 10.0) -> None:
        """Stop one child's process group: SIGTERM, then SIGKILL after ``timeout``."""
        child.stopped = True
        child.known |= self._descendants(child)
        _signal_group(child.pid, signal.SIGTERM)
        try:
            child.process.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(child.pid, signal.SIGKILL)
            child.process.wait()
        _kill_stragglers(child.known)

    def stop_all(self, timeout: float = 10.0) -> None:
        """Stop every child, most recently started first, sharing one ``timeout``."""
        self._stopping = True
        for child in self.children:
            child.known |= self._descendants(child)
            _signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in reversed(self.children):
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.pid, signal.SIGKILL)
                child.process.wait()
        _kill_stragglers(set().union(*(c.known for c in self.children)))
        self.children.clear()
        self._stopping = False  # nothing left to restart; the supervisor may spawn anew

    @staticmethod
    def _descendants(child: Child) -> set[psutil.Process]:
        try:
            return set(psutil.Process(child.pid).children(recursive=True))
        except psutil.Error:
            return set()

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_stragglers(procs: set[psutil.Process]) -> None:
    """SIGKILL any recorded process that left its group and outlived it."""
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                proc.kill()
                proc.wait(2)
        except psutil.Error:
            pass


def leftover(pids: set[int]) -> list[int]:
    """Those of ``pids`` still running (zombies excluded): should be empty after a stop."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            pass
    return alive
