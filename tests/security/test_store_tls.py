"""The Redis stores (node registry, token store, DUROC store) on a TLS-only redis-server.

Each store is built the ways callers build it: from explicit settings, and from a bare
``rediss://`` URL with the ``GRID_TASKS_REDIS_TLS_*`` variables in the environment.
The server has no plain port, so every command below really went over TLS.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import StoreUnavailableError
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.errors import ConfigError, ConnectivityError
from grid_tasks.legion.tokens import Claim, RefusalReason, TokenRefused, TokenStore
from grid_tasks.node.registry import NodeRegistry, connect_redis
from grid_tasks.security.config import RedisTLS
from grid_tasks.states import NodeState
from tests.security.redis_helpers import USER, AclRedis, tls_only_redis


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory) -> Iterator[AclRedis]:
    """One TLS-only redis-server (ACL user, self-signed certificate) for this module."""
    with tls_only_redis(tmp_path_factory.mktemp("store-tls")) as server:
        yield server


def _tls_env(server: AclRedis) -> dict[str, str]:
    return RedisTLS(ca=server.tls.server_cert).to_env()


def _settings(server: AclRedis, settings, db: int = 4):
    return settings.replace(redis_url=server.url(db), redis_tls=RedisTLS(ca=server.tls.server_cert))


def _over_tls(client: redis.Redis) -> bool:
    return issubclass(client.connection_pool.connection_class, redis.SSLConnection)


def test_connect_redis_takes_tls_from_settings_or_environment(tls_redis, settings) -> None:
    url = tls_redis.url(5)
    for client in (connect_redis(url, settings=_settings(tls_redis, settings)),
                   connect_redis(url, environ=_tls_env(tls_redis))):
        try:
            assert _over_tls(client) and client.acl_whoami() == USER
        finally:
            client.close()
    # Plain URLs ignore the TLS variables, even malformed ones.
    plain = connect_redis("redis://127.0.0.1:1/0",
                          environ={"GRID_TASKS_REDIS_TLS_CERT_REQS": "bogus"})
    assert not _over_tls(plain)
    with pytest.raises(ConfigError, match="REDIS_TLS_CERT_REQS"):
        connect_redis(url, environ={"GRID_TASKS_REDIS_TLS_CERT_REQS": "bogus"})


def test_node_registry_over_tls(tls_redis, settings) -> None:
    s = _settings(tls_redis, settings)
    writer = NodeRegistry.from_settings(s)
    reader = NodeRegistry.from_url(tls_redis.url(4), 10.0, environ=_tls_env(tls_redis))
    try:
        assert _over_tls(writer.client) and _over_tls(reader.client)
        writer.register("rmT", "nodeT", {"procs": 3}, {"hostname": "h"}, "configured", now=1.0)
        status = reader.status("rmT", "nodeT")
        assert (status.state, status.procs, status.host) == (NodeState.IDLE, 3, "h")
        writer.mark_down("rmT", "nodeT", now=2.0)
        assert reader.status("rmT", "nodeT").state is NodeState.DOWN
    finally:
        writer.client.close()
        reader.client.close()


def test_token_store_over_tls(tls_redis, settings) -> None:
    a = TokenStore.from_url(tls_redis.url(6), settings=_settings(tls_redis, settings),
                            prefix="tls:tok")
    b = TokenStore.from_url(tls_redis.url(6), environ=_tls_env(tls_redis), prefix="tls:tok")
    try:
        assert _over_tls(a.client) and _over_tls(b.client)
        a.set_capacities({"rmT/n1": 2})
        (token,) = a.take([Claim("rmT/n1", 100.0, 200.0, 2)], "broker-a")
        with pytest.raises(TokenRefused) as info:  # the other broker sees the claim
            b.take([Claim("rmT/n1", 150.0, 250.0, 1)], "broker-b")
        assert info.value.reason is RefusalReason.FULL
        assert b.release([token.id]) == 1
        assert b.take([Claim("rmT/n1", 150.0, 250.0, 1)], "broker-b")
    finally:
        a.purge()
        a.client.close()
        b.client.close()


def test_duroc_store_and_runtime_url_over_tls(tls_redis, settings) -> None:
    control = CoordinationStore.from_settings(_settings(tls_redis, settings), slice_s=0.5)
    job = "tlsjob"
    try:
        assert _over_tls(control.client)
        control.create_job(job, [SubjobSpec("a", 1)])
        url = control.grant_access(job)
        assert url.startswith("rediss://")  # the server has no plain port
        runtime = CoordinationStore.from_url(url, environ=_tls_env(tls_redis), slice_s=0.5)
        try:
            waiter = threading.Thread(target=runtime.wait_release, args=(job, 0, 0, 10.0))
            waiter.start()
            control.await_entries(job, timeout=10)
            control.release(job)
            waiter.join(10)
            assert not waiter.is_alive()
            assert control.snapshot(job).subjobs[0].entered == 1
        finally:
            runtime.close()
    finally:
        control.purge(job)
        control.close()


def test_without_the_ca_or_over_plain_tcp_nothing_gets_through(tls_redis, settings) -> None:
    no_ca = settings.replace(redis_url=tls_redis.url(4), redis_tls=RedisTLS())
    with pytest.raises(ConnectivityError, match="certificate verify failed"):
        NodeRegistry.from_settings(no_ca).status("rmT", "nodeT")
    with pytest.raises(ConnectivityError, match="certificate verify failed"):
        TokenStore.from_url(tls_redis.url(6), settings=no_ca).capacities()
    with pytest.raises(StoreUnavailableError):
        CoordinationStore.from_url(tls_redis.url(4), environ={}).snapshot("nope")
    plain = tls_redis.url(4).replace("rediss://", "redis://")
    with pytest.raises(ConnectivityError):
        NodeRegistry.from_url(plain, 10.0, environ=_tls_env(tls_redis)).status("rmT", "nodeT")


def test_every_store_constructor_applies_the_tls_options_without_a_server(tmp_path,
                                                                          settings) -> None:
    """redis-py connects lazily: the options are visible before any command."""
    tls = RedisTLS(ca=tmp_path / "ca.pem", cert=tmp_path / "c.pem", key=tmp_path / "c.key")
    s = settings.replace(redis_url="rediss://u:pw@127.0.0.1:1/7", redis_tls=tls)
    env = tls.to_env()
    url = s.redis_url
    stores = [NodeRegistry.from_settings(s), NodeRegistry.from_url(url, 5.0, environ=env),
              TokenStore.from_url(url, settings=s), TokenStore.from_url(url, environ=env),
              CoordinationStore.from_settings(s), CoordinationStore.from_url(url, environ=env)]
    for store in stores:
        kw = store.client.connection_pool.connection_kwargs
        assert _over_tls(store.client), type(store).__name__
        assert (kw["ssl_ca_certs"], kw["ssl_certfile"], kw["ssl_keyfile"]) == (
            str(tls.ca), str(tls.cert), str(tls.key)), type(store).__name__
        assert (kw["username"], kw["password"]) == ("u", "pw")
        store.client.close()


def test_a_missing_tls_file_is_named(tmp_path, settings) -> None:
    # Any listening server will do: redis-py loads the CA file after the TCP connect.
    url = settings.redis_url.replace("redis://", "rediss://", 1)
    missing = tmp_path / "nowhere" / "ca.pem"
    s = settings.replace(redis_url=url, redis_tls=RedisTLS(ca=missing))
    for call in (lambda: NodeRegistry.from_settings(s).status("rmT", "nodeT"),
                 lambda: TokenStore.from_url(url, settings=s).capacities()):
        with pytest.raises(ConnectivityError) as info:
            call()
        assert f"TLS file(s) not found: ca={missing}" in str(info.value)
        assert "\n" not in str(info.value)
