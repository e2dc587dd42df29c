"""``grid-tasks up`` and ``grid-tasks demo``: a whole grid on this machine."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from celery.exceptions import TimeoutError as CeleryTimeout
from rich.console import Console
from rich.table import Table

from grid_tasks.celery_app import create_app
from grid_tasks.cli.nodes import nodes_table
from grid_tasks.embedded.demo_coalloc import run_demo_coalloc
from grid_tasks.embedded.demo_jobs import run_demo_jobs
from grid_tasks.embedded.flower import FLOWER_USER
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions, stop_on_signals
from grid_tasks.errors import ConnectivityError
from grid_tasks.node.tasks import NODE_CHECK, check_options
from grid_tasks.settings import Settings, default_config_file


def _options(topology: Path | None, state_dir: Path | None, flower: bool,
             flower_port: int | None, heartbeat: float, announce: bool = True,
             slurm: bool = False, slurm_required: bool = False,
             database_url: str | None = None) -> StackOptions:
    base = Settings.from_env()
    return StackOptions(
        topology_file=topology or default_config_file("demo-grid.toml"),
        state_dir=state_dir or base.state_dir / "embedded",
        flower=flower, flower_port=flower_port, heartbeat_interval=heartbeat,
        # the operator's own choices carry over: signing (on unless turned off) and
        # the grid map (none: a single-user grid running jobs as the invoking user)
        signing=base.signing.enabled, gridmap_file=base.gridmap_file, announce=announce,
        slurm=slurm or slurm_required, slurm_required=slurm_required,
        database_url=database_url)


@contextlib.contextmanager
def demo_state_dir(chosen: Path | None) -> Iterator[Path]:
    """The demo's state dir: the one asked for, else a fresh private folder removed
    afterwards, so the demo never shares a database or a stack.env with a running
    ``grid-tasks up`` (one grid, one state)."""
    if chosen is not None:
        yield chosen
        return
    folder = Path(tempfile.mkdtemp(prefix="grid-tasks-demo-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def stack_options(func: Any) -> Any:
    """The options ``up`` and ``demo`` share."""
    func = click.option("--heartbeat", type=click.FloatRange(min=0.1), default=1.0,
                        show_default=True, help="Node heartbeat interval, seconds "
                        "(a silent node is Unknown after two).")(func)
    func = click.option("--state-dir", type=click.Path(path_type=Path),
                        help="Where the stack keeps Redis, database and logs "
                        "(default: <GRID_TASKS_STATE_DIR>/embedded).")(func)
    func = click.option("--topology", type=click.Path(path_type=Path),
                        help="Grid topology (default: config/demo-grid.toml).")(func)
    return func


def start_stack(console: Console, options: StackOptions) -> EmbeddedStack:
    stack = EmbeddedStack(options)
    with console.status("starting the grid...") as status:
        stack.start(progress=lambda msg: status.update(msg + "..."))
    return stack


@click.command()
@stack_options
@click.option("--flower/--no-flower", default=False,
              help="Also start Flower (basic auth; password from $FLOWER_PASSWORD_FILE, "
              "else <state dir>/flower.password, made on first use).")
@click.option("--flower-port", type=click.IntRange(1, 65535), help="Flower port (default: free).")
@click.option("--for", "duration", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Stop after SECONDS instead of waiting for Ctrl-C.")
@click.option("--slurm", is_flag=True,
              help="Also run a private Slurm cluster (in the state dir, stopped with the "
              "grid) as RM slurm1; needs Debian's slurm-wlm and munge, and root.")
@click.option("--database-url", envvar="GRID_TASKS_DATABASE_URL", show_envvar=True,
              metavar="URL", help="The grid's database: a PostgreSQL URL such as "
              "postgresql+psycopg://grid@dbhost/grid (migrated once at start), default a "
              "SQLite file in the state dir.  Give a password through the environment "
              "variable, not here: a command line is visible to every user.")
@click.option("--node-harness", type=click.IntRange(min=0), default=0, metavar="K",
              help="Scale testing: K harness processes serve all the nodes between them "
                   "(each node keeps its own queue, registration and heartbeat) instead of "
                   "one node daemon per node [default: 0, real daemons].")
@click.option("--harness-jobs", type=click.Choice(["real", "standin"]), default="real",
              show_default=True, help="With --node-harness: run jobs for real, or report "
              "them started and exited at once (the grid's own costs alone).")
def up(topology: Path | None, state_dir: Path | None, heartbeat: float, flower: bool,
       flower_port: int | None, duration: float | None, slurm: bool,
       database_url: str | None, node_harness: int, harness_jobs: str) -> None:
    """Run a whole grid here: private Redis, database, scheduler with beat, node daemons.

    The database is a SQLite file in the state dir, or PostgreSQL with --database-url;
    --slurm adds a private Slurm cluster, --node-harness serves the nodes from a few
    processes (scale tests).

    Prints the GRID_TASKS_* variables that let other terminals use the grid
    (e.g. ``grid-tasks nodes``).  Ctrl-C or SIGTERM stops every process.
    """
    console = Console()
    _warn_password_in_argv(console, database_url)
    options = dataclasses.replace(
        _options(topology, state_dir, flower, flower_port, heartbeat,
                 slurm_required=slurm, database_url=database_url),
        node_harness=node_harness, harness_jobs=harness_jobs)
    with stop_on_signals():
        started = time.monotonic()
        stack = start_stack(console, options)
        try:
            _announce(console, stack, time.monotonic() - started)
            _serve(stack, duration)
        except KeyboardInterrupt:
            pass
        finally:
            stop_stack(console, stack)
    console.print("grid stopped; no process left behind.")


def _warn_password_in_argv(console: Console, database_url: str | None) -> None:
    """Say so when the database password came on the command line (``ps`` shows it)."""
    source = click.get_current_context().get_parameter_source("database_url")
    if database_url and source is click.core.ParameterSource.COMMANDLINE \
            and urlsplit(database_url).password:
        console.print("warning: --database-url holds a password, which any user of this "
                      "machine can read in its command line; pass the URL in "
                      "GRID_TASKS_DATABASE_URL instead", style="yellow", highlight=False)


def stop_stack(console: Console, stack: EmbeddedStack) -> None:
    """Stop every process of the stack.  The spinner is a courtesy: a closed stdout
    (`up | tee`, whose tee the Ctrl-C ended) must not keep the stop from running."""
    status = console.status("stopping the grid...")
    try:
        status.start()
    except OSError:
        status = None
    try:
        stack.stop()
    finally:
        if status is not None:
            with contextlib.suppress(OSError):
                status.stop()


def _announce(console: Console, stack: EmbeddedStack, elapsed: float) -> None:
    assert stack.settings is not None
    console.print(nodes_table(stack.registry().list_nodes(stack.topology), time.time(),
                              title=f"grid up in {elapsed:.1f} s"))
    console.print(f"Commands in other shells find this grid from any directory (or "
                  f"`--stack {stack.state_dir}`, when several run); or export:",
                  highlight=False, soft_wrap=True)
    for key, value in stack.settings.to_env().items():
        if key == "GRID_TASKS_DATABASE_URL" and urlsplit(value).password:
            value = _masked(value)  # the operator's own password: not into a log
        console.print(f"  export {key}='{value}'", soft_wrap=True, highlight=False)
    if stack.slurm_note:
        console.print(stack.slurm_note, highlight=False)
    if stack.flower_url:
        # the path, not the password: this output often ends in a shared log
        console.print(f"Flower: {stack.flower_url} (user {FLOWER_USER}, password in "
                      f"{stack.flower_password_file})", highlight=False)
    if stack.metrics_url:
        console.print(f"Metrics: {stack.metrics_url}", highlight=False)
    console.print(f"Logs: {stack.state_dir / 'logs'}.  Ctrl-C stops the grid.")


def _masked(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()


def _serve(stack: EmbeddedStack, duration: float | None) -> None:
    deadline = None if duration is None else time.monotonic() + duration
    while deadline is None or time.monotonic() < deadline:
        stack.supervisor.check()  # a dead daemon ends `up` with its log tail
        time.sleep(0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic())))


@click.command()
@stack_options
@click.option("--json", "as_json", is_flag=True, help="Print the node check results as JSON.")
def demo(topology: Path | None, state_dir: Path | None, heartbeat: float,
         as_json: bool) -> None:
    """Bring the demo grid up, check every node through its daemon, run a few GRAM jobs
    on each resource manager (live showq, then their outputs), then a coallocated (DUROC)
    job across both RMs whose 5 processes pass one barrier and compute a global result;
    bring it down.  Where Slurm is installed and this runs as root, a private Slurm
    cluster joins as RM slurm1 and the coallocated job gets a subjob there too.  Exits 1 if the coallocated job did not succeed.  Its state lives in
    a fresh temporary folder, removed afterwards, unless --state-dir says otherwise."""
    with demo_state_dir(state_dir) as folder:
        _run_demo(topology, folder, heartbeat, as_json)


def _run_demo(topology: Path | None, state_dir: Path, heartbeat: float,
              as_json: bool) -> None:
    console = Console(stderr=as_json)
    options = _options(topology, state_dir, False, None, heartbeat, announce=False,
                       slurm=True)
    with stop_on_signals():
        started = time.monotonic()
        stack = start_stack(console, options)
        try:
            console.print(nodes_table(stack.registry().list_nodes(stack.topology), time.time(),
                                      title=f"grid up in {time.monotonic() - started:.1f} s"))
            console.print(stack.slurm_note, highlight=False)
            results = run_node_checks(console, stack)
            run_demo_jobs(console, stack.settings)
            coalloc = run_demo_coalloc(console, stack.settings, stack.state_dir,
                                       slurm_rm=stack.slurm.rm if stack.slurm else None)
        finally:
            stop_stack(console, stack)
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        console.print(results_table(results))
    console.print(f"demo done in {time.monotonic() - started:.1f} s; grid stopped.")
    if coalloc["state"] != "DONE":
        raise SystemExit(1)


def run_node_checks(console: Console, stack: EmbeddedStack,
                    timeout: float = 30.0) -> list[dict[str, Any]]:
    """Send a node check to every node's queue and gather the answers."""
    assert stack.settings is not None
    app = create_app(stack.settings)
    sent = [(rm, node, app.send_task(NODE_CHECK, **check_options(rm, node)))
            for rm, node in stack.node_names()]
    results = []
    with console.status("checking nodes...") as status:
        for done, (rm, node, res) in enumerate(sent, start=1):
            status.update(f"checking nodes... {done}/{len(sent)} ({rm}/{node})")
            try:
                results.append(res.get(timeout=timeout))
            except CeleryTimeout:
                raise ConnectivityError(f"node {rm}/{node} did not answer its check "
                                        f"within {timeout:g} s") from None
    app.close()
    return results


def results_table(results: list[dict[str, Any]]) -> Table:
    """The node check answers: which daemon answered, configured vs detected resources."""
    table = Table(title="node check: each daemon reports itself")
    for col in ("node", "answered by", "configured", "detected", "load"):
        table.add_column(col)
    for r in results:
        conf, det = r.get("configured") or {}, r["detected"]
        table.add_row(
            f"{r['rm']}/{r['node']}", str(r["served_by"]["worker"]),
            f"{conf.get('procs', '-')} cpu {conf.get('memory_mb', '-')} MB",
            f"{det['procs']} cpu {det['memory_mb']} MB",
            " ".join(f"{x:.1f}" for x in r["facts"].get("load_average", [])) or "-")
    return table
