"""A Celery app for the signing tests' worker subprocesses (not a test module).

Run as ``celery -A tests.security.signing_app worker``; settings (including
``GRID_TASKS_SIGNING*``) come from the environment.
"""

from __future__ import annotations

from pathlib import Path

from grid_tasks.celery_app import create_app
from grid_tasks.settings import Settings

app = create_app(Settings.from_env(), main="signing_test")
TOUCH = "tests.security.signing_app.touch"


@app.task(name=TOUCH, shared=False)  # not added to the other apps of a test run
def touch(path: str, text: str) -> str:
    """The observable side effect: write ``text`` into ``path``."""
    Path(path).write_text(text)
    return text
