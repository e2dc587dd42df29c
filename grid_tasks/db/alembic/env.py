"""Alembic environment for grid_tasks.

The database comes, in this order, from a connection handed over by
:func:`grid_tasks.db.migrate` (``config.attributes["connection"]``), from
``-x url=...`` on the alembic command line, or from ``GRID_TASKS_DATABASE_URL``
/ the state directory default.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from grid_tasks.db.engine import default_url, make_engine
from grid_tasks.db.models import Base, EnumText, UTCDateTime

config = context.config
target_metadata = Base.metadata


def _render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    """Write our column types as the plain SQL types they store, so migrations
    never import model code that may change later."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, EnumText):
        return f"sa.String(length={obj.impl.length})"
    return False


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        compare_server_default=True,
        render_item=_render_item,
        **kwargs,  # type: ignore[arg-type]
    )


def _url() -> str:
    return context.get_x_argument(as_dictionary=True).get("url") or default_url()


def run_offline() -> None:
    """Emit SQL for the migrations instead of running them (``alembic upgrade --sql``)."""
    _configure(url=_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run_with(connection: Connection) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds tables instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _run_with(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
