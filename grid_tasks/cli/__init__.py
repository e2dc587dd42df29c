"""The ``grid-tasks`` command line.

Subcommands live in their own modules and are imported only when used, so
``grid-tasks --help`` stays fast (it lists them from ``COMMANDS``, importing
none) and one broken optional dependency cannot take the whole CLI down.
Register a command by adding it to ``COMMANDS`` with its short help.

Each command is a new process whose answer includes its start and its exit, and the
cyclic garbage collector walked the whole heap for nothing at both ends:

* a command's module is imported with the collector paused (:meth:`LazyGroup.get_command`):
  imports make objects that live as long as the process, and the ~250 collections
  ``showstart``'s imports triggered cost ~0.1 s of it;
* at exit the interpreter's last collections are skipped (:func:`_exit_lightly`): they
  walked every object of SQLAlchemy, Redis and the rest again, a third of a second of
  an otherwise one-second ``showq``.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.util
import re
import sys
import textwrap
from typing import Any

import click

from grid_tasks.errors import GridTasksError, SourceError

# name -> ("module:attribute" of a click command or group, its short help).
# The short help is the command's ``get_short_help_str()`` before truncation:
# ``grid-tasks --help`` lists the commands from this table without importing
# any of them (tests/cli/test_cli_help.py keeps it equal to the commands).
COMMANDS: dict[str, tuple[str, str]] = {
    "worker": (
        "grid_tasks.cli.worker:worker",
        "Run a worker: node daemon (--rm RM --node NODE), gatekeeper (--rm "
        "RM) or scheduler.",
    ),
    "nodes": (
        "grid_tasks.cli.nodes:nodes",
        "List nodes: state (Idle/Running/Down/Unknown), resources and last "
        "heartbeat.",
    ),
    "up": (
        "grid_tasks.cli.stack:up",
        "Run a whole grid here: private Redis, database, scheduler with beat, "
        "node daemons.",
    ),
    "demo": (
        "grid_tasks.cli.stack:demo",
        "Bring the demo grid up, check every node through its daemon, run a "
        "few GRAM jobs on each resource manager (live showq, then their "
        "outputs), then a coallocated (DUROC) job across both RMs whose 5 "
        "processes pass one barrier and compute a global result; bring it "
        "down.",
    ),
    "rsl": (
        "grid_tasks.cli.rsl:rsl",
        "Globus RSL job requests (GRAM and DUROC).",
    ),
    "query": (
        "grid_tasks.cli.query:query",
        "List the grid resources matching a MIL (MESSIAHS Interface "
        "Language) query.",
    ),
    "maui-config": (
        "grid_tasks.cli.mauicfg:maui_config",
        "Read a maui.cfg FILE and print the effective Maui configuration.",
    ),
    "simulate": (
        "grid_tasks.cli.simulate:simulate",
        "Replay SWF workload TRACE(s) through the Maui scheduling core and "
        "report.",
    ),
    "db": (
        "grid_tasks.cli.db:db",
        "Manage the grid's SQL database (SQLite or PostgreSQL).",
    ),
    "submit": (
        "grid_tasks.cli.submit:submit",
        "Submit a GRAM job described in RSL and follow it to the end.",
    ),
    "output": (
        "grid_tasks.cli.output:output",
        "Print the captured stdout (or --stderr) of JOB, an id or GRAM contact.",
    ),
    "showq": (
        "grid_tasks.cli.showq:showq",
        "Show the queue as Maui does: ACTIVE, IDLE and BLOCKED jobs.",
    ),
    "checkjob": (
        "grid_tasks.cli.jobs:checkjob",
        "Show one job in full: state, credentials, times, nodes, "
        "reservations, GRAM error, history and, when it waits, why it does "
        "not start.",
    ),
    "canceljob": (
        "grid_tasks.cli.jobs:canceljob",
        "Cancel jobs (ids or contacts): an idle job fails at once, a "
        "running one is killed on its nodes.",
    ),
    "checknode": (
        "grid_tasks.cli.jobs:checknode",
        "Show one node: state (from its heartbeat when Redis is reachable), "
        "configured, dedicated, reserved and available processors, its jobs "
        "and reservations.",
    ),
    "setres": (
        "grid_tasks.cli.reservations:setres",
        "Reserve resources of an RM for the users, groups, accounts, "
        "classes or QoS given.",
    ),
    "showres": (
        "grid_tasks.cli.reservations:showres",
        "List reservations: administrative (setres), grid (broker) and job "
        "reservations, including the one every running job holds until its "
        "walltime ends.",
    ),
    "releaseres": (
        "grid_tasks.cli.reservations:releaseres",
        "Release administrative reservations by name; their resources "
        "become free and the RM's scheduler iterates.",
    ),
    "showstart": (
        "grid_tasks.cli.planning:showstart",
        "When could REQUEST start? REQUEST is a waiting job (id or "
        "contact), PROCS@DURATION (e.g.",
    ),
    "showbf": (
        "grid_tasks.cli.planning:showbf",
        "Show backfill windows: how many processors are free now and for "
        "how long, without delaying any reservation (priority jobs' "
        "included).",
    ),
    "showstats": (
        "grid_tasks.cli.stats:showstats",
        "Usage statistics from the accounting records: jobs (done, failed), "
        "processor-hours, mean queue wait and expansion factor, plus what "
        "runs now; per credential rows show the fairshare usage each RM's "
        "scheduler computes (decayed over FSDEPTH windows of FSINTERVAL) "
        "next to its target.",
    ),
    "diagnose": (
        "grid_tasks.cli.stats:diagnose",
        "Diagnose the scheduler: -p each idle job's priority and "
        "weighted components; -j [JOB] why jobs do not start; -n "
        "[NODE] node state, processors configured/ "
        "dedicated/reserved/available, heartbeat age and problems (stale "
        "heartbeat, over-allocation, jobs on a node that is down); -r "
        "[RES] reservations with their problems (expired, overlapping, "
        "overcommitting, leaked grid token); -f fairshare.",
    ),
    "runtime": (
        "grid_tasks.cli.runtime:runtime",
        "Runtime calls of a coallocated job's process (barrier, ranks, "
        "messages).",
    ),
    "coalloc": (
        "grid_tasks.cli.coalloc:coalloc",
        "Coallocated (DUROC) jobs: one GRAM subjob per component of a '+' "
        "multi-request, released together through a start barrier.",
    ),
    "tokens": (
        "grid_tasks.cli.tokens:tokens",
        "Reservation tokens: list, show, release, and scan the timelines.",
    ),
    "keys": (
        "grid_tasks.cli.keys:keys",
        "Message-signing keys and certificates (no CA: each host signs its "
        "own).",
    ),
    "gridmap": (
        "grid_tasks.cli.keys:gridmap",
        "The grid map: which submitting identities run as which local "
        "accounts, per RM.",
    ),
    "beat": (
        "grid_tasks.cli.beat:beat",
        "Run Celery beat with failover: start two, only the lease holder "
        "sends.",
    ),
    "metrics": (
        "grid_tasks.cli.metrics:metrics",
        "Prometheus-style metrics: queue depths, jobs, nodes, iterations, "
        "reservations.",
    ),
    "selftest": (
        "grid_tasks.cli.selftest:selftest",
        "Prove reliability or security on a private grid started for the "
        "purpose (its own Redis, database, scheduler, beats and node "
        "daemons - nothing shared is touched).",
    ),
}


def _exit_lightly() -> None:
    """Move every object to the collector's permanent generation, so the collections
    the interpreter runs while shutting down find nothing to walk.  (It runs after the
    atexit handlers registered later; nothing is skipped but the search for unreachable
    cycles, which the ending process never needs: the system takes its memory back.)"""
    gc.freeze()


atexit.register(_exit_lightly)


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use.

    Its help lists the subcommands from ``COMMANDS``, so ``grid-tasks --help``
    imports none of them; ``grid-tasks CMD ...`` imports only CMD's module.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is not None or name not in COMMANDS:
            return cmd
        module_name, attr = COMMANDS[name][0].split(":")
        collecting = gc.isenabled()
        gc.disable()  # (imports make no garbage worth a pass: see the module docstring)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("grid_tasks.cli"):
                return None  # command not built yet
            raise
        finally:
            if collecting:
                gc.enable()
        return plain_help(getattr(module, attr))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the subcommands as ``click.Group.format_commands`` does, from ``COMMANDS``."""
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            short = self._short_help(ctx, name)
            if short is not None:
                rows.append((name, short))
        if not rows:
            return
        # click's own limit: three times the default spacing.
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl([(name, _shorten(short, limit)) for name, short in rows])

    def _short_help(self, ctx: click.Context, name: str) -> str | None:
        """NAME's untruncated short help, or None when it is not listed."""
        cmd = super().get_command(ctx, name)
        if cmd is not None:  # added with add_command: already loaded
            return None if cmd.hidden else cmd.get_short_help_str(sys.maxsize)
        module_name = COMMANDS[name][0].split(":")[0]
        if importlib.util.find_spec(module_name) is None:
            return None  # command not built yet
        return COMMANDS[name][1]

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GridTasksError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            report_error(exc)
            ctx.exit(1)


_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


def plain_text(text: str) -> str:
    """``text`` with every reST literal (double backticks, as Sphinx reads the
    docstrings that click makes into help) written plain, as --help should show it."""
    return _RST_LITERAL.sub(r"\1", text)


def plain_help(command: click.Command) -> click.Command:
    """Strip reST literals from the help of ``command``, of its parameters and, for a
    group, of every subcommand; returns ``command`` (changed in place)."""
    for attr in ("help", "short_help", "epilog"):
        if getattr(command, attr, None):
            setattr(command, attr, plain_text(getattr(command, attr)))
    for param in command.params:
        if getattr(param, "help", None):
            param.help = plain_text(param.help)  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command


def _shorten(text: str, limit: int) -> str:
    """Truncate a short help to LIMIT columns as click's ``get_short_help_str`` does."""
    if len(text) <= limit:
        return text
    if limit < len("..."):
        return "..."
    return textwrap.shorten(text, limit, placeholder="...", break_on_hyphens=False)


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
