"""How a coordination store connects: TLS from settings or environment, its own URL."""

from __future__ import annotations

import pytest
import redis

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import StoreUnavailableError
from grid_tasks.errors import ConfigError
from grid_tasks.security.config import CertReqs, RedisTLS
from grid_tasks.settings import Settings

# No server is contacted here: redis-py connects lazily, on the first command.


def _kwargs(store: CoordinationStore) -> dict:
    return store.client.connection_pool.connection_kwargs


def test_rediss_url_takes_tls_options_from_settings(tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    settings = Settings(redis_url="rediss://127.0.0.1:1/3",
                        redis_tls=RedisTLS(ca=ca, cert_reqs=CertReqs.OPTIONAL))
    store = CoordinationStore.from_settings(settings)
    assert issubclass(store.client.connection_pool.connection_class, redis.SSLConnection)
    assert _kwargs(store)["ssl_ca_certs"] == str(ca)
    assert store._own_url() == "rediss://127.0.0.1:1/3"


def test_rediss_url_takes_tls_options_from_the_environment(tmp_path) -> None:
    env = RedisTLS(ca=tmp_path / "env-ca.pem").to_env()
    store = CoordinationStore.from_url("rediss://127.0.0.1:1/2", environ=env)
    assert _kwargs(store)["ssl_ca_certs"] == str(tmp_path / "env-ca.pem")
    with pytest.raises(ConfigError, match="GRID_TASKS_REDIS_TLS_CERT_REQS"):
        CoordinationStore.from_url("rediss://127.0.0.1:1/2",
                                   environ={"GRID_TASKS_REDIS_TLS_CERT_REQS": "sometimes"})


def test_plain_urls_stay_plain_and_bad_urls_are_typed() -> None:
    store = CoordinationStore.from_url("redis://u:p@127.0.0.1:1/5",
                                       environ={"GRID_TASKS_REDIS_TLS_CERT_REQS": "sometimes"})
    assert not issubclass(store.client.connection_pool.connection_class, redis.SSLConnection)
    assert store._own_url() == "redis://127.0.0.1:1/5"
    with pytest.raises(StoreUnavailableError, match="bad coordination store URL"):
        CoordinationStore.from_url("http://127.0.0.1:1/5")
