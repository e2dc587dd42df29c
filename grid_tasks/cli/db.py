"""``grid-tasks db``: create, inspect and check the SQL schema (Alembic underneath)."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.db.engine import default_url, mask_url
from grid_tasks.db.migrations import (
    current_revision,
    downgrade as do_downgrade,
    head_revision,
    migrate,
    schema_drift,
)

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _url(ctx: click.Context) -> str:
    return ctx.obj["db_url"]


def _status(current: str | None, head: str) -> str:
    if current is None:
        return "not migrated"
    return "up to date" if current == head else "behind (run: grid-tasks db upgrade)"


def _describe(url: str) -> dict[str, Any]:
    current, head = current_revision(url), head_revision()
    return {"database": mask_url(url), "current": current, "head": head,
            "up_to_date": current == head, "status": _status(current, head)}


def _emit(info: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    table = Table(title=title, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in info.items():
        if isinstance(value, list):
            value = "\n".join(value) or "none"
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    wide_console().print(table)


@click.group("db")
@click.option("--url", metavar="URL",
              help="SQLAlchemy database URL. Default: GRID_TASKS_DATABASE_URL, else the "
                   "SQLite file in the state directory.")
@click.pass_context
def db(ctx: click.Context, url: str | None) -> None:
    """Manage the grid's SQL database (SQLite or PostgreSQL).

    \b
    Examples:
      grid-tasks db upgrade                  create or update the schema
      grid-tasks db current --json           which revision the database is at
      grid-tasks db check                    exit 1 if outdated or drifted
      grid-tasks db --url postgresql+psycopg://grid@db/grid upgrade
    """
    ctx.ensure_object(dict)
    ctx.obj["db_url"] = url or default_url()


@db.command()
@click.argument("revision", default="head")
@_JSON
@click.pass_context
def upgrade(ctx: click.Context, revision: str, as_json: bool) -> None:
    """Migrate the schema up to REVISION (default: head). Safe to repeat."""
    url = _url(ctx)
    before = current_revision(url)
    with Console(stderr=True).status(f"migrating {mask_url(url)} ..."):
        after = migrate(url, revision)
    _emit({"database": mask_url(url), "from": before, "to": after}, as_json, "upgraded")


@db.command()
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_JSON
@click.pass_context
def downgrade(ctx: click.Context, revision: str, yes: bool, as_json: bool) -> None:
    """Migrate the schema down to REVISION ('-1' for one step, 'base' for nothing).

    Downgrading drops tables or columns and the data in them.
    """
    url = _url(ctx)
    if not yes:
        click.confirm(f"Downgrade {mask_url(url)} to {revision}? Data may be lost", abort=True)
    before = current_revision(url)
    after = do_downgrade(url, revision)
    _emit({"database": mask_url(url), "from": before, "to": after}, as_json, "downgraded")


@db.command()
@_JSON
@click.pass_context
def current(ctx: click.Context, as_json: bool) -> None:
    """Show the database's revision and the newest one this grid_tasks ships."""
    _emit(_describe(_url(ctx)), as_json, "database")


@db.command()
@_JSON
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Check the database is at head and matches the models; exit 1 if not.

    Drift means the live schema differs from what the migrations create
    (a hand edit, or a model changed without a migration).
    """
    url = _url(ctx)
    info = _describe(url)
    info["drift"] = schema_drift(url) if info["current"] is not None else []
    info["ok"] = info["up_to_date"] and not info["drift"]
    _emit(info, as_json, "database check")
    if not info["ok"]:
        ctx.exit(1)
