"""Job processes launched on a coordination store (``store``: tests/duroc/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from grid_tasks.runtime.env import runtime_environment
from tests.duroc.conftest import store  # noqa: F401 - the same store fixture

PROGRAM = Path(__file__).with_name("job_program.py")


@dataclass
class Proc:
    """One launched job process."""

    subjob: int
    rank: int
    popen: subprocess.Popen[bytes]

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        out, err = self.popen.communicate(timeout=timeout)
        return self.popen.returncode, out.decode(), err.decode()


@pytest.fixture
def launch(grid_env: dict[str, str]) -> Iterator[Callable[..., list[Proc]]]:
    """``launch(url, job, subjob, label, size, argv=None)``: a subjob's processes, as the
    job manager starts them (rank/size set per process); all killed at teardown."""
    started: list[Proc] = []

    def start(url: str, job: str, subjob: int, label: str, size: int,
              argv: Sequence[str] | None = None, **extra: str) -> list[Proc]:
        procs = []
        for rank in range(size):
            env = {**grid_env, **runtime_environment(url, job, subjob, label),
                   "GRID_TASKS_RANK": str(rank), "GRID_TASKS_SIZE": str(size), **extra}
            command = list(argv) if argv else [sys.executable, str(PROGRAM), "full"]
            popen = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
            procs.append(Proc(subjob, rank, popen))
        started.extend(procs)
        return procs

    yield start
    for proc in started:
        if proc.popen.poll() is None:
            proc.popen.kill()
        proc.popen.communicate()
