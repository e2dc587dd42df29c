"""Every production Redis client goes through the one builder, so TLS and ACL apply.

A static check keeps raw ``redis.Redis(...)`` / ``Redis.from_url(...)`` out of the
package (except the builder itself and the documented exceptions), and each
builder that used to bypass it is exercised against a TLS-only redis-server with
an ACL user: the scheduler modules' context, the operator commands' heartbeat
registry, ``grid-tasks nodes``/``tokens``, the metrics sources and the cached
scheduling client.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from grid_tasks.security.config import RedisTLS
from tests.security.redis_helpers import USER
from tests.security.test_store_tls import _over_tls, _settings, tls_redis  # noqa: F401

PACKAGE = Path(__file__).resolve().parents[2] / "grid_tasks"
RAW_CLIENT = re.compile(r"\b(?:redis(?:_lib)?\.)?(?:Strict)?Redis(?:\.from_url)?\(|"
                        r"\bredis(?:_lib)?\.from_url\(")
#: files allowed to build raw clients, and why
ALLOWED = {
    "security/connections.py": "the builder itself",
    "embedded/redis_server.py": "readiness ping of the private plain-TCP server it started",
}


def test_no_raw_redis_clients_outside_the_builder() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if RAW_CLIENT.search(code) and "def " not in code:
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == [], "build Redis clients with security.connections.redis_client:\n" \
        + "\n".join(offenders)


def _check(client: redis.Redis) -> None:
    try:
        assert _over_tls(client), "a plain-TCP client for a rediss:// URL"
        assert client.acl_whoami() == USER
    finally:
        client.close()


def test_scheduler_module_context_uses_tls(tls_redis, settings) -> None:  # noqa: F811
    from grid_tasks.schedmods.context import ModuleContext

    ctx = ModuleContext.from_settings(_settings(tls_redis, settings))
    _check(ctx.redis)


def test_operator_registry_uses_tls(tls_redis, settings) -> None:  # noqa: F811
    from grid_tasks.ops.shell import OpsShell

    registry = OpsShell(_settings(tls_redis, settings)).registry()
    assert registry is not None, "the TLS Redis was not reachable through the ops shell"
    _check(registry.client)


def test_cli_stores_use_tls_from_resolved_settings(tls_redis, settings,  # noqa: F811
                                                   monkeypatch) -> None:
    from grid_tasks.cli import nodes as nodes_cli
    from grid_tasks.cli.tokens import _store

    s = _settings(tls_redis, settings)
    for key, value in s.to_env().items():
        monkeypatch.setenv(key, value)
    _check(_store(None, "tls-test").client)
    seen = []
    real = nodes_cli.NodeRegistry.from_settings

    def spy(arg):
        seen.append(arg.redis_tls)
        return real(arg)

    monkeypatch.setattr(nodes_cli.NodeRegistry, "from_settings", staticmethod(spy))
    assert nodes_cli.collect(s.replace(topology_file=Path("/nonexistent.toml"))) == []
    assert seen == [s.redis_tls]


def test_metrics_and_worker_clients_use_tls(tls_redis, settings) -> None:  # noqa: F811
    from grid_tasks.metrics.collect import Sources
    from grid_tasks.services import Services
    from grid_tasks.topology import load_topology

    s = _settings(tls_redis, settings)
    sources = Sources(s, load_topology(s.topology_file))
    try:
        assert _over_tls(sources.redis(s.redis_url))
        assert sources.redis(s.redis_url).acl_whoami() == USER
    finally:
        sources.close()
    client = Services(s).redis  # what every task of a worker uses
    assert _over_tls(client) and client.acl_whoami() == USER


def test_plain_urls_stay_plain(settings) -> None:
    from grid_tasks.schedmods.context import ModuleContext

    ctx = ModuleContext.from_settings(settings.replace(redis_tls=RedisTLS()))
    try:
        assert not _over_tls(ctx.redis) and ctx.redis.ping()
    finally:
        ctx.redis.close()


@pytest.mark.parametrize("line", ["client = redis.Redis(host='x')",
                                  "c = redis_lib.Redis.from_url(url)",
                                  "c = Redis.from_url(url, db=1)",
                                  "c = redis.from_url(url)"])
def test_the_static_check_sees_raw_clients(line: str) -> None:
    assert RAW_CLIENT.search(line)


# -- the same builders without a TLS server (the CI's redis-server may lack TLS) ----------

def _offline(settings, tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a connection is made\n")
    return settings.replace(redis_url="rediss://gt:secret@127.0.0.1:1/4",
                            redis_tls=RedisTLS(ca=ca)), str(ca)


def _tls_options(client: redis.Redis, ca: str) -> None:
    pool = client.connection_pool
    try:
        assert issubclass(pool.connection_class, redis.SSLConnection)
        assert pool.connection_kwargs["ssl_ca_certs"] == ca
        assert pool.connection_kwargs["username"] == "gt"
    finally:
        client.close()


def test_builders_pass_the_tls_options(settings, tmp_path: Path, monkeypatch) -> None:
    from grid_tasks.cli.tokens import _store
    from grid_tasks.metrics.collect import Sources
    from grid_tasks.node.registry import NodeRegistry
    from grid_tasks.schedmods.context import ModuleContext
    from grid_tasks.services import Services
    from grid_tasks.topology import load_topology

    s, ca = _offline(settings, tmp_path)
    _tls_options(ModuleContext.from_settings(s).redis, ca)
    _tls_options(Sources(s, load_topology(s.topology_file)).redis(s.redis_url), ca)
    _tls_options(Services(s).redis, ca)
    _tls_options(NodeRegistry.from_settings(s).client, ca)
    for key, value in s.to_env().items():
        monkeypatch.setenv(key, value)
    _tls_options(_store(None, "tls-test").client, ca)


def test_ops_shell_registry_is_built_from_its_settings(settings, tmp_path: Path,
                                                       monkeypatch) -> None:
    from grid_tasks.node.registry import NodeRegistry
    from grid_tasks.ops.shell import OpsShell

    s, ca = _offline(settings, tmp_path)
    built = []
    real = NodeRegistry.from_settings

    def spy(arg):
        registry = real(arg)
        built.append(registry.client)
        return registry

    monkeypatch.setattr(NodeRegistry, "from_settings", staticmethod(spy))
    assert OpsShell(s).registry() is None  # nothing listens on port 1
    assert len(built) == 1
    _tls_options(built[0], ca)
