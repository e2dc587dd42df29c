"""Throwaway databases for tests: a migrated SQLite file or a private PostgreSQL schema.

Later issues' tests use these so no test ever touches tables it did not create::

    with temporary_database(postgres_test_url()) as url:   # None -> SQLite
        engine = get_engine(url)
        ...

On PostgreSQL a uniquely named schema is created and the yielded URL pins
``search_path`` to it (``options=-csearch_path=...``), so any process given the
URL, such as a Celery worker subprocess, lands in the same schema.  Only that
schema is dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, delete, text
from sqlalchemy.engine import make_url

from .engine import dispose_engines, make_engine
from .migrations import migrate
from .models import Base

#: Environment variable naming the PostgreSQL server tests may use.
POSTGRES_ENV = "GRID_TASKS_TEST_POSTGRES_URL"


def postgres_test_url() -> str | None:
    """The PostgreSQL URL for tests, or None when ``GRID_TASKS_TEST_POSTGRES_URL`` is unset."""
    return os.environ.get(POSTGRES_ENV) or None


def schema_url(url: str, schema: str) -> str:
    """``url`` with every connection's ``search_path`` set to ``schema`` only."""
    parsed = make_url(url)
    options = parsed.query.get("options", "")
    if isinstance(options, tuple):
        options = " ".join(options)
    pinned = f"{options} -csearch_path={schema}".strip()
    return parsed.update_query_dict({"options": pinned}).render_as_string(hide_password=False)


def _unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@contextmanager
def _sqlite_database(prefix: str) -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix=f"{prefix}_"))
    url = f"sqlite:///{directory / 'grid_tasks.sqlite3'}"
    try:
        yield url
    finally:
        dispose_engines(url)
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def _postgres_schema(url: str, prefix: str) -> Iterator[str]:
    schema = _unique_name(prefix)
    admin = make_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        scoped = schema_url(url, schema)
        try:
            yield scoped
        finally:
            dispose_engines(scoped)
            with admin.connect() as conn:
                # Never hang a test run on a connection someone forgot to close.
                conn.execute(text("SET lock_timeout = '10s'"))
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        admin.dispose()


@contextmanager
def temporary_database(
    url: str | None = None, *, migrated: bool = True, prefix: str = "gt_test"
) -> Iterator[str]:
    """A database that exists only inside the ``with`` block; yields its URL.

    ``url`` None (or a SQLite URL) gives a fresh SQLite file in a temporary
    directory; a PostgreSQL URL gives a fresh schema on that server.  With
    ``migrated`` (the default) the schema is at the newest revision.
    """
    if url is None or make_url(url).get_backend_name() == "sqlite":
        cm = _sqlite_database(prefix)
    else:
        cm = _postgres_schema(url, prefix)
    with cm as db_url:
        if migrated:
            migrate(db_url)
        yield db_url


def clear_tables(engine: Engine) -> None:
    """Delete every row of grid_tasks' own tables (children first); keeps the schema.

    Cheaper than a new database between tests sharing one migrated schema.
    """
    with engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(delete(table))
