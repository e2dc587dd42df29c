"""``grid-tasks beat``: a highly available Celery beat (run two; one leads)."""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any

import click
import redis
from rich.table import Table

from grid_tasks.celery_app import check_connectivity, create_app
from grid_tasks.cli.console import wide_console
from grid_tasks.errors import ConfigError, ConnectivityError
from grid_tasks.ha.config import SCHEDULER_CLASS, BeatOptions, beat_config
from grid_tasks.ha.status import Entry, read_status
from grid_tasks.security.connections import redis_client
from grid_tasks.settings import Settings


def load_includes(modules: tuple[str, ...]) -> dict[str, Any]:
    """Import each module (it may call ``register_periodic``); gather their ``BEAT_SCHEDULE``."""
    entries: dict[str, Any] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"--include {name}: cannot import it ({exc})",
                              source="command line", key="--include") from None
        extra = getattr(module, "BEAT_SCHEDULE", None) or {}
        if not isinstance(extra, dict):
            raise ConfigError(f"--include {name}: BEAT_SCHEDULE must be a dict of entries",
                              source=name, key="BEAT_SCHEDULE")
        entries.update(extra)
    return entries


def beat_argv(loglevel: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The ``celery beat`` arguments (without the program name).

    The loop interval comes from ``beat_max_loop_interval`` (lease / 3) in the
    app's configuration: celery's ``--max-interval`` takes whole seconds only.
    """
    return ["beat", "-S", SCHEDULER_CLASS, "-l", loglevel, *extra]


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--lease", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="Seconds a silent leader stays leader "
                   "(default: $GRID_TASKS_BEAT_LEASE or 10).")
@click.option("--poll", type=click.FloatRange(min=0.01), metavar="SECONDS",
              help="Seconds between a standby's attempts to lead "
                   "(default: $GRID_TASKS_BEAT_POLL or lease/10, at most 1).")
@click.option("--name", help="This beat's identity (default: host:pid:random).")
@click.option("--include", multiple=True, metavar="MODULE",
              help="Import MODULE first (it may register periodic tasks or define "
                   "BEAT_SCHEDULE); repeatable.")
@click.option("--topology", type=click.Path(path_type=Path),
              help="Grid topology (default: $GRID_TASKS_TOPOLOGY or config/grid.toml).")
@click.option("-l", "--loglevel", default="INFO", show_default=True, help="Celery log level.")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Check broker and Redis first.")
@click.option("--status", "show_status", is_flag=True,
              help="Do not run: show the leader, the beats and the schedule.")
@click.option("--json", "as_json", is_flag=True, help="With --status: print JSON.")
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def beat(lease: float | None, poll: float | None, name: str | None, include: tuple[str, ...],
         topology: Path | None, loglevel: str, check: bool, show_status: bool, as_json: bool,
         celery_args: tuple[str, ...]) -> None:
    """Run Celery beat with failover: start two, only the lease holder sends.

    The schedule (every per-RM periodic task, e.g. each RM's Maui iteration)
    lives in Redis; the beats compete for a lease there.  Kill the leader and a
    standby takes over within LEASE + POLL seconds, continuing the schedule
    where it stopped.  Arguments after ``--`` go to ``celery beat``.

    \b
    Examples:
      grid-tasks beat                      # on two hosts: one leads, one waits
      grid-tasks beat --lease 5 --poll 0.5
      grid-tasks beat --status [--json]    # who leads, what is scheduled
    """
    if topology is not None:
        os.environ["GRID_TASKS_TOPOLOGY"] = str(topology)
    settings = Settings.from_env()
    if show_status:
        _show_status(settings, as_json)
        return
    options = BeatOptions.from_env(lease=lease, poll=poll, identity=name).with_identity()
    static = load_includes(include)
    if check:
        check_connectivity(settings)
    app = create_app(settings)
    app.conf.update(beat_config(settings, options))
    app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **static}
    app.start(beat_argv(loglevel, celery_args))


def _show_status(settings: Settings, as_json: bool) -> None:
    client = redis_client(settings, settings.redis_url, socket_connect_timeout=3)
    try:
        status = read_status(client)
    except redis.RedisError as exc:
        raise ConnectivityError(f"cannot read the beat state from Redis: {exc}") from None
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
        return
    console = wide_console()
    now = time.time()
    lead = status.leader or "nobody (lease free)"
    members = Table(title=f"beats - leader: {lead}, lease {status.lease_ttl_ms / 1000:.1f} s left")
    for col in ("beat", "role", "for", "last seen", "sent"):
        members.add_column(col)
    for m in status.members:
        members.add_row(m.identity, m.role, f"{now - m.since:.0f} s", f"{now - m.seen:.1f} s ago",
                        str(m.emitted))
    console.print(members)
    console.print(schedule_table(status.entries, now))


def schedule_table(entries: list[Entry], now: float) -> Table:
    """One line per entry and RM: the task's short name beside the RM it runs for (the
    full dotted entry names differ only in their '[rm]' tail, which a table may cut)."""
    table = Table(title="schedule")
    for col in ("task", "RM", "every", "last run", "next due"):
        table.add_column(col)
    for e in sorted(entries, key=lambda e: (e.task, str(e.kwargs.get("rm", "")), e.name)):
        table.add_row(e.task.rsplit(".", 1)[-1], str(e.kwargs.get("rm", "-")),
                      "-" if e.every is None else f"{e.every:g} s",
                      "-" if e.last_run_at is None else f"{now - e.last_run_at:.1f} s ago",
                      "-" if e.due_at is None else f"in {e.due_at - now:.1f} s")
    return table
