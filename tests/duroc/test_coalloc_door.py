"""Coallocated jobs through the one door, on a signed grid with a grid map.

Real parts: a FaultGrid (scheduler worker serving the scheduler queue and every
gatekeeper, node daemons, beat, its own redis-server, SQLite), all signing with their
role's key; clients in this process signing as alice, mallory or the grid's own
user (one key at a time: kombu's serializer registry is process-wide, so each
client is made, used and closed before the next).  The grid map sends alice to an
account made for this module (``useradd``, removed after) and mallory to ``nobody``;
the grid's own user is trusted but not mapped.

The mapped account cannot run this venv's Python (it lives under /root), so the
jobs that run to the end are ``/bin/true`` no-barrier subjobs (submitted by the
scheduler through ``submit_subjob``); the barrier subjobs of the owner-check test
sleep until cancelled (submitted by the chord's ``watch_subjob`` headers).  Both
paths vouch for the owner at the gatekeeper.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.db.models import CoallocatedJob, Job
from grid_tasks.faults.harness import FaultGrid, until
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.errors import Unauthorized
from grid_tasks.security.role_keys import init_role_key, subject_of
from grid_tasks.security.roles import Role
from grid_tasks.states import JobState

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                 reason="needs root and useradd (a grid map to a real account)")]

ALICE = subject_of(Role.USER, "alice")
MALLORY = subject_of(Role.USER, "mallory")


class DoorGrid:
    """The running grid, the mapped account, a 0755 job directory and client keys."""

    def __init__(self, fg: Any, account: str, work: Path, keys: dict[str, Any]) -> None:
        self.fg, self.account, self.work, self.keys = fg, account, work, keys

    @contextmanager
    def client(self, who: str, *, database: bool = True) -> Iterator[Grid]:
        """A Grid signing as ``who`` ("alice", "mallory" or "grid": the grid's own user);
        without ``database`` its database URL leads nowhere (an application's)."""
        paths = self.keys[who]
        signing = SigningSettings(True, paths.key, paths.cert, paths.cert_store)
        settings = self.fg.settings.replace(signing=signing, gridmap_file=None)
        if not database:
            settings = settings.replace(database_url="postgresql+psycopg://x@127.0.0.1:1/x")
        grid = Grid(settings)
        try:
            yield grid
        finally:
            grid.close()

    def component(self, rm: str, label: str, executable: str, start: str,
                  args: str = "") -> str:
        return (f"(&(resourceManagerContact={rm})(label={label})(count=1)"
                f"(subjobStartType={start})(directory={self.work})"
                f"(executable={executable}){args})")


@pytest.fixture(scope="module")
def door_grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoorGrid]:
    from grid_tasks.selftest.account import throwaway_account

    base = tmp_path_factory.mktemp("door")
    keydir = base / "grid" / "keys"
    now = dt.datetime.now(dt.timezone.utc)
    keys = {name: init_role_key(keydir, Role.USER, name, now=now, stem=f"user-{name}")
            for name in ("alice", "mallory")}
    work = Path(tempfile.mkdtemp(prefix="gt-door-work-", dir="/tmp"))
    work.chmod(0o755)  # jobs may enter it, not write it
    try:
        with throwaway_account() as account:
            gridmap = base / "grid-mapfile"
            gridmap.write_text(f'"{ALICE}" {account.pw_name}\n"{MALLORY}" nobody\n')
            with FaultGrid(base / "grid", beats=("beat-a",), gridmap_file=gridmap) as fg:
                keys["grid"] = fg.keys.user
                yield DoorGrid(fg, account.pw_name, work, keys)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rows(grid: Grid, job_id: int) -> tuple[Any, list[Any]]:
    with db.session_scope(grid.sessions) as session:
        row = session.get(CoallocatedJob, job_id)
        gram = session.query(Job).filter(Job.coallocation_id == job_id).all()
        return ((row.owner, JobState(row.state)),
                sorted((j.coallocation_label, j.owner, j.user) for j in gram))


def test_alices_job_runs_to_done_owned_by_her_verified_subject(door_grid):
    dg = door_grid
    rsl = "+" + dg.component("rmA", "left", "/bin/true", "no-barrier") + \
        dg.component("rmB", "right", "/bin/true", "no-barrier")
    with dg.client("alice", database=False) as grid:  # an application: no database
        job = grid.job_request(rsl, barrier_timeout=60, user=dg.account)
        final = job.wait(timeout=90)
        assert final.state is JobState.DONE, final
        assert grid.coalloc(job.contact).status().state is JobState.DONE
        assert grid.services._sessions is None
    with dg.client("mallory") as grid:  # nor may anyone else even look at it
        with pytest.raises(Unauthorized, match="belongs to"):
            grid.subjob_states(job.id)
    head, gram = _rows(dg.fg.grid, job.id)  # the operator's view
    assert head == (ALICE, JobState.DONE)
    # the scheduler vouched for alice at each gatekeeper: the subjobs are hers, run as
    # the account her grid-map entry names
    assert gram == [("left", ALICE, dg.account), ("right", ALICE, dg.account)]


def test_an_unmapped_subject_is_refused_and_nothing_is_stored(door_grid):
    dg = door_grid
    store = redis.Redis.from_url(dg.fg.settings.redis_url)
    before = sorted(store.scan_iter("grid_tasks:duroc:*")), store.acl_users()
    rsl = "+" + dg.component("rmA", "a", "/bin/true", "no-barrier")
    try:
        with dg.client("grid") as grid:  # trusted (a user key of this grid), not mapped
            with pytest.raises(Unauthorized, match="CN=root|is not in the grid map") as info:
                grid.job_request(rsl, barrier_timeout=60)
            assert info.value.identity == dg.fg.keys.user_subject
            assert dg.fg.keys.user_subject in str(info.value)
            with db.session_scope(grid.sessions) as session:
                owners = [r.owner for r in session.query(CoallocatedJob)]
        assert dg.fg.keys.user_subject not in owners
        assert (sorted(store.scan_iter("grid_tasks:duroc:*")), store.acl_users()) == before
    finally:
        store.close()


def test_mallory_cannot_cancel_or_change_alices_job_but_alice_can(door_grid):
    dg = door_grid
    # (long enough to outlast the requests below: a strict subjob ending before the
    # barrier would abort the job; alice cancels it at the end)
    sleep = '(arguments="600")'
    rsl = "+" + dg.component("rmA", "a", "/bin/sleep", "strict-barrier", sleep) + \
        dg.component("rmB", "b", "/bin/sleep", "strict-barrier", sleep)
    with dg.client("alice") as grid:
        job = grid.job_request(rsl, barrier_timeout=600)
        # the chord's headers submit both subjobs at their gatekeepers, for alice
        def both_submitted() -> list[Any] | None:
            found = _rows(grid, job.id)[1]
            return found if len(found) == 2 else None

        gram = until(both_submitted, 60, "both subjobs submitted by their headers")
        assert [(label, owner) for label, owner, _ in gram] == [("a", ALICE), ("b", ALICE)]
    with dg.client("mallory") as grid:
        for attempt in (lambda: grid.job_cancel(job.id),
                        lambda: grid.subjob_delete(job.id, "b"),
                        lambda: grid.subjob_add(job.id, "+" + dg.component(
                            "rmA", "c", "/bin/true", "no-barrier")),
                        lambda: grid.barrier_release(job.id, wait_for_subjobs=False)):
            with pytest.raises(Unauthorized, match="belongs to") as info:
                attempt()
            assert info.value.identity == MALLORY and ALICE in str(info.value)
    assert _rows(dg.fg.grid, job.id)[0] == (ALICE, JobState.PENDING)  # undisturbed
    with dg.client("alice") as grid:
        after = grid.subjob_delete(job.id, "b")
        assert [s.label for s in after.subjobs] == ["a"]
        cancelled = grid.job_cancel(job.id)
        assert cancelled.state is JobState.FAILED and cancelled.barrier == "cancelled"
        until(lambda: all(grid.status(j.gram_job).state.terminal
                           for j in grid.subjob_states(job.id).subjobs
                           if j.gram_job is not None), 30, "alice's subjobs cancelled")
