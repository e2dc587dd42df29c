"""Real bugs the fault cases found: pinned as strict xfails until fixed, then kept as
regression tests (a launch during a database outage used to strand its job)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from grid_tasks.faults import FaultGrid, until
from grid_tasks.faults.postgres import PostgresUnavailable, PrivatePostgres
from grid_tasks.gram.submission import gram_status
from grid_tasks.rsl import lower
from grid_tasks.states import MauiJobState


@pytest.mark.slow  # ~40 s: a grid of its own on a private PostgreSQL server
def test_launch_during_a_database_outage_is_recovered(tmp_path: Path) -> None:
    try:
        server = PrivatePostgres().start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        with FaultGrid(tmp_path / "grid", database_url=server.url) as fg:
            # the client's app (its key, its broker connection) made before node3 stops:
            # node3 must still be alive (3 s heartbeat TTL) when the job is placed
            fg.grid.app.connection_for_write().ensure_connection(max_retries=3)
            fg.grid.redis.ping()
            lower("&(executable=/bin/true)")  # and its RSL parser, built on first use
            os.killpg(fg.nodes["node3"].pid, signal.SIGSTOP)  # hold the launch in flight
            job = fg.grid.submit("&(executable=/bin/sleep)(arguments=0.5)(count=4)", rm="rmB")
            until(lambda: gram_status(fg.grid.sessions, job.id).maui_state
                  is MauiJobState.STARTING, 10, "the launch to be sent")
            server.stop()
            os.killpg(fg.nodes["node3"].pid, signal.SIGCONT)  # the JM starts: no database
            time.sleep(2.0)
            server.start()
            # launch timeout is 5 s: an unconfirmed launch must be rolled back and rerun
            assert job.wait(timeout=30).terminal
    finally:
        server.close()
