"""`grid-tasks worker --beat` embeds the HA beat (Redis lease), never a plain beat."""

from __future__ import annotations

from grid_tasks.cli.worker import configured_app, worker_argv
from grid_tasks.ha.config import SCHEDULER_CLASS


def test_worker_beat_is_the_ha_scheduler(settings, monkeypatch):
    monkeypatch.setenv("GRID_TASKS_BEAT_LEASE", "4")
    argv = worker_argv(rm=None, node=None, scheduler=True, gatekeepers=False, beat=True,
                       settings=settings, pool="threads", concurrency=None, loglevel="INFO")
    assert argv[argv.index("--scheduler") + 1] == SCHEDULER_CLASS
    assert "-S" not in argv  # `celery worker -S` is --statedb, not the beat scheduler
    app = configured_app(settings, beat=True)
    try:
        assert app.conf.beat_scheduler == SCHEDULER_CLASS
        assert app.conf.redbeat_redis_url == settings.redis_url
        assert app.conf.redbeat_lock_timeout == 4.0
        assert app.conf.grid_beat_options.identity  # each embedded beat is told apart
    finally:
        app.close()
    plain = configured_app(settings, beat=False)
    try:
        assert plain.conf.beat_scheduler != SCHEDULER_CLASS
    finally:
        plain.close()
