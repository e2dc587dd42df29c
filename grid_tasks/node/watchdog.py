"""A node daemon's watchdog: a small process that kills job process groups their daemon
no longer renews.

Why a separate process: a daemon frozen by SIGSTOP (a hung VM, a swap storm, a debugger)
runs none of its threads, so its job managers cannot kill the processes whose leases
they stopped renewing, and ``PR_SET_PDEATHSIG`` fires only when the daemon dies.  The
scheduler meanwhile declares the part lost and, once the part's fence deadline has
passed, reuses its processors or launches the job again
(:mod:`grid_tasks.scheduling.fences`): the processes must be dead by then.

A daemon starts one watchdog (once, not per job: a launch only writes a line to a
pipe) and tells it, one line each, with ``t`` the CLOCK_MONOTONIC second it stands for
(system-wide on Linux, so both processes read the same clock)::

    beat <t>              the daemon runs (a thread of it sends this every half second
                          while it has work: groups watched, or a launch ``arm``-ed)
    rest <t>              it has none: no beats follow until it has (nothing to time)
    watch <t> <pgid>...   groups spawned by a launch claimed at t (renewed at t)
    renew <t> <pgid>...   their job manager renewed its lease in a call begun at t
    forget <pgid>...      the groups ended

A group not renewed within ``bound`` seconds of its last ``t`` is SIGKILLed (its job
manager is stuck, or cannot reach Redis).  When the daemon's beats lapse for ``bound``
(it is frozen) every watched group is killed, and so is every job process group the
daemon started but had not yet announced (a freeze between spawn and ``watch``): its
children that lead their own process group and carry ``GRID_TASKS_JOB_ID``.  When the
pipe closes (the daemon died or stopped) every group still watched is killed at once.
The watchdog runs as ``python -I -S <this file> <bound>``: standard library only, so it
starts in milliseconds and imports nothing of the daemon.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

#: Seconds between the watchdog's looks at its groups, at most.
MAX_TICK_S = 0.25
#: Seconds a daemon waits for room in a full pipe before it drops a line.
_WRITE_WAIT_S = 0.5


def tick_for(bound: float) -> float:
    """How often a watchdog with ``bound`` looks: a small part of the bound."""
    return max(0.01, min(MAX_TICK_S, bound / 8))


class Groups:
    """The watchdog's state: last renewal per process group, the daemon's last beat."""

    def __init__(self, bound: float, kill: Any = None, unannounced: Any = None) -> None:
        self.bound = bound
        self.renewed: dict[int, float] = {}
        self.beat: float | None = None  # None: no beat yet, or lapsed and acted on
        self._kill = kill or _killpg
        self._unannounced = unannounced or (lambda: [])

    def apply(self, line: str, now: float) -> None:
        """One command line from the daemon (malformed lines are ignored)."""
        verb, *args = line.split()
        if not args:
            return
        if verb == "beat":
            self.beat = max(float(args[0]), self.beat or 0.0)
            return
        if verb == "rest":  # nothing watched, no launch spawning: no beats until one is
            self.beat = None
            return
        if verb == "forget":
            for pgid in args:
                self.renewed.pop(int(pgid), None)
            return
        at, pgids = float(args[0]), [int(p) for p in args[1:]]
        for pgid in pgids:
            if verb == "watch" or pgid in self.renewed:
                self.renewed[pgid] = max(at, self.renewed.get(pgid, at))
                if verb == "watch" and now - at > self.bound:  # claimed a bound ago
                    del self.renewed[pgid]
                    self._kill(pgid)

    def expire(self, now: float) -> list[int]:
        """Kill the groups not renewed within the bound, or all of the daemon's when its
        beats lapsed; their ids."""
        if self.beat is not None and now - self.beat > self.bound:
            self.beat = None  # acted on: the next beat re-arms it
            return sorted(set(self.kill_all()) | set(self._kill_each(self._unannounced())))
        late = [g for g, at in self.renewed.items() if now - at > self.bound]
        for pgid in late:
            del self.renewed[pgid]
        return self._kill_each(late)

    def _kill_each(self, pgids: Iterable[int]) -> list[int]:
        done = list(pgids)
        for pgid in done:
            self._kill(pgid)
        return done

    def kill_all(self) -> list[int]:
        everyone = sorted(self.renewed)
        self.renewed.clear()
        return self._kill_each(everyone)


def _killpg(pgid: int) -> None:
    """SIGKILL the group ``pgid`` - unless its id now leads something that is no grid
    job (a ``forget`` lost, the group gone, its id reused): a group's id is not reused
    while any member lives, so an absent leader is safe to signal."""
    try:
        with open(f"/proc/{pgid}/environ", "rb") as f:
            if b"GRID_TASKS_JOB_ID=" not in f.read():
                return
    except OSError:
        pass  # the leader is gone (or a zombie): its group may live on
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def job_groups_of(parent: int) -> list[int]:
    """Process groups led by children of ``parent`` that are grid jobs (their
    environment names ``GRID_TASKS_JOB_ID``), read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) != parent or int(fields[2]) != int(entry):
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if b"GRID_TASKS_JOB_ID=" in f.read():
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return found


def main(argv: list[str]) -> int:
    """The watchdog process: read commands from stdin until it closes."""
    bound, daemon = float(argv[1]), os.getppid()
    groups = Groups(bound, unannounced=lambda: job_groups_of(daemon))
    tick, fd, pending = tick_for(bound), sys.stdin.fileno(), b""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the daemon's business
    while True:
        # a resting daemon with nothing watched has nothing to time: sleep until it writes
        busy = groups.beat is not None or bool(groups.renewed)
        ready, _, _ = select.select([fd], [], [], tick if busy else None)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:  # the daemon is gone: nothing renews its jobs any more
                groups.kill_all()
                return 0
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                try:
                    groups.apply(line.decode(), time.monotonic())
                except ValueError:
                    continue
        groups.expire(time.monotonic())


class Watchdog:
    """The daemon's handle on its watchdog process (started on first use, restarted if
    it died: the groups it watched are watched again)."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.proc: subprocess.Popen[bytes] | None = None
        self.watched: dict[int, float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # work came, or closing
        self._armed = 0  # launches between arm() and disarm()
        self._beats: threading.Thread | None = None

    def start(self) -> "Watchdog":
        with self._lock:
            self._ensure()
        return self

    def arm(self) -> None:
        """A launch is about to spawn: beat now and until :meth:`disarm` (a daemon frozen
        between a spawn and its ``watch`` is caught by the lapse of these beats)."""
        with self._lock:
            self._armed += 1
            self._ensure()
            self._write(f"beat {time.monotonic()!r}\n")
            self._wake.notify_all()

    def disarm(self) -> None:
        """The launch of the matching :meth:`arm` spawned what it spawns (and watched it)."""
        with self._lock:
            self._armed = max(0, self._armed - 1)

    def watch(self, pgids: Iterable[int], at: float) -> None:
        """Groups just spawned by a launch claimed at ``at`` (monotonic seconds)."""
        ids = list(pgids)
        with self._lock:
            self.watched.update((p, at) for p in ids)
            self._send("watch", at, ids)
            self._wake.notify_all()

    def renew(self, pgids: Iterable[int], at: float) -> None:
        ids = [p for p in pgids if p in self.watched]
        with self._lock:
            self.watched.update((p, at) for p in ids)
            self._send("renew", at, ids)

    def forget(self, pgids: Iterable[int]) -> None:
        ids = list(pgids)
        with self._lock:
            for p in ids:
                self.watched.pop(p, None)
            self._send("forget", None, ids)

    def close(self, timeout: float = 2.0) -> None:
        """Close the pipe (the watchdog kills what it still watches) and wait for it."""
        with self._lock:
            proc, self.proc = self.proc, None
            self._wake.notify_all()
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        if self.proc is not None:
            log.error("watchdog exited (%s); starting another", self.proc.returncode)
        # its own session: a signal to the daemon's process group (a stop, ^C) is not its
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__),
                                      repr(self.bound)], stdin=subprocess.PIPE,
                                     start_new_session=True, close_fds=True)
        assert self.proc.stdin is not None
        os.set_blocking(self.proc.stdin.fileno(), False)
        for pgid, at in self.watched.items():
            self._write(f"watch {at!r} {pgid}\n")
        if self._beats is None:
            self._beats = threading.Thread(target=self._beat, daemon=True,
                                           name="watchdog beats")
            self._beats.start()
        return self.proc

    def _busy(self) -> bool:
        return bool(self.watched) or self._armed > 0

    def _beat(self) -> None:
        """Tell the watchdog this daemon runs, twice per tick, while it has work (groups
        watched, a launch armed); without, say ``rest`` once and sleep until work comes
        (an idle daemon then costs neither process a wake-up), until closed."""
        resting = False
        with self._lock:
            while True:
                self._wake.wait(2 * tick_for(self.bound) if self._busy() or not resting
                                else None)
                if self.proc is None:
                    self._beats = None
                    return
                self._ensure()
                verb, resting = ("beat", False) if self._busy() else ("rest", True)
                self._write(f"{verb} {time.monotonic()!r}\n")

    def _send(self, verb: str, at: float | None, ids: list[int]) -> None:
        if not ids:
            return
        self._ensure()
        head = verb if at is None else f"{verb} {at!r}"
        self._write(f"{head} {' '.join(map(str, ids))}\n")

    def _write(self, line: str) -> None:
        """Write one line; a full pipe (a watchdog behind, or stopped) is waited for a
        little, never for long: the daemon must not stall on its watchdog."""
        assert self.proc is not None and self.proc.stdin is not None
        fd, data = self.proc.stdin.fileno(), line.encode()
        try:
            while data:
                try:
                    data = data[os.write(fd, data):]
                except BlockingIOError:
                    if not select.select([], [fd], [], _WRITE_WAIT_S)[1]:
                        log.warning("watchdog pipe full; dropped: %s", line.strip())
                        return
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            log.error("watchdog pipe broken; it is restarted at the next line")


_watchdogs: dict[tuple[int, float], Watchdog] = {}
_watchdogs_lock = threading.Lock()


def watchdog_for(bound: float) -> Watchdog:
    """This process's watchdog for ``bound`` (made and started on first use)."""
    key = (os.getpid(), float(bound))
    with _watchdogs_lock:
        dog = _watchdogs.get(key)
        if dog is None:
            dog = _watchdogs[key] = Watchdog(float(bound))
    return dog.start()


def close_watchdogs() -> None:
    """Close this process's watchdogs (a daemon stopping: its jobs die with it)."""
    with _watchdogs_lock:
        mine = [(k, d) for k, d in _watchdogs.items() if k[0] == os.getpid()]
        for key, _ in mine:
            del _watchdogs[key]
    for _, dog in mine:
        dog.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
