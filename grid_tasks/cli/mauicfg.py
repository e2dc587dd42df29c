"""``grid-tasks maui-config``: read a maui.cfg and show the configuration it yields."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.maui.cfg import (
    CREDENTIAL_KINDS,
    OBJECT_PARAMETERS,
    PARAMETERS,
    MauiConfig,
    MauiConfigError,
    load_maui_config,
)
from grid_tasks.maui.cfg.types import ValueType


def _show(vtype: ValueType | None, value: Any) -> str:
    """A value as it would be written in maui.cfg, escaped for rich markup."""
    if vtype is None:
        return escape(str(value))
    try:
        return escape(vtype.format(value))
    except (TypeError, ValueError, AttributeError):
        return escape(str(value))


def _parameters_table(cfg: MauiConfig, show_all: bool) -> Table:
    table = Table(title="Parameters" + (" (all)" if show_all else " (set in the file)"))
    table.add_column("parameter", no_wrap=True)
    for column in ("value", "Maui default", "line", "category"):
        table.add_column(column, overflow="fold")
    names = list(PARAMETERS) if show_all else list(cfg.settings)
    for name in names:
        param = PARAMETERS[name]
        where = cfg.where(name)
        value = _show(param.type, cfg.get(name))
        default = _show(param.type, param.default)
        style = "bold" if where is not None and cfg.get(name) != param.default else None
        table.add_row(name, value, default, str(where[0]) if where else "", param.category,
                      style=style)
    for name, by_index in cfg.indexed.items():
        for index, setting in by_index.items():
            table.add_row(escape(f"{name}[{index}]"), _show(PARAMETERS[name].type, setting.value),
                          _show(PARAMETERS[name].type, PARAMETERS[name].default),
                          str(setting.line), PARAMETERS[name].category)
    return table


def _objects_table(title: str, param: str, entries: dict[str, dict[str, Any]]) -> Table:
    keys = OBJECT_PARAMETERS[param].keys
    table = Table(title=title)
    table.add_column("name")
    table.add_column("settings", overflow="fold")
    for name, values in entries.items():
        shown = " ".join(f"{k}={_show(keys.get(k), v)}" for k, v in values.items()
                         if v not in ((), {}))
        table.add_row(escape(name), shown)
    return table


def _print_rich(cfg: MauiConfig, show_all: bool, console: Console) -> None:
    console.print(_parameters_table(cfg, show_all))
    changed = cfg.non_default()
    console.print(f"{len(cfg.settings)} parameter(s) set, {len(changed)} differ from "
                  f"Maui's defaults" + (f": {', '.join(changed)}" if changed else ""))
    for kind in CREDENTIAL_KINDS:
        entries = cfg.credentials(kind)
        if entries:
            console.print(_objects_table(f"{kind}CFG credentials", f"{kind}CFG", entries))
    groups = (("SRCFG standing reservations", "SRCFG", cfg.standing_reservations),
              ("NODECFG nodes", "NODECFG", cfg.node_configs),
              ("RMCFG resource managers", "RMCFG", cfg.resource_managers))
    for title, param, entries in groups:
        if entries:
            console.print(_objects_table(title, param, entries))
    if cfg.modules:
        console.print(f"modules: {escape(', '.join(cfg.modules))}", highlight=False)
    for warning in cfg.warnings:
        # One line per warning, never wrapped, so that it can be grepped.
        console.print(f"[yellow]{escape(str(warning))}[/yellow]", highlight=False,
                      soft_wrap=True)


@click.command("maui-config")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the configuration as JSON.")
@click.option("--all", "show_all", is_flag=True,
              help="List every known parameter with its effective value, not only those set.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when there are warnings.")
def maui_config(file: str, as_json: bool, show_all: bool, strict: bool) -> None:
    """Read a maui.cfg FILE and print the effective Maui configuration.

    Shows the parameters the file sets (with Maui's defaults beside them), the
    USERCFG/GROUPCFG/ACCOUNTCFG/CLASSCFG/QOSCFG credentials, SRCFG standing
    reservations, NODECFG and RMCFG entries, then warnings (unknown parameters or
    keys, each with its line).  Every wrong value or line is an error shown with a
    caret under it, all of them in one run; the exit status is then 1.

    Example: grid-tasks maui-config config/maui.cfg --json
    """
    try:
        cfg = load_maui_config(file)
    except MauiConfigError as exc:
        if not as_json:
            raise  # the CLI group prints it with its caret display and exits 1
        click.echo(json.dumps({"error": exc.to_dict()}, indent=2))
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(cfg.to_dict(), indent=2))
    else:
        _print_rich(cfg, show_all, wide_console())
    if strict and cfg.warnings:
        sys.exit(1)
