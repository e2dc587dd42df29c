"""Redis with an ACL user (password) and TLS, for broker, result backend and token store."""

from __future__ import annotations

from collections.abc import Iterator
import pytest

from grid_tasks.celery_app import check_connectivity
from grid_tasks.errors import ConnectivityError
from grid_tasks.security.config import CertReqs, RedisTLS
from grid_tasks.security.connections import check_redis, redis_client
from tests.security.redis_helpers import PASSWORD, USER, AclRedis, TLSFiles, tls_only_redis, tls_supported


@pytest.fixture
def acl_redis(tmp_path) -> Iterator[AclRedis]:
    server = AclRedis(tmp_path / "acl").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tls_ok(tmp_path_factory) -> bool:
    return tls_supported(tmp_path_factory.mktemp("tls-probe"))


def _on(server: AclRedis, settings, tls: RedisTLS | None = None, **urls: str):
    s = settings.replace(broker_url=server.url(1), result_backend=server.url(2),
                         redis_url=server.url(3), redis_tls=tls or RedisTLS())
    return s.replace(**urls) if urls else s


def _round_trip(settings, celery_app_factory, in_process_worker) -> None:
    """A real task through broker and result backend of ``settings``."""
    app = celery_app_factory(settings)

    @app.task(name="tests.security.test_redis_auth.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    in_process_worker(app)
    assert add.delay(20, 22).get(timeout=30) == 42


def test_acl_user_reaches_broker_backend_and_token_store(
        acl_redis, settings, celery_app_factory, in_process_worker):
    s = _on(acl_redis, settings)
    check_connectivity(s, timeout=2)
    client = redis_client(s)
    try:
        client.set("grid:probe", "1")
        assert client.acl_whoami() == USER and client.get("grid:probe") == b"1"
    finally:
        client.close()
    _round_trip(s, celery_app_factory, in_process_worker)


@pytest.mark.parametrize("user, password, words", [
    (USER, "wrong", f"refused the credentials of ACL user '{USER}'"),
    ("mallory", PASSWORD, "refused the credentials of ACL user 'mallory'"),
    ("", "wrong", "(default user)"),
])
def test_wrong_credentials_are_one_line_connectivity_errors(acl_redis, settings, user,
                                                           password, words):
    url = acl_redis.url(3, user, password)
    with pytest.raises(ConnectivityError) as info:
        check_redis(settings, url, timeout=2)
    text = str(info.value)
    assert words in text and "\n" not in text
    assert password not in text.replace("***", "")  # the password is masked
    with pytest.raises(ConnectivityError) as info:
        check_connectivity(_on(acl_redis, settings, redis_url=url), timeout=2)
    assert "\n" not in str(info.value)


def test_no_credentials_at_all_is_refused(acl_redis, settings):
    with pytest.raises(ConnectivityError, match="requires other credentials|refused"):
        check_redis(settings, f"redis://127.0.0.1:{acl_redis.port}/3", timeout=2)


@pytest.fixture
def tls_redis(tmp_path, tls_ok) -> Iterator[AclRedis]:
    """A TLS-only redis-server with the ACL user (stopped after the workers using it)."""
    if not tls_ok:
        pytest.skip("this redis-server has no TLS support (config mapping tested elsewhere)")
    with tls_only_redis(tmp_path) as server:
        yield server


def test_tls_with_acl_user_for_broker_backend_and_store(
        tls_redis, settings, celery_app_factory, in_process_worker):
    s = _on(tls_redis, settings, RedisTLS(ca=tls_redis.tls.server_cert))
    assert s.broker_url.startswith("rediss://")
    check_connectivity(s, timeout=3)
    client = redis_client(s)
    try:
        assert client.acl_whoami() == USER
        assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    finally:
        client.close()
    _round_trip(s, celery_app_factory, in_process_worker)  # the server has no plain port
    # Without our CA the self-signed server certificate is not trusted.
    with pytest.raises(ConnectivityError, match="certificate verify failed"):
        check_redis(s.replace(redis_tls=RedisTLS()), timeout=3)
    # A plain connection to the TLS port does not get through.
    plain = s.redis_url.replace("rediss://", "redis://")
    with pytest.raises(ConnectivityError):
        check_redis(s, plain, timeout=2)


def test_tls_client_certificates(tmp_path, tls_ok, settings):
    if not tls_ok:
        pytest.skip("this redis-server has no TLS support")
    files = TLSFiles.make(tmp_path / "certs")
    server = AclRedis(tmp_path / "mtls", files, auth_clients=True).start()
    try:
        with_cert = RedisTLS(ca=files.server_cert, cert=files.client_cert, key=files.client_key)
        check_redis(_on(server, settings, with_cert), timeout=3)
        without = RedisTLS(ca=files.server_cert)
        with pytest.raises(ConnectivityError):
            check_redis(_on(server, settings, without), timeout=3)
        unchecked = RedisTLS(cert=files.client_cert, key=files.client_key,
                             cert_reqs=CertReqs.NONE)
        check_redis(_on(server, settings, unchecked), timeout=3)  # encrypted, unverified
    finally:
        server.stop()
