"""``grid-tasks tokens``: reservation tokens for operators (list, show, release, scan).

Tokens live in Redis (see :mod:`grid_tasks.legion.tokens`).  Redis is found like
``grid-tasks nodes`` finds it: ``GRID_TASKS_REDIS_URL``, else a running ``grid-tasks up``.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.cli.nodes import resolve_settings
from grid_tasks.errors import NotFoundError
from grid_tasks.legion.tokens import DEFAULT_PREFIX, ScanReport, Token, TokenStore, scan

_STACK = click.option("--stack", "stack_dir", type=click.Path(path_type=Path),
                      help="State dir of a running `grid-tasks up` (default: found like "
                           "`grid-tasks nodes` finds it).")
_PREFIX = click.option("--prefix", default=DEFAULT_PREFIX, show_default=True,
                       help="Redis key prefix of the token store.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _store(stack_dir: Path | None, prefix: str) -> TokenStore:
    settings = resolve_settings(stack_dir)  # TLS options of a rediss:// URL come along
    return TokenStore.from_url(settings.redis_url, prefix=prefix, settings=settings)


def _when(epoch: float, short: bool = False) -> str:
    at = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return at.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M:%S")


def _status(token: Token, now_ms: int) -> str:
    if token.confirmed:
        return "confirmed"
    left = (token.expires_ms - now_ms) / 1000  # type: ignore[operator]
    return f"{left:.1f}s left" if left > 0 else "expired"


def _tokens_table(tokens: list[Token], now_ms: int) -> Table:
    table = Table(title="reservation tokens", caption=f"{len(tokens)} tokens")
    table.box, table.show_edge, table.pad_edge = box.SIMPLE_HEAD, False, False
    table.collapse_padding = True
    for column in ("id", "resource", "start (UTC)", "secs", "procs", "owner/job", "status"):
        table.add_column(column, justify="right" if column in ("procs", "secs") else "left",
                         no_wrap=column != "owner/job", overflow="fold",
                         min_width=8 if column == "owner/job" else None)
    for t in tokens:
        table.add_row(t.id, escape(t.resource), _when(t.start, short=True),
                      f"{t.end - t.start:g}", str(t.procs), escape(t.owner), _status(t, now_ms))
    return table


@click.group("tokens")
def tokens() -> None:
    """Reservation tokens: list, show, release, and scan the timelines.

    \b
    Examples:
      grid-tasks tokens list --resource rmA/node1
      grid-tasks tokens show 3f2a9c01d4e5b6a7
      grid-tasks tokens release 3f2a9c01d4e5b6a7 --json
      grid-tasks tokens scan --purge
    """


@tokens.command("list")
@click.option("--resource", help="Only tokens on this resource (rm/node).")
@click.option("--owner", help="Only tokens of this broker attempt or job.")
@click.option("--all", "include_expired", is_flag=True,
              help="Include expired tokens not purged yet.")
@_STACK
@_PREFIX
@_JSON
def list_tokens(resource: str | None, owner: str | None, include_expired: bool,
                stack_dir: Path | None, prefix: str, as_json: bool) -> None:
    """List tokens, sorted by resource and start."""
    store = _store(stack_dir, prefix)
    found, now_ms = store.snapshot()
    found = [t for t in found
             if (include_expired or t.confirmed or t.expires_ms > now_ms)  # type: ignore[operator]
             and (resource is None or t.resource == resource)
             and (owner is None or t.owner == owner)]
    if as_json:
        click.echo(json.dumps([t.to_dict() for t in found], indent=2))
        return
    wide_console().print(_tokens_table(found, now_ms))


@tokens.command("show")
@click.argument("token_id")
@_STACK
@_PREFIX
@_JSON
def show(token_id: str, stack_dir: Path | None, prefix: str, as_json: bool) -> None:
    """Show one token, and whether it could start something now."""
    store = _store(stack_dir, prefix)
    token = store.get(token_id)
    if token is None:
        raise NotFoundError(f"no token {token_id} (released, expired and purged, or never "
                            "issued)")
    now_ms = store.server_ms()
    if as_json:
        click.echo(json.dumps({**token.to_dict(), "status": _status(token, now_ms)}, indent=2))
        return
    wide_console().print(_tokens_table([token], now_ms))


@tokens.command("release")
@click.argument("token_ids", nargs=-1, required=True)
@_STACK
@_PREFIX
@_JSON
def release(token_ids: tuple[str, ...], stack_dir: Path | None, prefix: str,
            as_json: bool) -> None:
    """Release tokens (confirmed ones too: an operator's override)."""
    released = _store(stack_dir, prefix).release(list(token_ids))
    if as_json:
        click.echo(json.dumps({"requested": len(token_ids), "released": released}))
        return
    click.echo(f"released {released} of {len(token_ids)} tokens")


def _scan_table(report: ScanReport) -> Table:
    verdict = "OK" if report.ok else "PROBLEMS"
    table = Table(title=f"token timelines: {verdict}",
                  caption=f"{report.live} live tokens, {report.confirmed} confirmed, "
                          f"{report.expired_unpurged} expired not yet purged")
    for column in ("resource", "capacity", "peak use", "overbooked at"):
        table.add_column(column, justify="left" if column == "resource" else "right")
    over = {}
    for resource, at, use, cap in report.overbooked:
        over.setdefault(resource, f"{_when(at)} ({use}/{cap})")
    for resource in sorted(set(report.capacities) | set(report.peaks)):
        table.add_row(escape(resource), str(report.capacities.get(resource, "?")),
                      str(report.peaks.get(resource, 0)), over.get(resource, ""))
    return table


@tokens.command("scan")
@click.option("--purge", is_flag=True, help="Remove expired tokens first.")
@_STACK
@_PREFIX
@_JSON
def scan_command(purge: bool, stack_dir: Path | None, prefix: str, as_json: bool) -> None:
    """Check every resource's timeline: never above capacity, confirmed groups whole.

    Exits 1 when a problem is found.
    """
    store = _store(stack_dir, prefix)
    purged = store.purge() if purge else 0
    began = time.perf_counter()
    report = scan(store)
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "purged": purged,
                               "seconds": round(time.perf_counter() - began, 4)}, indent=2))
    else:
        wide_console().print(_scan_table(report))
        for job, have, size in report.broken_groups:
            click.echo(f"job {job}: {have} of {size} confirmed tokens present", err=True)
    if not report.ok:
        raise SystemExit(1)
