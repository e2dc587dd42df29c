"""Grid-map authorization of GRAM jobs at the gatekeeper: the submitter is whoever signed
the request, mapped through the gatekeeper's own grid map; refused when unmapped, run as
the mapped local account at launch.

Real parts: a ``grid-tasks worker --rm rmA`` gatekeeper subprocess holding the scheduler
key and the grid map, clients in this process signing with a user's key (one key per
process at a time: kombu's serializer registry is process-wide), real SQL and Redis.
The launch itself is done here as the iteration would (no node daemon needed).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.embedded.stack import grid_tasks_command, prepare_database
from grid_tasks.embedded.supervisor import Supervisor, leftover
from grid_tasks.errors import GridTasksError
from grid_tasks.events import iter_output
from grid_tasks.gram import keys
from grid_tasks.gram.door import CANCEL, ask
from grid_tasks.gram.jobmanager import JobManager
from grid_tasks.gram.launch import requests_for
from grid_tasks.gram.report import node_context
from grid_tasks.reservation_tasks import RELEASE_RESERVATIONS, SET_RESERVATION
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.errors import Unauthorized
from grid_tasks.security.role_keys import ensure_grid_keys, init_role_key, subject_of
from grid_tasks.security.roles import Role
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")
ALICE = subject_of(Role.USER, "alice")
MALLORY = subject_of(Role.USER, "mallory")


class Door:
    """A gatekeeper for rmA with a grid map, and clients signing as alice or mallory."""

    def __init__(self, settings: Any, gridmap: Path, keydir: Path) -> None:
        self.settings, self.gridmap, self.keydir = settings, gridmap, keydir
        now = dt.datetime.now(dt.timezone.utc)
        self.keys = ensure_grid_keys(keydir, "alice", now=now)
        self.mallory = init_role_key(keydir, Role.USER, "mallory", now=now,
                                     stem="user-mallory")

    def client(self, who: str = "alice") -> Grid:
        if who == "operator":
            return Grid(self.settings.replace(signing=self.keys.signing(Role.OPERATOR),
                                              gridmap_file=None))
        if who == "eve":  # a key of her own, which no one here trusts
            now = dt.datetime.now(dt.timezone.utc)
            paths = init_role_key(self.keydir.parent / "eve", Role.USER, "eve", now=now)
        else:
            paths = self.keys.user if who == "alice" else self.mallory
        signing = SigningSettings(True, paths.key, paths.cert, paths.cert_store)
        return Grid(self.settings.replace(signing=signing, gridmap_file=None))


@pytest.fixture
def door(quiet_settings, tmp_path) -> Iterator[Door]:
    """The gatekeeper subprocess (scheduler key, grid map) and its client keys."""
    path = tmp_path / "grid-mapfile"
    path.write_text("")
    settings = quiet_settings.replace(gridmap_file=path)
    prepare_database(settings, load_topology(settings.topology_file))
    made = Door(settings, path, tmp_path / "keys")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.replace(signing=made.keys.signing(Role.SCHEDULER)).to_env())
    supervisor = Supervisor(tmp_path / "logs")
    supervisor.spawn("gatekeeper", grid_tasks_command("worker", "--rm", "rmA", "--no-check",
                                                      "-l", "WARNING"), env=env)
    pids = supervisor.all_pids()
    try:
        yield made
    finally:
        supervisor.stop_all(timeout=10)
        db.dispose_engines()
    assert leftover(pids) == []


def _run(door: Door, job_id: int) -> JobManager:
    """Launch the job's only part on node1 as the iteration would, and wait until the
    gatekeeper recorded its end (the job manager signs its report with the node key)."""
    from grid_tasks.celery_app import create_app

    settings = door.settings
    app = create_app(settings.replace(signing=door.keys.signing(Role.NODE)))
    ctx = node_context(app)
    sessions = db.session_factory(db.get_engine(settings.database_url))
    with db.session_scope(sessions) as session:
        row = db.repository.get_job(session, job_id)
        row.nodes_allocated, row.launch_token = {"node1": 1}, "tok"
        request = dict(row.request)
    ctx.redis.set(keys.token_key(job_id), "tok")
    (req,) = requests_for(job_id, "rmA", "tok", request, {"node1": 1}, 60)
    manager = JobManager(req, ctx)
    manager.start()
    manager.join(timeout=20)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with db.session_scope(sessions) as session:
            if db.repository.get_job(session, job_id).state.terminal:
                break
        time.sleep(0.05)
    app.close()
    return manager


def _jobs(grid: Grid) -> list[Any]:
    with db.session_scope(grid.sessions) as session:
        return db.repository.jobs_in_states(session, "rmA", list(JobState))


def test_an_unmapped_signer_is_refused_and_nothing_is_stored(door):
    door.gridmap.write_text(f'"{ALICE}" nobody\n')
    with door.client("mallory") as grid:
        with pytest.raises(Unauthorized, match="mallory") as info:
            grid.submit("&(executable=/bin/true)", rm="rmA")
        assert info.value.identity == MALLORY and info.value.rm == "rmA"
        assert _jobs(grid) == []
    with door.client("alice") as grid:
        handle = grid.submit("&(executable=/bin/true)", rm="rmA")
        with db.session_scope(grid.sessions) as session:
            row = db.repository.get_job(session, handle.id)
            assert row.owner == ALICE and row.user == "nobody"
            assert row.request["run_as"] == "nobody"


def test_an_untrusted_key_gets_a_refusal_at_once_and_nothing_is_stored(door):
    door.gridmap.write_text(f'"{ALICE}" nobody\n')
    with door.client("eve") as grid:
        started = time.monotonic()
        with pytest.raises(GridTasksError, match="unknown signer.*eve"):
            grid.submit("&(executable=/bin/true)", rm="rmA", timeout=20)
        assert time.monotonic() - started < 10  # told, not left to time out
        assert _jobs(grid) == []


def test_user_picks_only_among_the_accounts_the_map_allows(door):
    door.gridmap.write_text(f'"{ALICE}" nobody,daemon\n')
    with door.client("alice") as grid:
        picked = grid.submit("&(executable=/bin/true)", rm="rmA", user="daemon")
        with pytest.raises(Unauthorized, match="root"):
            grid.submit("&(executable=/bin/true)", rm="rmA", user="root")
        with db.session_scope(grid.sessions) as session:
            row = db.repository.get_job(session, picked.id)
            assert (row.user, row.request["run_as"]) == ("daemon", "daemon")
        assert len(_jobs(grid)) == 1


def test_only_the_owner_may_cancel(door):
    door.gridmap.write_text(f'"{ALICE}" nobody\n"{MALLORY}" daemon\n')
    with door.client("alice") as grid:
        job = grid.submit("&(executable=/bin/true)", rm="rmA").id
    with door.client("mallory") as grid:
        contact = f"gram://rmA/jobs/{job}"
        with pytest.raises(Unauthorized, match="belongs to"):
            grid.cancel(contact)
        with pytest.raises(Unauthorized, match="belongs to"):
            grid.job(contact)  # nor may mallory look at it (GRAM's status is the owner's)
        with pytest.raises(Unauthorized, match="belongs to"):  # only a scheduler vouches
            ask(grid.app, CANCEL, "rmA", {"job": job, "submitter": ALICE}, shadow="vouch")
    with door.client("alice") as grid:
        assert grid.job(contact).status().state is JobState.PENDING
        assert grid.cancel(contact).state is JobState.FAILED


def test_a_mapped_account_missing_on_the_node_fails_the_job_clearly(door):
    door.gridmap.write_text(f'"{ALICE}" gtnosuchuser\n')
    with door.client("alice") as grid:
        job = grid.submit("&(executable=/bin/true)(directory=/tmp)", rm="rmA").id
    _run(door, job)
    with db.session_scope(db.session_factory(db.get_engine(door.settings.database_url))) as s:
        row = db.repository.get_job(s, job)
        assert row.state is JobState.FAILED and row.gram_error == "AUTHORIZATION"
        assert "gtnosuchuser" in row.failure_reason and "node1" in row.failure_reason


@needs_root
def test_root_worker_runs_the_job_as_the_mapped_account(door, throwaway_user):
    name = throwaway_user.pw_name
    door.gridmap.write_text(f'"{ALICE}" {name}\n')
    with door.client("alice") as grid:
        # $(HOME) and $(LOGNAME) are the mapped account's, evaluated at the gatekeeper
        job = grid.submit("&(executable=/bin/sh)(directory=/tmp)(arguments=-c "
                          "'id -un; id -u; echo $HOME; echo \"$0 $1\"' $(HOME) $(LOGNAME))",
                          rm="rmA").id
    _run(door, job)  # (signs as a node: signing is per process, so alice signs anew)
    with door.client("alice") as grid:
        assert grid.status(job, rm="rmA").state is JobState.DONE
        lines = [line.text.strip() for line in iter_output(grid.redis, job)
                 if line.stream == "stdout"]
    assert lines == [name, str(throwaway_user.pw_uid), "/nonexistent", f"/nonexistent {name}"]


def test_only_an_operator_sets_or_releases_reservations_and_may_cancel_any_job(door):
    door.gridmap.write_text(f'"{ALICE}" nobody\n')
    now = dt.datetime.now(dt.timezone.utc)
    request = {"hosts": "node1", "resources": None, "start": now.isoformat(),
               "end": (now + dt.timedelta(minutes=10)).isoformat(),
               "acl": {"users": ["nobody"]}, "name": "maint"}
    with door.client("alice") as grid:
        with pytest.raises(GridTasksError, match="signer role user may not run it"):
            ask(grid.app, SET_RESERVATION, "rmA", request, shadow="setres", timeout=20)
        job = grid.submit("&(executable=/bin/true)", rm="rmA").id
    with door.client("operator") as grid:
        made = ask(grid.app, SET_RESERVATION, "rmA", request, shadow="setres", timeout=20)
        assert (made["name"], made["procs_by_node"]) == ("maint", {"node1": 4})
        gone = ask(grid.app, RELEASE_RESERVATIONS, "rmA", {"names": ["maint"]},
                   shadow="releaseres", timeout=20)
        assert gone["released"] == ["maint"]
        assert grid.cancel(job, rm="rmA").state is JobState.FAILED  # Maui's admin canceljob
