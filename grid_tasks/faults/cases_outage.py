"""Database outages of a minute (issue 21, finding 3), each on a grid of its own:

* ``postgres-outage``: a private PostgreSQL server stopped for 60 s (``pg_ctl stop``);
* ``sqlite-disk-full``: the SQLite database on a small tmpfs mounted for the case (root
  only), filled to the last byte for 60 s, then freed.

Jobs run through the outage and end during it; one more is submitted and one is
cancelled while it lasts.  What must hold: every job's state in SQL converges within
seconds of the database's return (recovery is measured from the return to the moment
every job that ended during the outage is terminal in SQL, target < 10 s), a submission
during the outage is refused with a typed error (never a raw driver error), a cancel is
accepted and applied, and the usual invariants.
"""

from __future__ import annotations

import errno
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from grid_tasks.errors import GridTasksError
from grid_tasks.faults.cases import RECOVERY_BOUND, FaultCase, _brief, _state, probe
from grid_tasks.faults.harness import FaultGrid, until
from grid_tasks.faults.invariants import Check, Outcome
from grid_tasks.faults.marks import read_marks
from grid_tasks.faults.postgres import PostgresUnavailable, PrivatePostgres
from grid_tasks.states import JobState

OUTAGE_S = 60.0
#: Rank duration of the jobs running into the outage: they end while it lasts.
RUN_S = 20
CONVERGE_TARGET_S = 10.0


def _safe(fn: Any, default: Any = None) -> Any:
    """``fn()``, or ``default`` while the database (our own reads too) is away."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - any driver or pool error during the outage
        return default


class _DatabaseOutage(FaultCase):
    """The shared scenario; subclasses give the grid (:meth:`own_grid`) and the outage."""

    settle = 60.0

    def run(self, fg: FaultGrid) -> Outcome:
        base = Path(fg.state_dir) / f"{self.name}-{secrets.token_hex(3)}"
        try:
            with self.own_grid(base) as grid:
                return super().run(grid)
        except _Skip as exc:
            return Outcome(self.name, self.fault, False, None, [], f"skipped: {exc}")

    @contextmanager
    def own_grid(self, base: Path) -> Iterator[FaultGrid]:
        raise NotImplementedError
        yield

    def begin(self) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        running = [self.submit(fg, marker, jobs, "rmA", RUN_S, 4, reserve=True),
                   self.submit(fg, marker, jobs, "rmA", RUN_S, 4),
                   self.submit(fg, marker, jobs, "rmB", RUN_S, 2, reserve=True)]
        queued = [self.submit(fg, marker, jobs, "rmA", 5, 4) for _ in range(2)]
        until(lambda: all(_state(fg, h.id).state is JobState.ACTIVE for h in running), 40,
              "three jobs ACTIVE")
        down = time.monotonic()
        self.begin()
        try:
            cancelled = running[1]
            submitted, cancel = self._during(fg, marker, jobs, cancelled.id)
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
        finally:
            self.end()
        up = time.monotonic()
        until(lambda: _safe(lambda: all(_state(fg, h.id).terminal for h in running), False),
              RECOVERY_BOUND, "the jobs that ended in the outage terminal in SQL", poll=0.2)
        converged = time.monotonic() - up
        until(lambda: _safe(lambda: all(_state(fg, h.id).terminal for h in queued), False),
              RECOVERY_BOUND, "the queued jobs to run and end", poll=0.2)
        probe(fg, "rmA", marker, jobs, RECOVERY_BOUND)
        self.extra += [submitted, self._cancel_applied(fg, cancelled.id, cancel),
                       Check("states converge after the database returns",
                             converged < CONVERGE_TARGET_S,
                             f"{converged:.1f} s after it came back (target "
                             f"< {CONVERGE_TARGET_S:g} s)")]
        states = ", ".join(_brief(_state(fg, h.id)) for h in running + queued)
        return converged, (f"database away {up - down:.0f} s; states converged "
                           f"{converged:.1f} s after its return; {states}")

    def _during(self, fg: FaultGrid, marker: str, jobs: list[int],
                cancel_id: int) -> tuple[Check, str]:
        """A submission and a cancel while the database is away."""
        time.sleep(2.0)
        try:
            job = fg.submit("&(executable=/bin/true)", "rmB", marker)
            jobs.append(job.id)
            submitted = Check("submit during the outage: typed error", True,
                              f"accepted as job {job.id}")
        except GridTasksError as exc:
            raw = "sqlalchemy" in str(exc) or "Traceback" in str(exc)
            submitted = Check("submit during the outage: typed error", not raw,
                              f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        except Exception as exc:  # noqa: BLE001 - precisely what must not happen
            submitted = Check("submit during the outage: typed error", False,
                              f"untyped {type(exc).__module__}.{type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:160]}")
        try:
            answer = fg.grid.cancel(cancel_id, timeout=15)
            # CancelAccepted (state None) while the database is away; a state if not
            cancel = f"accepted: {answer.state.value if answer.state else answer.reason}"
        except Exception as exc:  # noqa: BLE001 - reported by the check
            cancel = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        return submitted, cancel

    def _cancel_applied(self, fg: FaultGrid, job_id: int, cancel: str) -> Check:
        """The job cancelled during the outage ended FAILED and none of its ranks ran
        to its end (it was cancelled long before)."""
        status = _state(fg, job_id)
        ran_out = [e for e in read_marks(self.dir) if e.job == job_id and e.ended]
        ok = cancel.startswith("accepted") and status.state is JobState.FAILED and not ran_out
        return Check("cancel during the outage applied", ok,
                     f"cancel {cancel}; job {_brief(status)}; ranks that ran to their end: "
                     f"{len(ran_out)}")


class _Skip(GridTasksError):
    """The case cannot run here (no PostgreSQL binaries, no tmpfs mount)."""


class PostgresOutage(_DatabaseOutage):
    name = "postgres-outage"
    fault = (f"stop the grid's private PostgreSQL server for {OUTAGE_S:g} s while jobs run "
             "and end; submit and cancel during the outage")

    @contextmanager
    def own_grid(self, base: Path) -> Iterator[FaultGrid]:
        try:
            self.server = PrivatePostgres().start()
        except PostgresUnavailable as exc:
            raise _Skip(str(exc)) from None
        try:
            with FaultGrid(base / "grid", database_url=self.server.url) as grid:
                yield grid
        finally:
            self.server.close()

    def begin(self) -> None:
        self.server.stop()

    def end(self) -> None:
        self.server.start()


class SqliteDiskFull(_DatabaseOutage):
    name = "sqlite-disk-full"
    fault = (f"fill the filesystem of the grid's SQLite database (a 48 MB tmpfs) for "
             f"{OUTAGE_S:g} s while jobs run and end; submit and cancel meanwhile")

    @contextmanager
    def own_grid(self, base: Path) -> Iterator[FaultGrid]:
        self.mount = base / "db"
        self.mount.mkdir(parents=True)
        if os.geteuid() != 0:
            raise _Skip("mounting a tmpfs needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs",
                               str(self.mount)], capture_output=True, text=True)
        if done.returncode != 0:
            raise _Skip(f"cannot mount a tmpfs: {done.stderr.strip()[:200]}")
        try:
            url = f"sqlite:///{self.mount / 'grid_tasks.db'}"
            with FaultGrid(base / "grid", database_url=url) as grid:
                yield grid
        finally:
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True)

    def begin(self) -> None:
        """Write zeros until the filesystem refuses (ENOSPC)."""
        chunk = b"\0" * (1 << 20)
        with open(self.mount / "filler", "wb", buffering=0) as out:
            try:
                while True:
                    out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
            try:
                while True:  # the last bytes, smaller than a chunk
                    out.write(b"\0" * 4096)
            except OSError:
                pass

    def end(self) -> None:
        (self.mount / "filler").unlink(missing_ok=True)
