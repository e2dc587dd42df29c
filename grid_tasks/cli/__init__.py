"""The ``grid-tasks`` command line.

Subcommands live in their own modules and are imported only when used, so
``grid-tasks --help`` stays fast and one broken optional dependency cannot take
the whole CLI down.  Register a command by adding it to ``COMMANDS``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from grid_tasks.errors import GridTasksError, SourceError

# name -> "module:attribute" of a click command or group.
COMMANDS: dict[str, str] = {
    "worker": "grid_tasks.cli.worker:worker",
    "nodes": "grid_tasks.cli.nodes:nodes",
    "up": "grid_tasks.cli.stack:up",
    "demo": "grid_tasks.cli.stack:demo",
    "rsl": "grid_tasks.cli.rsl:rsl",
    "query": "grid_tasks.cli.query:query",
    "maui-config": "grid_tasks.cli.mauicfg:maui_config",
    "simulate": "grid_tasks.cli.simulate:simulate",
    "db": "grid_tasks.cli.db:db",
    "submit": "grid_tasks.cli.submit:submit",
    "showq": "grid_tasks.cli.jobs:showq",
    "checkjob": "grid_tasks.cli.jobs:checkjob",
    "canceljob": "grid_tasks.cli.jobs:canceljob",
    "checknode": "grid_tasks.cli.jobs:checknode",
    "setres": "grid_tasks.cli.reservations:setres",
    "showres": "grid_tasks.cli.reservations:showres",
    "releaseres": "grid_tasks.cli.reservations:releaseres",
    "showstart": "grid_tasks.cli.planning:showstart",
    "showbf": "grid_tasks.cli.planning:showbf",
    "showstats": "grid_tasks.cli.stats:showstats",
    "diagnose": "grid_tasks.cli.stats:diagnose",
    "runtime": "grid_tasks.cli.runtime:runtime",
    "coalloc": "grid_tasks.cli.coalloc:coalloc",
    "tokens": "grid_tasks.cli.tokens:tokens",
    "keys": "grid_tasks.cli.keys:keys",
    "gridmap": "grid_tasks.cli.keys:gridmap",
    "beat": "grid_tasks.cli.beat:beat",
    "metrics": "grid_tasks.cli.metrics:metrics",
    "selftest": "grid_tasks.cli.selftest:selftest",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is not None or name not in COMMANDS:
            return cmd
        module_name, attr = COMMANDS[name].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("grid_tasks.cli"):
                return None  # command not built yet
            raise
        return getattr(module, attr)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GridTasksError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            report_error(exc)
            ctx.exit(1)


def report_error(exc: GridTasksError) -> None:
    """Print a typed error on stderr: one line, plus a caret display for source errors."""
    text = exc.pretty() if isinstance(exc, SourceError) else str(exc)
    click.echo(f"error: {text}", err=True)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="grid_tasks")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """grid_tasks: coallocated parallel jobs across clusters.

    Globus RSL and DUROC coallocation, Legion-style brokering and Maui
    scheduling with advance reservations and backfill, on Celery, Redis and SQL.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
