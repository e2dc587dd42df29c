"""Per-job Redis ACL users: a job's credentials reach its own keys and nothing else."""

from __future__ import annotations

import pytest
import redis

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import (
    AccessDeniedError, JobExistsError, StoreUnavailableError,
)
from grid_tasks.duroc.store_models import SubjobSpec


@pytest.fixture
def two_jobs(store: CoordinationStore) -> tuple[CoordinationStore, CoordinationStore]:
    """Jobs A and B; returns stores using A's and B's runtime credentials."""
    store.create_job("A", [SubjobSpec("a", 1)])
    store.create_job("B", [SubjobSpec("b", 1)])
    runtime_a = CoordinationStore.from_url(store.grant_access("A"), slice_s=0.5)
    runtime_b = CoordinationStore.from_url(store.grant_access("B"), slice_s=0.5)
    yield runtime_a, runtime_b
    runtime_a.close()
    runtime_b.close()


def test_runtime_url_works_for_its_own_job(
        store: CoordinationStore, two_jobs: tuple[CoordinationStore, CoordinationStore]) -> None:
    runtime_a, _ = two_jobs
    kw = runtime_a.client.connection_pool.connection_kwargs
    assert kw["username"] == "grid_tasks-job-A" and kw["db"] == 3
    store.enter("A", 0, 0)
    store.release("A")
    waiter_structure = runtime_a.wait_release("A", 0, 0, timeout=2)
    assert waiter_structure is not None and waiter_structure.subjobs[0].label == "a"
    queue = runtime_a.keys("A").intra_queue(0, 0, "t")
    runtime_a.send("A", queue, 0, b"mine")
    assert runtime_a.receive("A", queue, "t", timeout=1).data == b"mine"
    assert runtime_a.snapshot("A").subjobs[0].entered == 1


def test_job_a_cannot_touch_job_b(
        store: CoordinationStore, two_jobs: tuple[CoordinationStore, CoordinationStore]) -> None:
    runtime_a, _ = two_jobs
    b = store.keys("B")
    with pytest.raises(AccessDeniedError):
        runtime_a.enter("B", 0, 0)
    with pytest.raises(AccessDeniedError):
        runtime_a.send("B", b.intra_queue(0, 0, "t"), 0, b"intrusion")
    with pytest.raises(AccessDeniedError):
        runtime_a.receive("B", b.intra_queue(0, 0, "t"), "t", timeout=0.2)
    with pytest.raises(AccessDeniedError):
        runtime_a.snapshot("B")
    with pytest.raises(AccessDeniedError):  # a queue of B named inside A's own call
        runtime_a.send("A", b.intra_queue(0, 0, "t"), 0, b"smuggled")
    client = runtime_a.client
    for call in (lambda: client.hgetall(b.meta), lambda: client.hset(b.meta, "state", "x"),
                 lambda: client.delete(b.meta), lambda: client.xread({b.events: "0-0"})):
        with pytest.raises(redis.exceptions.NoPermissionError):
            call()
    assert store.snapshot("B").subjobs[0].entered == 0
    assert store.client.llen(b.intra_queue(0, 0, "t")) == 0


def test_job_credentials_cannot_list_or_administer(
        two_jobs: tuple[CoordinationStore, CoordinationStore]) -> None:
    client = two_jobs[0].client
    for call in (lambda: client.keys("*"), lambda: list(client.scan_iter()),
                 lambda: client.flushdb(), lambda: client.config_get("*"),
                 lambda: client.acl_list(), lambda: client.eval("return 1", 0),
                 lambda: client.script_load("return 1"), lambda: client.randomkey(),
                 lambda: client.set("grid_tasks:duroc:A:stray", b"x")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            call()


def test_revoked_credentials_stop_working(
        store: CoordinationStore, two_jobs: tuple[CoordinationStore, CoordinationStore]) -> None:
    runtime_a, _ = two_jobs
    assert store.revoke_access("A")
    runtime_a.client.connection_pool.disconnect()
    with pytest.raises(StoreUnavailableError):
        runtime_a.snapshot("A")


def test_empty_script_cache_is_reported_and_recoverable(
        store: CoordinationStore, two_jobs: tuple[CoordinationStore, CoordinationStore]) -> None:
    runtime_a, _ = two_jobs
    store.client.script_flush()
    with pytest.raises(StoreUnavailableError, match="scripts are not loaded"):
        runtime_a.enter("A", 0, 0)
    store.load_scripts()
    assert runtime_a.enter("A", 0, 0)["state"] == "open"


def test_job_creation_reloads_an_emptied_script_cache(store: CoordinationStore) -> None:
    """CREATE runs by EVALSHA alone; when the server lost its scripts (restart, SCRIPT
    FLUSH) it loads all of them, so the job's EVALSHA-only user finds ENTER too."""
    store.client.script_flush()
    store.create_job("C", [SubjobSpec("c", 1)])
    shas = [s.sha for s in store._scripts.values()]
    assert all(store.client.script_exists(*shas))
    runtime = CoordinationStore.from_url(store.grant_access("C", scripts_loaded=True))
    try:
        assert runtime.enter("C", 0, 0)["state"] == "open"
    finally:
        runtime.close()
    with pytest.raises(JobExistsError):  # a second CREATE is still refused, typed
        store.create_job("C", [SubjobSpec("c", 1)])


def test_granted_url_is_remembered_in_the_same_round_trip(store: CoordinationStore) -> None:
    store.create_job("D", [SubjobSpec("d", 1)])
    url = store.grant_access("D", scripts_loaded=True, remember=("test:url:D", 120))
    assert store.client.get("test:url:D").decode() == url
    assert 0 < store.client.ttl("test:url:D") <= 120
    runtime = CoordinationStore.from_url(url)
    try:
        assert runtime.snapshot("D").subjobs[0].label == "d"
    finally:
        runtime.close()


@pytest.mark.parametrize("url,expected", [
    ("redis://:secret@10.0.0.5:6380/3", "redis://grid_tasks-job-A:pw%2F1@10.0.0.5:6380/3"),
    ("rediss://old:x@redis.example/1", "rediss://grid_tasks-job-A:pw%2F1@redis.example/1"),
    ("unix:///run/redis.sock?db=2&password=x",
     "unix:///run/redis.sock?db=2&username=grid_tasks-job-A&password=pw%2F1"),
])
def test_runtime_url_carries_only_the_job_credentials(url: str, expected: str) -> None:
    from grid_tasks.duroc.store_access import _with_credentials

    assert _with_credentials(url, "grid_tasks-job-A", "pw/1") == expected


def test_tls_runtime_urls_get_the_tls_options(tmp_path: object) -> None:
    ca = tmp_path / "ca.pem"  # type: ignore[operator]
    ca.write_text("not read until a connection is made")
    env = {"GRID_TASKS_REDIS_TLS_CA": str(ca)}
    tls = CoordinationStore.from_url("rediss://u:p@redis.example:6380/3", environ=env)
    assert tls.client.connection_pool.connection_kwargs["ssl_ca_certs"] == str(ca)
    plain = CoordinationStore.from_url("redis://u:p@redis.example:6380/3", environ=env)
    assert "ssl_ca_certs" not in plain.client.connection_pool.connection_kwargs
