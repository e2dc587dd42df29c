"""Imported into a worker under test (``celery worker -I tests.iteration_marks``): each
iteration or node watch it runs leaves a file ``<rm>.<pid>.<task id>`` in
``$ITERATION_MARKS_DIR``, so a test sees which process ran which RM's iterations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery.signals import task_prerun

from grid_tasks.queues import ITERATION_TASKS


def _mark(sender: Any = None, task_id: str = "", kwargs: Any = None, **_: Any) -> None:
    folder = os.environ.get("ITERATION_MARKS_DIR")
    if folder and getattr(sender, "name", None) in ITERATION_TASKS:
        (Path(folder) / f"{(kwargs or {}).get('rm')}.{os.getpid()}.{task_id}").touch()


task_prerun.connect(_mark, weak=False, dispatch_uid="tests.iteration_marks")
