"""Grid-map authorization of GRAM jobs: refused at submit when unmapped, run as the
mapped local account at launch (real SQL, Redis, processes; no Celery worker needed)."""

from __future__ import annotations

import os
import shutil

import pytest

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.events import iter_output
from grid_tasks.gram import keys
from grid_tasks.gram.jobmanager import JobManager
from grid_tasks.gram.launch import requests_for
from grid_tasks.gram.report import node_context
from grid_tasks.security.errors import Unauthorized
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")


@pytest.fixture
def mapped(quiet_settings, tmp_path):
    """(settings with a grid map, write(text)): the map file is rewritten per test."""
    path = tmp_path / "grid-mapfile"
    settings = quiet_settings.replace(gridmap_file=path)
    prepare_database(settings, load_topology(settings.topology_file))
    yield settings, path.write_text
    db.dispose_engines()


def _run(settings, job_id: int) -> JobManager:
    """Launch the job's only part on node1 as the iteration would, and wait for it."""
    from grid_tasks.celery_app import create_app

    app = create_app(settings)
    ctx = node_context(app)
    with db.session_scope(ctx.sessions) as session:
        row = db.repository.get_job(session, job_id)
        row.nodes_allocated, row.launch_token = {"node1": 1}, "tok"
        request = dict(row.request)
    ctx.redis.set(keys.token_key(job_id), "tok")
    (req,) = requests_for(job_id, "rmA", "tok", request, {"node1": 1}, 60)
    manager = JobManager(req, ctx)
    manager.start()
    manager.join(timeout=20)
    app.close()
    return manager


def test_unmapped_identity_is_refused_and_nothing_is_stored(mapped):
    settings, write = mapped
    write('"/CN=Alice" nobody\n')
    with Grid(settings) as grid:
        with pytest.raises(Unauthorized, match="/CN=Mallory"):
            grid.submit("&(executable=/bin/true)", rm="rmA", identity="/CN=Mallory")
        with db.session_scope(grid.sessions) as session:
            assert db.repository.jobs_in_states(session, "rmA", list(JobState)) == []
        handle = grid.submit("&(executable=/bin/true)", rm="rmA", identity="/CN=Alice")
        with db.session_scope(grid.sessions) as session:
            row = db.repository.get_job(session, handle.id)
            assert row.owner == "/CN=Alice" and row.user == "nobody"
            assert row.request["run_as"] == "nobody"


def test_a_mapped_account_missing_on_the_node_fails_the_job_clearly(mapped):
    settings, write = mapped
    write('"/CN=Ghost" gtnosuchuser\n')
    with Grid(settings) as grid:
        job = grid.submit("&(executable=/bin/true)(directory=/tmp)", rm="rmA",
                          identity="/CN=Ghost").id
    _run(settings, job)
    with db.session_scope(db.session_factory(db.get_engine(settings.database_url))) as s:
        row = db.repository.get_job(s, job)
        assert row.state is JobState.FAILED and row.gram_error == "AUTHORIZATION"
        assert "gtnosuchuser" in row.failure_reason and "node1" in row.failure_reason


@needs_root
def test_root_worker_runs_the_job_as_the_mapped_account(mapped, throwaway_user):
    settings, write = mapped
    name = throwaway_user.pw_name
    write(f'"/CN=Tester" {name}\n')
    with Grid(settings) as grid:
        job = grid.submit("&(executable=/bin/sh)(directory=/tmp)"
                          "(arguments=-c 'id -un; id -u; echo $HOME')", rm="rmA",
                          identity="/CN=Tester").id
        _run(settings, job)
        assert grid.status(job).state is JobState.DONE
        lines = [line.text.strip() for line in iter_output(grid.redis, job)
                 if line.stream == "stdout"]
    assert lines == [name, str(throwaway_user.pw_uid), "/nonexistent"]
