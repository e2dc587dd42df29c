"""A coordination store on the private test Redis (see tests/conftest.py), and a live
DUROC grid: the GRAM test grid plus real gatekeeper processes, one per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.settings import Settings
from tests.duroc.live import duroc_grid_of

JOB_USER_PREFIX = "grid_tasks-job-"


@pytest.fixture
def store(settings: Settings) -> Iterator[CoordinationStore]:
    """A store on the flushed private Redis; short wait slices so vanishing is seen fast."""
    coordination = CoordinationStore.from_url(settings.redis_url, slice_s=0.5)
    yield coordination
    # ACL users are server-wide: do not let one test's users reach the next
    for user in coordination.client.acl_users():
        if user.startswith(JOB_USER_PREFIX):
            coordination.client.acl_deluser(user)
    coordination.close()


@pytest.fixture(scope="module")
def duroc_grid(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from duroc_grid_of(redis_server, tmp_path_factory)
