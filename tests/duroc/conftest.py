"""A coordination store on the private test Redis (see tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.settings import Settings

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
