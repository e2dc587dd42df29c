"""Fixtures for the broker tests: a token store on the session's private Redis."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import redis

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.legion.tokens import TokenStore

TOKENS_DB = 5  # a database of the private server that no other fixture flushes mid-test


@pytest.fixture
def store(redis_server: RedisServer) -> Iterator[TokenStore]:
    """A TokenStore under a fresh key prefix (deleted afterwards), TTL 5 s."""
    prefix = f"test:{secrets.token_hex(4)}"
    client = redis.Redis.from_url(redis_server.url(TOKENS_DB))
    yield TokenStore(client, prefix=prefix, ttl=5.0)
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    client.close()
