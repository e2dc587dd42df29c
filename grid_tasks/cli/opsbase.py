"""What every operator command shares: its grid connections (:class:`OpsShell`), the
``-r RM`` and ``--json`` options, and printing a report as a table or JSON.

Kept apart from the commands, and light: each command module imports this and only
the operator modules it needs, so ``grid-tasks showq`` does not load the Maui core
or the RSL parser that ``checkjob`` or ``showstart`` need (start-up time).

While a command works, the objects alive when it began (its imports: SQLAlchemy, Redis,
the Maui core, some 90,000) sit in the collector's permanent generation
(:func:`gc.freeze`), and go back after (:func:`gc.unfreeze`, so nothing is kept from
collection past the command, e.g. in a test process).  Each full collection the work
triggered walked them all again: the first ORM query's mapper configuration took
0.15 s instead of 0.04 s.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from grid_tasks.cli.console import wide_console
from grid_tasks.cli.nodes import resolve_settings
from grid_tasks.ops.shell import OpsShell

JSON_HELP = "Print JSON for scripts instead of tables."


@contextmanager
def ops_shell() -> Iterator[OpsShell]:
    """The connections of one operator command, closed afterwards (and what was alive
before it left out of the collector's passes meanwhile: see the module docstring)."""
    gc.freeze()
    shell = OpsShell(resolve_settings(None))
    try:
        yield shell
    finally:
        shell.close()
        gc.unfreeze()


def emit(data: Any, as_json: bool, renderable: Any) -> None:
    """``--json``: JSON on stdout; else the rich renderable, as wide as needed."""
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        wide_console(minimum=120).print(renderable)


def rm_option(help_text: str = "Resource manager (cluster) to look at; default all.") -> Any:
    return click.option("-r", "--rm", "rm", metavar="RM", help=help_text)


json_option = click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
