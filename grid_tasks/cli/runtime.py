"""``grid-tasks runtime ...``: the job runtime calls for non-Python programs.

Run inside a process of a coallocated job (the same ``GRID_TASKS_*`` variables
as :mod:`grid_tasks.runtime`).  Typed failures (abort, timeout, misuse) print
``error: ...`` and exit 1, so ``grid-tasks runtime barrier || exit 1`` is the
shell form of the start barrier.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import click

from grid_tasks.duroc.store_models import Message
from grid_tasks.runtime.client import InterSubjobStructure, Runtime

TIMEOUT = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
                       metavar="SECONDS", help="Give up after this long (default: the "
                       "GRID_TASKS_*_TIMEOUT variable, else wait as long as it takes).")
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _runtime() -> Runtime:
    return Runtime.from_environ()


def _payload(data: str | None) -> bytes:
    """DATA as UTF-8, or stdin's raw bytes when DATA is omitted or ``-``."""
    if data is None or data == "-":
        return sys.stdin.buffer.read()
    return data.encode()


def _bytes_json(data: bytes) -> dict[str, Any]:
    try:
        text: str | None = data.decode()
    except UnicodeDecodeError:
        text = None
    return {"text": text, "base64": base64.b64encode(data).decode()}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def runtime() -> None:
    """Runtime calls of a coallocated job's process (barrier, ranks, messages).

    \b
    Examples, in a job's shell script:
      grid-tasks runtime barrier || exit 1
      rank=$(grid-tasks runtime rank)
      grid-tasks runtime send --rank 1 greeting "hello from $rank"
      grid-tasks runtime receive greeting --timeout 30 > msg.bin
      grid-tasks runtime bootstrap "$(hostname):5000"   # rank 0: all subjobs' infos
    """


@runtime.command()
@TIMEOUT
@JSON
def barrier(timeout: float | None, as_json: bool) -> None:
    """Enter the start barrier and wait for its release (exit 1 if aborted)."""
    structure = _runtime().barrier(timeout)
    if as_json:
        click.echo(json.dumps({"released": structure is not None,
                               "structure": structure.to_dict() if structure else None}))


@runtime.command()
def rank() -> None:
    """Print this process's rank in its subjob."""
    click.echo(_runtime().intra_subjob_rank())


@runtime.command()
def size() -> None:
    """Print the number of processes in this subjob."""
    click.echo(_runtime().intra_subjob_size())


@runtime.command()
@click.option("--rank", "to_rank", type=int, default=None,
              help="Destination process of this subjob (intra-subjob).")
@click.option("--subjob", "to_subjob", type=int, default=None,
              help="Destination subjob address (inter-subjob; rank 0 only).")
@click.argument("tag")
@click.argument("data", required=False)
def send(to_rank: int | None, to_subjob: int | None, tag: str, data: str | None) -> None:
    """Send DATA (or stdin's bytes) under TAG to --rank R or --subjob ADDRESS."""
    if (to_rank is None) == (to_subjob is None):
        raise click.UsageError("give exactly one of --rank and --subjob")
    rt = _runtime()
    if to_rank is not None:
        rt.intra_subjob_send(to_rank, tag, _payload(data))
    else:
        rt.inter_subjob_send(int(to_subjob or 0), tag, _payload(data))


@runtime.command()
@click.option("--inter", is_flag=True, help="Receive an inter-subjob message (rank 0 only).")
@click.argument("tag")
@TIMEOUT
@JSON
def receive(inter: bool, tag: str, timeout: float | None, as_json: bool) -> None:
    """Write the next message with TAG to stdout, as raw bytes (or --json)."""
    rt = _runtime()
    message: Message = (rt.inter_subjob_receive_message(tag, timeout) if inter
                        else rt.intra_subjob_receive_message(tag, timeout))
    if as_json:
        click.echo(json.dumps({"sender": message.sender, "tag": message.tag,
                               **_bytes_json(message.data)}))
        return
    sys.stdout.buffer.write(message.data)
    sys.stdout.buffer.flush()


@runtime.command()
@TIMEOUT
@JSON
def structure(timeout: float | None, as_json: bool) -> None:
    """Join the inter-subjob group (rank 0 only) and show its subjobs."""
    group = _runtime().inter_subjob_structure(timeout)
    if as_json:
        click.echo(json.dumps(group.to_dict()))
        return
    from rich.console import Console  # only the table needs rich: keep calls quick

    Console().print(_structure_table(group))


def _structure_table(group: InterSubjobStructure) -> Any:
    from rich.table import Table  # only the table needs rich: keep calls quick

    table = Table(title=f"inter-subjob group (local address {group.local_address})")
    for col in ("address", "label", "size", "start type", "local"):
        table.add_column(col, justify="right" if col in ("address", "size") else "left")
    for s in group.subjobs:
        table.add_row(str(s.address), s.label, str(s.size), s.start_type.value,
                      "*" if s.address == group.local_address else "")
    return table


@runtime.command()
@click.argument("info", required=False)
@click.option("--exchange", type=click.IntRange(min=0), default=0, show_default=True,
              help="Number of this exchange: give 1, 2, ... to later ones, so that "
                   "successive exchanges never mix.")
@TIMEOUT
@JSON
def bootstrap(info: str | None, exchange: int, timeout: float | None, as_json: bool) -> None:
    """Contribute INFO (or stdin) to the subjob exchange; print every subjob's, in order.

    Rank 0 only.  Without --json, one info per line (so infos should not contain
    newlines); with --json, a list with each info as text and base64.
    """
    rt = _runtime()
    infos = rt.bootstrap_subjob_exchange(_payload(info), timeout, exchange=exchange)
    if as_json:
        group = rt.inter_subjob_structure(timeout)
        click.echo(json.dumps({"local_index": group.local_index,
                               "infos": [_bytes_json(item) for item in infos]}))
        return
    for item in infos:
        sys.stdout.buffer.write(item.rstrip(b"\n") + b"\n")
    sys.stdout.buffer.flush()
