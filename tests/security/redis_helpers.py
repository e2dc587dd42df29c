"""Private redis-servers with an ACL user and optionally TLS, for the security tests."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from grid_tasks.embedded.redis_server import find_redis_server, free_port
from grid_tasks.security.keys import self_signed

USER, PASSWORD = "grid", "s3cret-grid-pw"


@dataclass
class TLSFiles:
    """A self-signed server certificate (also the CA clients trust) and a client pair."""

    server_key: Path
    server_cert: Path
    client_key: Path
    client_cert: Path
    ca_bundle: Path  # what the server trusts for client certificates

    @classmethod
    def make(cls, directory: Path) -> "TLSFiles":
        now = dt.datetime.now(dt.timezone.utc)
        directory.mkdir(parents=True, exist_ok=True)
        files = {}
        for who, hosts in (("server", ("127.0.0.1", "localhost")), ("client", ())):
            key, cert = self_signed(f"redis-{who}", now=now, hosts=hosts, key_size=2048)
            (directory / f"{who}.key").write_bytes(key)
            (directory / f"{who}.pem").write_bytes(cert)
            files[who] = (directory / f"{who}.key", directory / f"{who}.pem")
        bundle = directory / "ca-bundle.pem"
        bundle.write_bytes(files["server"][1].read_bytes() + files["client"][1].read_bytes())
        return cls(*files["server"], *files["client"], bundle)


@dataclass
class AclRedis:
    """redis-server whose default user is off; only ``grid``/``PASSWORD`` may log in."""

    directory: Path
    tls: TLSFiles | None = None
    auth_clients: bool = False
    port: int = 0
    process: subprocess.Popen | None = field(default=None, repr=False)

    def url(self, db: int, user: str = USER, password: str = PASSWORD) -> str:
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{user}:{password}@127.0.0.1:{self.port}/{db}"

    def start(self) -> "AclRedis":
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        argv = [find_redis_server(), "--bind", "127.0.0.1", "--dir", str(self.directory),
                "--save", "", "--appendonly", "no", "--logfile",
                str(self.directory / "redis.log"),
                "--user", "default", "off",
                "--user", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all"]
        if self.tls:
            argv += ["--port", "0", "--tls-port", str(self.port),
                     "--tls-cert-file", str(self.tls.server_cert),
                     "--tls-key-file", str(self.tls.server_key),
                     "--tls-ca-cert-file", str(self.tls.ca_bundle),
                     "--tls-auth-clients", "yes" if self.auth_clients else "no"]
        else:
            argv += ["--port", str(self.port)]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        self._wait_ready()
        return self

    def _client(self) -> redis.Redis:
        kwargs = {}
        if self.tls:
            kwargs = {"ssl_ca_certs": str(self.tls.server_cert),
                      "ssl_certfile": str(self.tls.client_cert),
                      "ssl_keyfile": str(self.tls.client_key)}
        return redis.Redis.from_url(self.url(0), socket_connect_timeout=0.5, **kwargs)

    def _wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        client = self._client()
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    time.sleep(0.05)
        finally:
            client.close()
        log = self.directory / "redis.log"
        tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
        self.stop()
        raise RuntimeError(f"redis-server did not start: {tail}")

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def tls_supported(directory: Path) -> bool:
    """Whether this redis-server binary was built with TLS."""
    try:
        server = AclRedis(directory, TLSFiles.make(directory / "probe-certs")).start()
    except RuntimeError:
        return False
    server.stop()
    return True


@contextmanager
def tls_only_redis(root: Path) -> Iterator[AclRedis]:
    """A TLS-only redis-server with the ACL user under ``root``, stopped at the end; the
    test is skipped where this redis-server has no TLS support."""
    import pytest

    if not tls_supported(root / "probe"):
        pytest.skip("this redis-server has no TLS support")
    server = AclRedis(root / "server", TLSFiles.make(root / "certs")).start()
    try:
        yield server
    finally:
        server.stop()
