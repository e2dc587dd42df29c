"""A private PostgreSQL server for the restart case (never the machine's shared one).

``initdb`` + ``pg_ctl`` from the Debian packages (``/usr/lib/postgresql/<v>/bin``), on a
free loopback port with its socket and data in a temporary directory.  PostgreSQL
refuses to run as root, so as root the server runs as the ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from grid_tasks.embedded.redis_server import free_port
from grid_tasks.errors import GridTasksError


class PostgresUnavailable(GridTasksError):
    """No PostgreSQL binaries, or no unprivileged user to run them as."""


def find_bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        raise PostgresUnavailable("no PostgreSQL server binaries under "
                                  "/usr/lib/postgresql/*/bin (install postgresql)")
    return Path(found[-1]).parent


class PrivatePostgres:
    """One throwaway PostgreSQL cluster: :meth:`start`, :meth:`restart`, :meth:`stop`."""

    def __init__(self, directory: Path | None = None) -> None:
        self.bin = find_bin_dir()
        # its own temp dir by default: the server user must be able to reach it, and
        # the caller's (e.g. pytest's) directories are private to us
        self._owned = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="grid-tasks-pg-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self._user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root and no 'postgres' user to run "
                                          "the server as") from None
            self._user = "postgres"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise PostgresUnavailable(f"{argv[0]} failed: {(done.stderr or done.stdout)[-400:]}")

    def start(self) -> "PrivatePostgres":
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._user:
            shutil.chown(self.directory, self._user, self._user)
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                      "--no-sync", "-E", "UTF8")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "pg.log"), "-w",
                  "-o", f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
                        "-c fsync=off", "start")
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        """Stop the server and remove its directory if we made it."""
        try:
            self.stop()
        finally:
            if self._owned:
                shutil.rmtree(self.directory, ignore_errors=True)

    def restart(self) -> None:
        """Stop (fast: clients are disconnected) and start again, same port and data."""
        self.stop()
        self.start()
