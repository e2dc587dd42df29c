"""The job side's own RESP2 client against a real (private) redis-server.

redis-py appears here only as the control side and as the reference the client's
replies and error messages must match (``translated()`` relies on both).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from grid_tasks.duroc.resp import (
    RespAuthenticationError, RespClient, RespConnectionError, RespNoPermissionError,
    RespNoScriptError, RespResponseError, encode_command,
)
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import (
    AccessDeniedError, CoordinationError, JobNotFoundError, StoreUnavailableError, translated,
)
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.embedded.redis_server import find_redis_server
from grid_tasks.errors import ConfigError
from grid_tasks.runtime import Runtime, RuntimeEnv
from grid_tasks.runtime.client import job_store
from grid_tasks.security.config import CertReqs, RedisTLS
from grid_tasks.settings import Settings
from tests.duroc.tls_proxy import TLSProxy
from tests.security.redis_helpers import AclRedis, TLSFiles, tls_only_redis


@pytest.fixture
def resp(settings: Settings) -> Iterator[RespClient]:
    """A RespClient as the admin (default user, password) on the flushed private db 3."""
    client = RespClient.from_url(settings.redis_url)
    yield client
    client.close()


def _job_client(store: CoordinationStore, job: str) -> RespClient:
    store.create_job(job, [SubjobSpec("a", 1)])
    return RespClient.from_url(store.grant_access(job))


def _raised(call) -> Exception:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the point is to look at it
        return exc
    raise AssertionError("no error raised")


def test_reply_types_match_redis_py(resp: RespClient, store: CoordinationStore) -> None:
    admin = store.client  # redis-py on the same db
    assert resp.ping() is True
    assert resp.execute_command("SET", "k", "v") == b"OK"  # simple string
    assert resp.execute_command("GET", "k") == b"v" and resp.execute_command("GET", "no") is None
    assert resp.execute_command("INCRBY", "n", 41) == 41 and resp.exists("k", "n", "no") == 2
    assert resp.execute_command("RPUSH", "l", b"\x00\r\n", 2.5, "\u00e9") == 3
    assert resp.execute_command("LRANGE", "l", 0, -1) == [b"\x00\r\n", b"2.5", "\u00e9".encode()]
    admin.hset("h", mapping={"state": "open"})
    assert resp.hmget("h", ["state", "reason"]) == admin.hmget("h", ["state", "reason"])
    first = admin.xadd("s", {"type": "a", "n": "1"})
    admin.xadd("s", {"type": "b"})
    assert resp.xread({"s": "0-0"}, block=10) == admin.xread({"s": "0-0"}, block=10)
    assert resp.xread({"s": first}) == admin.xread({"s": first})
    assert resp.xread({"s": "$"}, block=10) == [] == admin.xread({"s": "$"}, block=10)
    assert resp.blpop(["l"], timeout=0.05) == (b"l", b"\x00\r\n")
    assert resp.blpop(["empty"], timeout=0.01) is None
    assert resp.script_exists("0" * 40) == [False]
    with pytest.raises(TypeError):
        encode_command(["SET", "k", True])


def test_errors_read_as_redis_py_words_them(resp: RespClient, store: CoordinationStore) -> None:
    admin = store.client
    resp.execute_command("SET", "str", "x")
    failing = [("NOSUCHCOMMAND",), ("LPUSH", "str", "x"), ("EVALSHA", "0" * 40, 0),
               ("EVAL", "error('GTERR NOJOB')", 0), ("SELECT", 999)]
    for args in failing:
        ours, theirs = _raised(lambda: resp.execute_command(*args)), _raised(
            lambda: admin.execute_command(*args))
        assert str(ours) == str(theirs), args
        assert isinstance(ours, RespNoScriptError) == isinstance(
            theirs, redis.exceptions.NoScriptError)
        assert isinstance(ours, RespResponseError)
        with pytest.raises(CoordinationError) as typed_ours, translated("j"):
            resp.execute_command(*args)
        with pytest.raises(CoordinationError) as typed_theirs, translated("j"):
            admin.execute_command(*args)
        assert (type(typed_ours.value), str(typed_ours.value)) == (
            type(typed_theirs.value), str(typed_theirs.value))
    with pytest.raises(JobNotFoundError), translated("j"):
        resp.execute_command("EVAL", "error('GTERR NOJOB')", 0)


def _knows_setinfo(admin: redis.Redis) -> bool:
    try:
        admin.execute_command("CLIENT", "SETINFO", "lib-name", "grid-tasks-test")
    except redis.exceptions.ResponseError:  # "unknown subcommand" before Redis 7.2
        return False
    return True


def test_job_user_is_confined_and_its_errors_typed(store: CoordinationStore) -> None:
    client = _job_client(store, "A")
    store.create_job("B", [SubjobSpec("b", 1)])
    job_store = CoordinationStore(client, slice_s=0.5)
    try:
        assert job_store.enter("A", 0, 0)["state"] == "open"
        with pytest.raises(AccessDeniedError):
            job_store.enter("B", 0, 0)
        with pytest.raises(AccessDeniedError):
            job_store.receive("B", store.keys("B").intra_queue(0, 0, "t"), "t", timeout=0.2)
        refused = [("KEYS", "*"), ("SCRIPT", "LOAD", "return 1"), ("HGETALL", "x"),
                   ("CLIENT", "LIST")]
        if _knows_setinfo(store.client):  # what redis-py sends on connecting (Redis 7.2+)
            refused.append(("CLIENT", "SETINFO", "lib-name", "x"))
        for args in refused:
            with pytest.raises(RespNoPermissionError, match="this user has no permissions"):
                client.execute_command(*args)
    finally:
        client.close()


def test_wrong_password_and_unreachable_server(store: CoordinationStore,
                                               redis_server) -> None:
    store.create_job("W", [SubjobSpec("a", 1)])
    url = store.grant_access("W")
    wrong = RespClient.from_url(url.replace(urlsplit(url).password, "nope"))
    with pytest.raises(RespAuthenticationError, match="WRONGPASS|invalid username-password"):
        wrong.ping()
    with pytest.raises(StoreUnavailableError, match="refused the credentials"):
        CoordinationStore(wrong).enter("W", 0, 0)
    nobody = RespClient.from_url(f"redis://127.0.0.1:{redis_server.port}/3")
    with pytest.raises(StoreUnavailableError, match="refused the credentials"), \
            translated("W"):
        nobody.ping()  # NOAUTH, as redis-py words it too
    closed = RespClient.from_url("redis://u:p@127.0.0.1:1/3", reconnect_s=0)
    with pytest.raises(StoreUnavailableError, match=r"unreachable: Error 111 connecting to "
                                                    r"127.0.0.1:1\. Connection refused\."):
        CoordinationStore(closed).enter("W", 0, 0)


def test_select_and_db_in_the_query(resp: RespClient, settings: Settings,
                                    redis_server) -> None:
    other = RespClient.from_url(redis_server.url(5))
    query = RespClient.from_url(redis_server.url(0) + "?db=5")
    try:
        other.execute_command("SET", "where", "five")
        assert resp.execute_command("GET", "where") is None  # db 3
        assert query.execute_command("GET", "where") == b"five"
        with redis.Redis.from_url(redis_server.url(5)) as reference:
            assert reference.get("where") == b"five"
    finally:
        other.execute_command("FLUSHDB")
        other.close()
        query.close()


def test_concurrent_blocking_pops_each_take_a_connection(resp: RespClient,
                                                         store: CoordinationStore) -> None:
    results: dict[int, tuple[bytes, bytes] | None] = {}

    def pop(i: int) -> None:
        results[i] = resp.blpop([f"q{i}"], timeout=10.0)

    threads = [threading.Thread(target=pop, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while store.client.info("clients")["blocked_clients"] < 4:
        assert time.monotonic() < deadline, "the pops did not block side by side"
        time.sleep(0.01)
    for i in range(4):
        store.client.rpush(f"q{i}", f"v{i}")
    for thread in threads:
        thread.join(10)
    assert results == {i: (f"q{i}".encode(), f"v{i}".encode()) for i in range(4)}
    assert len(resp._idle) == 4  # all four kept for reuse


def test_a_dead_idle_connection_is_replaced_once(resp: RespClient,
                                                 store: CoordinationStore) -> None:
    first_id = resp.execute_command("CLIENT", "ID")
    store.client.client_kill_filter(_id=first_id)
    second_id = resp.execute_command("CLIENT", "ID")  # transparently, on a new connection
    assert second_id != first_id and len(resp._idle) == 1
    # a revoked job user: its connections are closed and a fresh one is refused
    client = _job_client(store, "R")
    try:
        assert CoordinationStore(client).enter("R", 0, 0)["state"] == "open"
        store.revoke_access("R")
        with pytest.raises(StoreUnavailableError, match="refused the credentials"):
            CoordinationStore(client).enter("R", 0, 0)
    finally:
        client.close()


def test_noscript_loads_the_script_or_reports_the_empty_cache(
        resp: RespClient, store: CoordinationStore) -> None:
    resp.execute_command("SCRIPT", "FLUSH")
    script = resp.register_script("return 1 + 1")
    assert script.sha == store.client.register_script("return 1 + 1").sha
    assert script() == 2 and resp.script_exists(script.sha) == [True]
    client = _job_client(store, "S")
    try:
        store.client.script_flush()
        with pytest.raises(RespNoScriptError):
            client.execute_command("EVALSHA", script.sha, 0)
        with pytest.raises(StoreUnavailableError, match="scripts are not loaded"):
            CoordinationStore(client).enter("S", 0, 0)
        store.load_scripts()
        assert CoordinationStore(client).enter("S", 0, 0)["state"] == "open"
    finally:
        client.close()


def test_urls_are_parsed_like_redis_py(tmp_path: Path) -> None:
    tcp = RespClient.from_url("redis://grid_tasks-job-A:pw%2F1@10.0.0.5:6380/3")
    assert (tcp.host, tcp.port, tcp.db, tcp.username, tcp.password, tcp.tls) == (
        "10.0.0.5", 6380, 3, "grid_tasks-job-A", "pw/1", None)
    sock = RespClient.from_url("unix:///run/redis.sock?db=2&username=u&password=p%2F1")
    assert (sock.path, sock.db, sock.username, sock.password) == ("/run/redis.sock", 2, "u", "p/1")
    assert RespClient.from_url("redis://h").port == 6379
    env = {"GRID_TASKS_REDIS_TLS_CA": str(tmp_path / "ca.pem"),
           "GRID_TASKS_REDIS_TLS_CERT_REQS": "optional"}
    tls = RespClient.from_url("rediss://u:p@h:6380/1", env).tls
    assert tls == RedisTLS(ca=tmp_path / "ca.pem", cert_reqs=CertReqs.OPTIONAL)
    bad_tls = {"GRID_TASKS_REDIS_TLS_CERT_REQS": "sometimes"}
    assert RespClient.from_url("redis://h/1", bad_tls).tls is None  # plain: not read
    with pytest.raises(ConfigError, match="GRID_TASKS_REDIS_TLS_CERT_REQS"):
        RespClient.from_url("rediss://h/1", bad_tls)
    for url in ("http://h/1", "redis://h/x", "redis://h:port/1", "unix://"):
        with pytest.raises(ValueError):
            RespClient.from_url(url)
    with pytest.raises(StoreUnavailableError, match="bad coordination store URL"):
        Runtime(RuntimeEnv("http://127.0.0.1:1/5", "j", 0, 0, 1))


@pytest.fixture(scope="module")
def unix_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private redis-server listening on a unix socket only (password "pw")."""
    directory = tmp_path_factory.mktemp("resp-unix")
    path = directory / "redis.sock"
    proc = subprocess.Popen(
        [find_redis_server(), "--port", "0", "--unixsocket", str(path), "--unixsocketperm",
         "700", "--dir", str(directory), "--save", "", "--appendonly", "no",
         "--requirepass", "pw", "--logfile", str(directory / "redis.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not path.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "no unix socket"
            time.sleep(0.02)
        yield path
    finally:
        proc.terminate()
        proc.wait(10)


def test_unix_socket_runtime(unix_redis: Path) -> None:
    control = CoordinationStore.from_url(f"unix://{unix_redis}?db=2&password=pw", slice_s=0.5)
    try:
        control.create_job("U", [SubjobSpec("a", 1)])
        url = control.grant_access("U")
        assert url.startswith(f"unix://{unix_redis}?db=2&username=grid_tasks-job-U")
        runtime = Runtime(RuntimeEnv(url, "U", 0, 0, 1))
        control.release("U", require_complete=False)
        assert runtime.barrier(timeout=5).subjobs[0].label == "a"
        runtime.close()
    finally:
        control.purge("U")
        control.close()


def test_importing_the_runtime_loads_no_redis_py_nor_asyncio(store: CoordinationStore,
                                                             grid_env: dict[str, str]) -> None:
    store.create_job("imp", [SubjobSpec("a", 1)])
    store.release("imp", require_complete=False)
    env = {**grid_env, "GRID_TASKS_RUNTIME_URL": store.grant_access("imp"),
           "GRID_TASKS_COALLOC_ID": "imp", "GRID_TASKS_SUBJOB_INDEX": "0",
           "GRID_TASKS_RANK": "0", "GRID_TASKS_SIZE": "1"}
    code = ("import sys; from grid_tasks import runtime\n"
            "unwanted = lambda: {'redis', 'asyncio', 'ssl'} & set(sys.modules)\n"
            "assert not unwanted(), unwanted()\n"
            "assert runtime.barrier(5).subjobs[0].label == 'a'\n"
            "assert not unwanted(), unwanted()\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclRedis]:
    """A TLS-only redis-server (as in tests/security/test_store_tls.py)."""
    with tls_only_redis(tmp_path_factory.mktemp("resp-tls")) as server:
        yield server


def test_runtime_over_tls(tls_redis: AclRedis, monkeypatch: pytest.MonkeyPatch) -> None:
    tls_env = RedisTLS(ca=tls_redis.tls.server_cert).to_env()
    control = CoordinationStore.from_url(tls_redis.url(4), environ=tls_env, slice_s=0.5)
    try:
        control.create_job("T", [SubjobSpec("a", 1)])
        url = control.grant_access("T")
        for name in tls_env:
            monkeypatch.delenv(name, raising=False)
        with pytest.raises(StoreUnavailableError, match="certificate verify failed"):
            Runtime(RuntimeEnv(url, "T", 0, 0, 1)).barrier(timeout=5)  # no CA
        for name, value in tls_env.items():
            monkeypatch.setenv(name, value)
        runtime = Runtime(RuntimeEnv(url, "T", 0, 0, 1))
        waiter = threading.Thread(target=runtime.barrier, args=(10.0,))
        waiter.start()
        control.await_entries("T", timeout=10)
        control.release("T")
        waiter.join(10)
        assert not waiter.is_alive()
        assert isinstance(runtime.store.client._idle[0].sock, ssl.SSLSocket)
        runtime.close()
    finally:
        control.purge("T")
        control.close()


def test_a_refused_connection_is_tried_again_for_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that comes up within ``reconnect_s`` is reached; one that does not is
    reported after about that long (nothing was sent, so retrying is always safe)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # the port refuses until the "server" below listens on it

    def late_server() -> None:
        time.sleep(0.3)
        with socket.create_server(("127.0.0.1", port)) as server:
            conn, _ = server.accept()
            with conn:
                assert conn.recv(64).startswith(b"*1\r\n$4\r\nPING")
                conn.sendall(b"+PONG\r\n")

    thread = threading.Thread(target=late_server, daemon=True)
    thread.start()
    t0 = time.monotonic()
    assert RespClient.from_url(f"redis://127.0.0.1:{port}/0", reconnect_s=5).ping()
    assert 0.25 < time.monotonic() - t0 < 4
    thread.join(5)
    client = RespClient.from_url("redis://127.0.0.1:1/0", reconnect_s=0.4)
    attempts = []
    real = client._open_socket
    monkeypatch.setattr(client, "_open_socket", lambda: attempts.append(1) or real())
    t0 = time.monotonic()
    with pytest.raises(RespConnectionError, match="Connection refused"):
        client.ping()
    assert 2 <= len(attempts) <= 6 and 0.2 < time.monotonic() - t0 < 2


@pytest.fixture(scope="module")
def tls_proxy(redis_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSProxy]:
    """TLS in front of the session's plain private Redis (runs without a TLS redis-server)."""
    proxy = TLSProxy(redis_server.port, TLSFiles.make(tmp_path_factory.mktemp("resp-proxy")))
    yield proxy
    proxy.close()


def test_runtime_over_a_tls_proxy(tls_proxy: TLSProxy, store: CoordinationStore,
                                  redis_server) -> None:
    store.create_job("P", [SubjobSpec("a", 2)])
    plain = urlsplit(store.grant_access("P"))
    url = plain._replace(scheme="rediss", netloc=plain.netloc.replace(
        f":{redis_server.port}", f":{tls_proxy.port}")).geturl()
    with pytest.raises(StoreUnavailableError, match="certificate verify failed"):
        job_store(url, environ={}).enter("P", 0, 0)
    tls_env = RedisTLS(ca=tls_proxy.tls.server_cert).to_env()
    runtimes = [Runtime(RuntimeEnv(url, "P", 0, rank, 2), job_store(url, tls_env))
                for rank in range(2)]
    waiters = [threading.Thread(target=rt.barrier, args=(10.0,)) for rt in runtimes]
    for waiter in waiters:
        waiter.start()
    store.await_entries("P", timeout=10)
    store.release("P")
    for waiter in waiters:
        waiter.join(10)
        assert not waiter.is_alive()
    runtimes[0].intra_subjob_send(1, "t", b"over TLS")
    assert runtimes[1].intra_subjob_receive("t", timeout=5) == b"over TLS"
    assert isinstance(runtimes[1].store.client._idle[0].sock, ssl.SSLSocket)
    for rt in runtimes:
        rt.close()
