"""showq and checkjob of coallocated (DUROC) jobs through the real CLI: the settings'
SQLite database with the demo topology, barrier entries from the private Redis."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.db import get_engine, migrate, session_factory, sync_topology
from grid_tasks.db.models.jobs import BarrierState
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.states import JobState, SubjobStartType
from grid_tasks.topology import load_topology
from tests.ops.test_queue_coalloc import add_coalloc


@pytest.fixture
def coalloc_env(settings: Any) -> Any:
    """(env, job id): a live coallocated job of two subjobs, one process of 'left' in."""
    migrate(settings.database_url)
    factory = session_factory(get_engine(settings.database_url))
    with factory() as session:
        sync_topology(session, load_topology(settings.topology_file))
        session.commit()
        job = add_coalloc(session, [
            {"label": "left", "rm": "rmA", "gram": JobState.ACTIVE},
            {"label": "right", "rm": "rmB", "gram": JobState.PENDING,
             "start": SubjobStartType.LOOSE_BARRIER}])
    store = CoordinationStore.from_settings(settings)
    store.create_job(f"coalloc-{job}", [SubjobSpec("left", 2), SubjobSpec("right", 1)])
    store.enter(f"coalloc-{job}", 0, 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.to_env())
    yield env, job
    store.purge(f"coalloc-{job}")
    store.close()


def run(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(main, list(args), env=env, terminal_width=200)
    assert result.exit_code == 0, (result.output, result.stderr)
    return result.output


def test_showq_json_and_table_show_the_coallocation_and_its_subjobs(coalloc_env):
    env, job = coalloc_env
    data = json.loads(run(env, "showq", "--json"))
    assert data["summary"]["coallocated_jobs"] == 1
    (co,) = data["coallocations"]
    assert co["contact"] == f"duroc://coalloc/{job}" and co["barrier"] == "waiting"
    assert [(s["label"], s["rm"], s["entered"], s["size"]) for s in co["subjobs"]] == [
        ("left", "rmA", 1, 2), ("right", "rmB", 0, 1)]
    text = run(env, "showq")
    assert "COALLOCATED JOBS" in text and f"duroc://coalloc/{job}" in text
    assert "1/2" in text and "0/1" in text and "loose-barrier" in text


def test_checkjob_by_contact_and_by_id_with_c(coalloc_env):
    env, job = coalloc_env
    by_contact = json.loads(run(env, "checkjob", f"duroc://coalloc/{job}", "--json"))
    by_id = json.loads(run(env, "checkjob", "-c", str(job), "--json"))
    assert by_contact == by_id
    assert by_id["id"] == job and by_id["state"] == "PENDING" and by_id["owner"] == "ann"
    assert [s["entered"] for s in by_id["subjobs"]] == [1, 0]
    text = run(env, "checkjob", "-c", str(job))
    assert f"coallocated job {job}" in text and "waiting" in text and "1/2" in text


def test_checkjob_of_an_unknown_coallocation_is_one_line(coalloc_env):
    env, _ = coalloc_env
    result = CliRunner().invoke(main, ["checkjob", "-c", "999"], env=env)
    assert result.exit_code == 1 and "no coallocated job 999" in result.output + result.stderr
    assert "Traceback" not in result.output


def test_ended_coallocation_leaves_showq(settings, coalloc_env):
    env, _ = coalloc_env
    factory = session_factory(get_engine(settings.database_url))
    with factory() as session:
        add_coalloc(session, [{"label": "x", "rm": "rmA"}], state=JobState.DONE,
                    barrier=BarrierState.RELEASED)
    assert json.loads(run(env, "showq", "--json"))["summary"]["coallocated_jobs"] == 1
