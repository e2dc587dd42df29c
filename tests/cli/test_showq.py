"""showq as an operator runs it, in a new process: it reads, so it neither imports
Alembic or Celery nor migrates, and a schema behind the head is refused with the
typed error naming the command that migrates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import insert

from grid_tasks.cli.showq import json_document
from grid_tasks.db import Job, get_engine, migrate, session_factory, sync_topology
from grid_tasks.db.schema import REVISIONS, stored_revision
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("alembic", "celery", "kombu", "grid_tasks.client", "grid_tasks.maui")
#: showq in a child process; prints (on stderr) which of HEAVY it loaded
SHOWQ = ("import json, sys\nfrom grid_tasks.cli import main\n"
         "try:\n    main(sys.argv[1:], prog_name='grid-tasks')\n"
         "finally:\n    from sqlalchemy import inspect\n    from grid_tasks.db import Job\n"
         "    print(json.dumps([m for m in %r if m in sys.modules]\n"
         "                     + (['configured ORM mappers'] if inspect(Job).configured else [])),"
         " file=sys.stderr)\n" % (HEAVY,))


def showq(env: dict[str, str], *args: str) -> tuple[int, str, list[str]]:
    done = subprocess.run([sys.executable, "-c", SHOWQ, "showq", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    *message, loaded = done.stderr.strip().splitlines()
    return done.returncode, "\n".join(message), json.loads(loaded)


def prepared(settings, revision: str = "head") -> None:
    migrate(settings.database_url, revision)
    with session_factory(get_engine(settings.database_url))() as s:
        sync_topology(s, load_topology(settings.topology_file))
        s.commit()


def kept_plan(settings, env: dict[str, str]) -> None:
    """A first showq makes and keeps the RMs' plans (loading the Maui core)."""
    code, message, _ = showq(env, "--json")
    assert code == 0, message


def test_showq_reads_without_alembic_celery_or_the_maui_core(settings, grid_env):
    prepared(settings)
    with get_engine(settings.database_url).begin() as conn:
        conn.execute(insert(Job.__table__), [{
            "rm": "rmA", "user_name": "u", "state": JobState.PENDING,
            "maui_state": MauiJobState.IDLE, "tasks": 1, "procs": 1, "walltime": 60,
            "version": 1, "request": {}, "holds": [], "dependencies": [],
            "nodes_allocated": {}}])
    kept_plan(settings, grid_env)
    code, message, loaded = showq(grid_env, "-r", "rmA")
    assert code == 0, message
    # a kept plan answers: no Alembic, Celery, kombu, client or Maui core, and no ORM
    # mapper configured (its reads are Core statements)
    assert loaded == []


def test_showq_refuses_a_schema_behind_the_head_and_does_not_migrate(settings, grid_env):
    prepared(settings, REVISIONS[-2])
    code, message, loaded = showq(grid_env)
    assert code == 1
    assert message == (f"error: database sqlite:///{settings.state_dir}/grid_tasks.db is at "
                       f"schema revision {REVISIONS[-2]}, behind {REVISIONS[-1]}: run "
                       "`grid-tasks db upgrade` (or any command that writes), then ask again")
    assert "alembic" not in loaded
    assert stored_revision(get_engine(settings.database_url)) == REVISIONS[-2]


def test_json_document_is_the_same_json_one_job_per_line():
    data = {"rm": "a", "now": None, "active": [], "summary": {"n": 2, "by": {"u": 1}},
            "idle": [{"job_id": 1, "holds": ["user"]}, {"job_id": 2, "user": "é"}]}
    text = json_document(data)
    assert json.loads(text) == data
    assert [line.strip() for line in text.splitlines() if "job_id" in line] == [
        '{"job_id": 1, "holds": ["user"]},', '{"job_id": 2, "user": "\\u00e9"}']
    assert json_document({}) == "{}"
