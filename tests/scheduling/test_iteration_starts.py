"""The live iteration's start write (Core, version-guarded): what a started job records."""

from __future__ import annotations

from grid_tasks import db
from grid_tasks.gram import keys
from grid_tasks.scheduling.iteration import run_iteration
from grid_tasks.states import JobState, MauiJobState
from tests.scheduling.test_modules import _grid, _submit


def test_started_jobs_are_starting_with_allocation_token_and_start_time(
        tmp_path, settings, celery_app_factory):
    app, client, registry, sessions, settings = _grid(tmp_path, settings, celery_app_factory,
                                                      "")
    first, second, third = (_submit(sessions) for _ in range(3))  # 2 processors each, 4 in all
    with db.session_scope(sessions) as s:
        versions = {j: db.repository.get_job(s, j).version for j in (first, second, third)}
    report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry)
    assert report.started == [first, second]
    tokens = set()
    with db.session_scope(sessions) as s:
        for job in (first, second):
            row = db.repository.get_job(s, job)
            assert row.state is JobState.PENDING and row.maui_state is MauiJobState.STARTING
            assert sum(row.nodes_allocated.values()) == 2 and row.start_time is not None
            assert row.version == versions[job] + 1
            assert client.get(keys.token_key(job)).decode() == row.launch_token
            tokens.add(row.launch_token)
        waiting = db.repository.get_job(s, third)
        assert waiting.maui_state is MauiJobState.IDLE and waiting.launch_token is None
        assert waiting.version == versions[third]
    assert len(tokens) == 2  # a fresh token per job
    client.close()
    db.dispose_engines()
