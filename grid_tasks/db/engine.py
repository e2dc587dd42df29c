"""Engines and sessions, the same on SQLite and PostgreSQL.

Engines are created lazily and cached per ``(pid, url)``: a Celery prefork
worker must never reuse a connection pool inherited from its parent, so every
process builds its own on first use.  A database that cannot be reached is
reported as :class:`~grid_tasks.errors.StorageUnavailable` naming the URL with
its password masked, and so is a database that fails a transaction because it is
away (a lost connection, a full disk): :func:`session_scope` turns SQLAlchemy's
``OperationalError`` into it, so every caller, up to the CLI, meets one typed error.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from grid_tasks.errors import StorageUnavailable
from grid_tasks.private_files import missing_dirs_private, private_sqlite
from grid_tasks.settings import Settings

from .errors import ConcurrentUpdateError, DatabaseError

#: How long SQLite waits for another writer before giving up, in milliseconds.
SQLITE_BUSY_TIMEOUT_MS = 30_000

_engines: dict[tuple[int, str], Engine] = {}
_engines_lock = threading.Lock()


def mask_url(url: str | URL) -> str:
    """The URL as text with any password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        # Not a URL SQLAlchemy understands; still never echo what looks like a password.
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", str(url))


def default_url() -> str:
    """The configured database: ``GRID_TASKS_DATABASE_URL``, else a SQLite file in the state dir."""
    return Settings.from_env().database_url  # settings validate the variable


def _parse(url: str | URL) -> URL:
    try:
        return make_url(url)
    except exc.ArgumentError as err:
        raise DatabaseError(f"invalid database URL {mask_url(url)!r}: {err}") from None


def _prepare_sqlite_file(url: URL) -> None:
    """Create the directory of a SQLite file (0700 where missing), so a fresh state
    dir just works, and the file itself (and WAL/SHM) 0600 before SQLite opens it:
    it holds jobs' environments and DUROC per-job Redis passwords."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    try:
        missing_dirs_private(Path(database).expanduser().parent)
        private_sqlite(database)
    except OSError as err:
        why = f"cannot create it or its directory ({err})"
        raise StorageUnavailable(mask_url(url), why,
                                 message=f"cannot reach database {mask_url(url)}: {why}"
                                 ) from None


def _on_sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    try:
        # WAL lets readers proceed while one writer commits; busy_timeout makes
        # concurrent writers queue instead of failing at once.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


#: Writers of one SQLite file queue on an flock of ``<file>-writer.lock`` (see
#: :class:`_WriterQueue`); how long one waits before leaving it to SQLite's busy timeout.
WRITER_WAIT_S = SQLITE_BUSY_TIMEOUT_MS / 1000
#: Poll steps while the writer lock is held elsewhere (seconds, the last repeats).
_WRITER_POLL = (0.0002, 0.0005, 0.001, 0.002)
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


_priority = threading.local()


@contextmanager
def write_priority() -> Iterator[None]:
    """Within the block, this thread's writes to a SQLite file go before those of
    ordinary writers waiting for it (the scheduling iteration: every job's progress
    waits on it).  No effect on other databases."""
    depth = getattr(_priority, "depth", 0)
    _priority.depth = depth + 1
    try:
        yield
    finally:
        _priority.depth = depth


class _WriterQueue:
    """Cross-process write serialisation of one SQLite file, taken at a transaction's
    first write and released right after its commit or rollback.

    SQLite's own busy handler sleeps up to 100 ms per retry while another process
    writes, so a dozen processes each writing small transactions (submissions, job
    reports, iterations) spent most of their time asleep with the database idle
    (bench_gram).  Waiting here polls every 2 ms at most, so the next writer follows
    at once; the semantics are SQLite's (one writer at a time, same points, failing
    after the busy timeout), and a process that dies releases its lock with its fd.
    """

    def __init__(self, database: str) -> None:
        self.path = f"{database}-writer.lock"
        self.urgent_path = f"{database}-urgent.lock"  # shared-locked by urgent waiters
        # id(DBAPI connection) -> (fd holding the lock, thread that took it)
        self.held: dict[int, tuple[int, int]] = {}
        self.mutex = threading.Lock()

    def acquire(self, dbapi_conn: Any) -> None:
        dbapi_conn = _raw(dbapi_conn)
        if id(dbapi_conn) in self.held:
            return
        self._refuse_self_deadlock(id(dbapi_conn))
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        urgent = getattr(_priority, "depth", 0) > 0
        marker = self._announce() if urgent else None
        try:
            got = self._wait(fd, urgent)
        except BaseException:
            os.close(fd)
            raise
        finally:
            if marker is not None:
                os.close(marker)
        if not got:
            os.close(fd)
            return  # let SQLite's busy timeout decide, as without the queue
        with self.mutex:
            self.held[id(dbapi_conn)] = (fd, threading.get_ident())

    def _refuse_self_deadlock(self, conn_id: int) -> None:
        """A thread already writing through another connection would wait for itself
        (the writer lock, then SQLite's own): fail at once, naming the cause."""
        me = threading.get_ident()
        with self.mutex:
            busy = any(thread == me for held, (_, thread) in self.held.items() if held != conn_id)
        if busy:
            raise DatabaseError("nested write: this thread already holds an open write "
                                "transaction of the same SQLite database on another "
                                "connection; commit it first (waiting would deadlock)")

    def _wait(self, fd: int, urgent: bool) -> bool:
        """Poll for the writer lock; ordinary writers stand back while an urgent one waits."""
        deadline, step = time.monotonic() + WRITER_WAIT_S, 0
        while True:
            if urgent or not self._urgent_waiting():
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except OSError as err:
                    if err.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
            if time.monotonic() >= deadline:
                return False
            time.sleep(_WRITER_POLL[min(step, len(_WRITER_POLL) - 1)])
            step += 1

    def _announce(self) -> int:
        """An urgent writer waits holding a shared lock on the urgent file."""
        fd = os.open(self.urgent_path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)  # only an instant probe can hold it exclusively
        return fd

    def _urgent_waiting(self) -> bool:
        fd = os.open(self.urgent_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return True
        finally:
            os.close(fd)

    def release(self, dbapi_conn: Any) -> None:
        with self.mutex:
            entry = self.held.pop(id(_raw(dbapi_conn)), None)
        if entry is not None:
            os.close(entry[0])  # closing the only fd of the lock releases it

    def install(self, engine: Engine) -> None:
        dialect = engine.dialect
        commit, rollback = dialect.do_commit, dialect.do_rollback

        @event.listens_for(engine, "before_cursor_execute")
        def _before(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if statement.lstrip()[:7].upper().startswith(_WRITES):
                self.acquire(conn.connection)

        def do_commit(dbapi_conn: Any) -> None:
            try:
                commit(dbapi_conn)
            finally:
                self.release(dbapi_conn)

        def do_rollback(dbapi_conn: Any) -> None:
            try:
                rollback(dbapi_conn)
            finally:
                self.release(dbapi_conn)

        dialect.do_commit, dialect.do_rollback = do_commit, do_rollback  # type: ignore[method-assign]
        event.listen(engine, "close", lambda dbapi_conn, _rec: self.release(dbapi_conn))
        event.listen(engine, "invalidate",
                     lambda dbapi_conn, _rec, _exc: self.release(dbapi_conn))


def _raw(conn: Any) -> Any:
    """The DBAPI connection behind a pool proxy (SQLAlchemy hands either to hooks)."""
    return getattr(conn, "dbapi_connection", None) or conn


def _sqlite_file(url: URL) -> str | None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return str(Path(database).expanduser().resolve())


def _install_connect_guard(engine: Engine, masked: str, password: str | None) -> None:
    """Turn a failed DBAPI connect into a StorageUnavailable naming the masked URL."""
    dbapi_error = engine.dialect.loaded_dbapi.Error

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, _rec: Any, cargs: Any, cparams: Any) -> Any:
        try:
            return dialect.loaded_dbapi.connect(*cargs, **cparams)
        except dbapi_error as err:
            reason = " ".join(str(err).split())
            if password:
                reason = reason.replace(password, "***")
            raise StorageUnavailable(masked, reason,
                                     message=f"cannot reach database {masked}: {reason}"
                                     ) from None


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """A new engine for ``url`` (no connection is opened yet).

    SQLite gets WAL, foreign keys and a busy timeout on every connection;
    PostgreSQL gets ``pool_pre_ping`` so connections dropped by a server restart
    are replaced transparently.  Extra ``kwargs`` go to ``create_engine``.
    """
    parsed = _parse(url)
    if parsed.drivername in ("postgres", "postgresql"):
        # psycopg 3 is the driver grid_tasks installs; a bare scheme means it.
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        _prepare_sqlite_file(parsed)
    else:
        kwargs.setdefault("pool_pre_ping", True)
    try:
        engine = create_engine(parsed, **kwargs)
    except (exc.ArgumentError, exc.NoSuchModuleError, ImportError) as err:
        raise DatabaseError(f"cannot use database URL {mask_url(parsed)}: {err}") from None
    if backend == "sqlite":
        event.listen(engine, "connect", _on_sqlite_connect)
        database = _sqlite_file(parsed)
        if database is not None:
            _WriterQueue(database).install(engine)
    _install_connect_guard(engine, mask_url(parsed), parsed.password)
    return engine


def get_engine(url: str | URL | None = None) -> Engine:
    """The engine of this process for ``url`` (default: :func:`default_url`), made on first use."""
    if url is None:
        url = default_url()
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    key = (os.getpid(), text)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = make_engine(text)
        return engine


def dispose_engines(url: str | None = None) -> None:
    """Dispose this process's cached engines (all, or those for ``url``)."""
    pid = os.getpid()
    with _engines_lock:
        for key in [k for k in _engines if k[0] == pid and (url is None or k[1] == url)]:
            _engines.pop(key).dispose()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory bound to ``engine``; objects stay usable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error.

    Optimistic-lock conflicts surface as :class:`ConcurrentUpdateError`; a database
    that is away (see :func:`unavailable`) as :class:`StorageUnavailable`.
    """
    session = factory()
    try:
        yield session
        session.commit()
    except StaleDataError as err:
        session.rollback()
        raise ConcurrentUpdateError(f"row changed by another session: {err}") from None
    except BaseException as err:
        _rollback_quietly(session)
        typed = unavailable(err, factory.kw.get("bind"))
        if typed is not None:
            raise typed from err
        raise
    finally:
        session.close()


def _rollback_quietly(session: Session) -> None:
    """Roll back; a database that is gone cannot, and its error is the one to raise."""
    try:
        session.rollback()
    except exc.DBAPIError:
        pass


#: SQLite raises OperationalError for statements its schema cannot run, too: a database
#: that was never migrated is misconfigured, not away, and retrying will not help.
_SCHEMA_FAULT = re.compile(r"no such (table|column|function)|has no column named|syntax error")


def unavailable(err: BaseException, bind: Any = None) -> StorageUnavailable | None:
    """``err`` as :class:`StorageUnavailable` when it says the database is away rather
    than that the request was wrong: an ``OperationalError`` (connection refused or
    lost, server shutting down, disk full, locked past the busy timeout) or a DBAPI
    error that invalidated its connection; None for anything else.  ``bind``: the
    engine, whose URL (password masked) the error names."""
    if isinstance(err, StorageUnavailable):
        return err
    if not isinstance(err, exc.OperationalError) and not (
            isinstance(err, exc.DBAPIError) and err.connection_invalidated):
        return None
    if _SCHEMA_FAULT.search(str(getattr(err, "orig", None) or err)):
        return None  # SQLite's OperationalError for a wrong or missing schema: not away
    url = getattr(bind, "url", None)
    database = mask_url(url) if url is not None else "(unknown URL)"
    cause = " ".join(str(getattr(err, "orig", None) or err).split())
    password = getattr(url, "password", None)
    if password:
        cause = cause.replace(str(password), "***")
    return StorageUnavailable(database, cause[:300])
