"""Result handles of a client app are released before its Redis stops: no noise at exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.results import release_results

SCRIPT = textwrap.dedent('''
    import sys
    from pathlib import Path
    from grid_tasks.celery_app import create_app
    from grid_tasks.client import Grid
    from grid_tasks.embedded.redis_server import RedisServer
    from grid_tasks.settings import Settings

    server = RedisServer(Path(sys.argv[1]))
    server.start()
    settings = Settings(broker_url=server.url(1), result_backend=server.url(2),
                        redis_url=server.url(3), state_dir=Path(sys.argv[1]))
    grid = Grid(settings)
    kept = [grid.app.send_task("grid_tasks.scheduling.tasks.ping") for _ in range(3)]
    grid.close()      # releases the three subscriptions while the Redis runs
    server.stop()     # then the handles die at exit, with nothing left to undo
    print("subscribed after close:", len(grid.app.backend.result_consumer.subscribed_to))
''')


def test_grid_close_leaves_no_subscription_for_exit(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "redis")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "subscribed after close: 0" in proc.stdout
    assert "Traceback" not in proc.stderr and "Retry limit" not in proc.stderr, proc.stderr


def test_release_after_the_redis_stopped_forgets_quickly(tmp_path):
    from grid_tasks.celery_app import create_app
    from grid_tasks.settings import Settings

    server = RedisServer(tmp_path / "redis")
    server.start()
    app = create_app(Settings(broker_url=server.url(1), result_backend=server.url(2),
                              redis_url=server.url(3), state_dir=tmp_path))
    try:
        handles = [app.send_task("grid_tasks.scheduling.tasks.ping") for _ in range(2)]
        assert len(app.backend.result_consumer.subscribed_to) == 2
    finally:
        server.stop()
    assert release_results(app) == 2  # no retry loop against the stopped server
    assert not app.backend.result_consumer.subscribed_to
    del handles
    app.close()


def test_an_app_that_never_made_its_backend_holds_nothing(tmp_path):
    from grid_tasks.celery_app import create_app
    from grid_tasks.settings import Settings

    app = create_app(Settings(state_dir=tmp_path))
    assert release_results(app) == 0
    assert app._backend is None  # not made just to look
    app.close()
