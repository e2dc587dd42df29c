"""``grid-tasks worker``: a node daemon, a gatekeeper or the scheduler (a thin ``celery worker``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
from celery.bin.celery import celery

from grid_tasks.celery_app import (
    SCHEDULER_QUEUE, check_connectivity, create_app, gatekeeper_queue, iteration_queue,
    node_queue,
)
from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.hostlist import expand
from grid_tasks.ha.config import SCHEDULER_CLASS, BeatOptions, beat_config
from grid_tasks.node import heap
from grid_tasks.node.harness import (
    ENV_HARNESS, ENV_HARNESS_JOBS, HarnessSpec, JobsMode, check_identities, parse_identities,
)
from grid_tasks.node.worker_config import node_worker_argv
from grid_tasks.private_files import private_dir
from grid_tasks.scheduler_queues import shared_iteration_queues
from grid_tasks.security.startup import check_node_account
from grid_tasks.settings import Settings
from grid_tasks.topology import RMKind, SchedulerPlacement, load_topology


#: A node daemon's tasks (launches, node checks) are short, so it runs them one after
#: another in the consumer itself.  A launch handed to a pool thread shares the
#: interpreter with the consumer thread that received it: on a busy host its job's
#: processes started milliseconds later (bench_duroc).  Gatekeepers and schedulers keep
#: threads: DUROC subjob watchers and iterations block on Redis and SQL side by side.
NODE_POOL, DEFAULT_POOL = "solo", "threads"
#: A scale harness serves many identities: launches of different ones overlap (their
#: reports then leave in one batch) instead of queueing behind one another.
HARNESS_POOL, HARNESS_CONCURRENCY = "threads", 4
#: An RM's own iteration worker: one thread in one process, so the RM's iterations run
#: one after another beside no other RM's and its caches (the queue cache, the idle
#: queue) stay warm in that process; the consumer thread stays free to take the next.
ITERATIONS_POOL, ITERATIONS_CONCURRENCY = "threads", 1


def default_pool(rm: str | None, node: str | None) -> str:
    """The Celery pool a worker of this role runs when ``--pool`` is not given."""
    return NODE_POOL if rm and node else DEFAULT_POOL


def worker_argv(*, rm: str | None, node: str | None, scheduler: bool, gatekeepers: bool,
                beat: bool, settings: Settings, pool: str | None, concurrency: int | None,
                loglevel: str, extra: tuple[str, ...] = (),
                harness: HarnessSpec | None = None,
                iterations: tuple[str, ...] = ()) -> list[str]:
    """The ``celery worker`` arguments for this role (without the program name);
    ``pool`` None: the role's :func:`default_pool`."""
    if harness is not None:
        return harness_argv(harness, pool, concurrency, loglevel, extra)
    if iterations:
        return iterations_argv(iterations, pool, concurrency, loglevel, extra)
    pool = pool or default_pool(rm, node)
    queues: list[str] = []
    if scheduler:
        queues.append(SCHEDULER_QUEUE)
        topo = load_topology(settings.topology_file) if settings.topology_file.exists() \
            else None
        if topo is not None:  # without one, the worker's bootstep follows the file
            queues += shared_iteration_queues(topo)
        if gatekeepers:
            topo = topo or load_topology(settings.topology_file)
            queues += [gatekeeper_queue(name) for name in topo.rms]
    if rm and node:
        queues.append(node_queue(rm, node))
        name = f"{node}.{rm}"
    elif rm:
        queues.append(gatekeeper_queue(rm))
        name = f"gram.{rm}"
    else:
        name = "scheduler"
    argv = ["worker", "-Q", ",".join(queues), "-n", f"{name}@%h", "-P", pool,
            "-l", loglevel, "-E", "--without-mingle", "--without-gossip"]
    if concurrency:
        argv += ["-c", str(concurrency)]
    if rm and node and settings.lean_nodes:
        argv += node_worker_argv()  # worker heartbeat events every 30 s, not 2 s
    if beat:
        # Always the HA scheduler (lease in Redis): an embedded beat must never run
        # beside HA beats as a second, unfenced source of the same periodic tasks.
        private_dir(settings.state_dir)
        # for `celery worker`, -S is --statedb: the beat scheduler needs the long option
        argv += ["-B", "--scheduler", SCHEDULER_CLASS,
                 "-s", str(settings.state_dir / "celerybeat-schedule")]
    return argv + list(extra)


def harness_argv(spec: HarnessSpec, pool: str | None, concurrency: int | None,
                 loglevel: str, extra: tuple[str, ...] = ()) -> list[str]:
    """``celery worker`` arguments of a scale harness: every identity's node queue."""
    queues = [node_queue(rm, node) for rm, node in spec.identities]
    rm, node = spec.identities[0]
    return ["worker", "-Q", ",".join(queues), "-n", f"harness.{node}.{rm}@%h",
            "-P", pool or HARNESS_POOL, "-c", str(concurrency or HARNESS_CONCURRENCY),
            "-l", loglevel, "-E", "--without-mingle", "--without-gossip",
            *node_worker_argv(), *extra]


def iterations_argv(rms: tuple[str, ...], pool: str | None, concurrency: int | None,
                    loglevel: str, extra: tuple[str, ...] = ()) -> list[str]:
    """``celery worker`` arguments of the iteration worker of ``rms`` (their queues only)."""
    queues = [iteration_queue(rm) for rm in rms]
    return ["worker", "-Q", ",".join(queues), "-n", f"iterations.{'+'.join(rms)}@%h",
            "-P", pool or ITERATIONS_POOL, "-c", str(concurrency or ITERATIONS_CONCURRENCY),
            "-l", loglevel, "-E", "--without-mingle", "--without-gossip", *extra]


def iterations_of(value: str | None, settings: Settings) -> tuple[str, ...]:
    """The RMs ``--iterations A,B`` names, checked against the topology: Maui RMs (a
    Slurm cluster schedules itself); a UsageError names what is wrong."""
    if not value:
        return ()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise click.UsageError("--iterations needs resource manager names (A or A,B)")
    try:
        topology = load_topology(settings.topology_file)
        for name in names:
            if topology.rm(name).kind is not RMKind.MAUI:
                raise click.UsageError(f"--iterations {name}: a Slurm cluster schedules its "
                                       "jobs itself; no iteration runs for it")
    except GridTasksError as exc:
        raise click.UsageError(str(exc)) from None
    shared = [n for n in names if topology.rm(n).scheduler is not SchedulerPlacement.OWN]
    if shared:  # allowed (the RM's lock keeps one iteration at a time), but not isolated
        click.echo(f"warning: {', '.join(shared)} not marked scheduler = \"own\" in "
                   f"{settings.topology_file}: the shared scheduler workers serve its "
                   "iterations too", err=True)
    return names


def harness_spec_of(rm: str | None, nodes: str | None, jobs: str,
                    settings: Settings) -> HarnessSpec:
    """The harness ``--rm``/``--nodes``/``--jobs`` ask for: ``--nodes`` a node list of
    ``--rm`` (default: all its nodes) or ``RM:NODES;RM2:NODES``; checked against the
    topology (a UsageError names what is wrong)."""
    try:
        if nodes and ":" in nodes:
            identities = parse_identities(nodes)
        elif rm:
            names = expand(nodes) if nodes else [n.name for n in
                                                 load_topology(settings.topology_file).rm(rm).nodes]
            identities = [(rm, name) for name in names]
        else:
            raise click.UsageError("--harness needs --rm RM [--nodes LIST] or "
                                   "--nodes 'RM:LIST;RM2:LIST'")
        spec = HarnessSpec(tuple(identities), JobsMode(jobs))
        check_identities(load_topology(settings.topology_file), spec)
    except GridTasksError as exc:
        raise click.UsageError(str(exc)) from None
    return spec


def configured_app(settings: Settings, *, beat: bool) -> Any:
    """The worker's Celery app; with ``beat`` configured for the HA beat scheduler
    (``GRID_TASKS_BEAT_*`` lease options)."""
    app = create_app(settings)
    heap.install(app)  # a worker process of its own (not an in-process test worker)
    if beat:
        app.conf.update(beat_config(settings, BeatOptions.from_env().with_identity()))
    return app


@click.command()
@click.option("--rm", "rm", metavar="RM", help="Resource manager this worker serves.")
@click.option("--node", metavar="NODE", help="Node of --rm: run as that node's daemon.")
@click.option("--harness", is_flag=True,
              help="Scale harness (tests and benchmarks): one process serving many node "
                   "identities (--rm RM --nodes 'n[001-100]'), each with its own queue, "
                   "registration and heartbeat.")
@click.option("--nodes", metavar="LIST",
              help="With --harness: node list of --rm (default: all its nodes), or "
                   "'RM:LIST;RM2:LIST'.")
@click.option("--jobs", type=click.Choice([m.value for m in JobsMode]),
              default=JobsMode.REAL.value, show_default=True,
              help="With --harness: run job parts for real, or stand in for them (reported "
                   "started and exited 0 at once: the grid's own costs alone).")
@click.option("--scheduler", is_flag=True,
              help="Consume the scheduler queue and the iteration queues of every RM not "
                   "marked scheduler = \"own\" in the topology.")
@click.option("--iterations", metavar="RM[,RM]",
              help="Run these RMs' iterations only, in this one process (one thread): for "
                   "RMs marked scheduler = \"own\", whose deep queues must not slow the "
                   "others.")
@click.option("--gatekeepers", is_flag=True,
              help="With --scheduler: also serve every RM's gatekeeper queue (small grids).")
@click.option("--beat", is_flag=True,
              help="Embed a highly available beat (the iteration schedule; Redis lease, so "
                   "it may run beside `grid-tasks beat` standbys).")
@click.option("--topology", type=click.Path(path_type=Path),
              help="Grid topology file (default: $GRID_TASKS_TOPOLOGY or config/grid.toml).")
@click.option("-P", "--pool", type=click.Choice(["threads", "prefork", "solo"]),
              help=f"Celery pool [default: {NODE_POOL} for a node daemon, whose short "
                   f"tasks then start jobs sooner on a busy host; {DEFAULT_POOL} otherwise].")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), help="Pool size.")
@click.option("-l", "--loglevel", default="INFO", show_default=True, help="Celery log level.")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Check broker and Redis (and, for --scheduler, the database) first.")
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(rm: str | None, node: str | None, harness: bool, nodes: str | None, jobs: str,
           scheduler: bool, iterations: str | None, gatekeepers: bool, beat: bool,
           topology: Path | None,
           pool: str | None, concurrency: int | None, loglevel: str, check: bool,
           celery_args: tuple[str, ...]) -> None:
    """Run a worker: node daemon (--rm RM --node NODE), gatekeeper (--rm RM) or scheduler.

    A node daemon registers its resources (as configured in the topology) and
    heartbeats into Redis; stop it and the node shows Unknown after the
    heartbeat TTL.  Settings come from GRID_TASKS_* variables.  Arguments after
    ``--`` go to ``celery worker`` unchanged.

    \b
    Examples:
      grid-tasks worker --rm rmA --node node1     node daemon of rmA/node1
      grid-tasks worker --rm rmA                  rmA's GRAM gatekeeper (gram.rmA)
      grid-tasks worker --scheduler --beat        scheduler queue and beat
      grid-tasks worker --iterations rmA          rmA's iterations, in a process of their own
      grid-tasks worker --rm rmA -- --autoscale=4,1
      grid-tasks worker --harness --rm rmA --nodes 'n[001-100]' --jobs standin
    """
    if topology is not None:
        os.environ["GRID_TASKS_TOPOLOGY"] = str(topology)
    settings = Settings.from_env()
    spec = None
    if harness:
        if node or scheduler or gatekeepers or beat or iterations:
            raise click.UsageError("--harness serves node identities only (no --node, "
                                   "--scheduler, --iterations, --gatekeepers or --beat)")
        spec = harness_spec_of(rm, nodes, jobs, settings)
        check_node_account(settings.gridmap_file, settings.single_user)
    else:
        if nodes:
            raise click.UsageError("--nodes goes with --harness")
        if iterations and (rm or node or scheduler or gatekeepers or beat):
            raise click.UsageError("--iterations runs iterations only (no --rm, --node, "
                                   "--scheduler, --gatekeepers or --beat)")
        if not iterations:
            _validate(rm, node, scheduler, gatekeepers, settings)
    own = iterations_of(iterations, settings) if not harness else ()
    argv = worker_argv(rm=rm, node=node, scheduler=scheduler, gatekeepers=gatekeepers,
                       beat=beat, settings=settings, pool=pool, concurrency=concurrency,
                       loglevel=loglevel, extra=celery_args, harness=spec, iterations=own)
    # The node daemon bootstep reads its identity from these (also for plain `celery worker`).
    for name in ("GRID_TASKS_RM", "GRID_TASKS_NODE", ENV_HARNESS, ENV_HARNESS_JOBS):
        os.environ.pop(name, None)
    if spec is not None:
        os.environ.update(spec.to_env())  # the harness bootstep's identities
        rm = None  # not a gatekeeper: the identities are its only queues
    if rm:
        os.environ["GRID_TASKS_RM"] = rm
    if node:
        os.environ["GRID_TASKS_NODE"] = node
    if check:
        check_connectivity(settings)
        if scheduler:
            sync_topology(settings)
        if own:  # iterations read the policy files
            load_topology(settings.topology_file).check_policy_files()
    code = run_celery(configured_app(settings, beat=beat), argv)
    if code:
        raise SystemExit(code)


def run_celery(app: Any, argv: list[str]) -> int:
    """``celery <argv>`` on ``app``; its exit code.  (``worker_main`` and ``app.start``
    drop it: a worker stopped by an unrecoverable error, say a node daemon that could
    not register, exited 0, and systemd or a supervisor took that for a clean stop.)"""
    celery.params[0].default = app  # what app.start does: --app is this app
    try:
        return int(celery.main(args=argv, standalone_mode=False) or 0)
    finally:
        celery.params[0].default = None


def sync_topology(settings: Settings) -> bool:
    """Bring the database's RMs and nodes in line with the topology (the scheduler owns it).

    Fails with a one-line ConnectivityError when the database is unreachable.
    """
    try:
        # node daemons hold no database credentials: they never load SQLAlchemy
        from grid_tasks import db
    except ImportError:
        return False
    topo = load_topology(settings.topology_file)
    try:
        factory = db.session_factory(db.get_engine(settings.database_url))
        with db.session_scope(factory) as session:
            db.sync_topology(session, topo)
    finally:
        db.dispose_engines(settings.database_url)
    return True


def _validate(rm: str | None, node: str | None, scheduler: bool, gatekeepers: bool,
              settings: Settings) -> None:
    if node and not rm:
        raise click.UsageError("--node needs --rm")
    if not rm and not scheduler:
        raise click.UsageError("say what to serve: --rm RM [--node NODE] and/or --scheduler")
    if gatekeepers and not scheduler:
        raise click.UsageError("--gatekeepers goes with --scheduler")
    if rm:
        topo = load_topology(settings.topology_file)
        if node:
            topo.node(rm, node)  # NotFoundError names the known ones
            check_node_account(settings.gridmap_file, settings.single_user)
        else:
            topo.rm(rm)
    elif not settings.topology_file.exists() and gatekeepers:
        raise ConfigError("topology file not found", source=str(settings.topology_file))
    if (scheduler or not node) and settings.topology_file.exists():
        # iterations read the policy files: without one an RM would never schedule
        load_topology(settings.topology_file).check_policy_files()
