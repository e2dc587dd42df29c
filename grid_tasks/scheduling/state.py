"""The pure Maui core loaded with one resource manager's durable state.

:func:`load_scheduler` is shared by the live iteration and the operator CLI
(showstart, showbf, diagnose): nodes from SQL (or the topology), their liveness
from the Redis :class:`~grid_tasks.node.registry.NodeRegistry`, running jobs,
idle jobs, the nodes of fenced launches until their fence deadline
(:mod:`grid_tasks.scheduling.fences`), administrative (and confirmed grid)
reservations from the SQL ``reservations`` table, fairshare usage from accounting, and the policy of the
RM's ``maui.cfg``.  Times handed to the core are POSIX seconds.

Reservation rows: ``nodes`` lists whole nodes held, or ``resources`` gives
``{"tasks": N, "procs_per_task": P, "mem_per_task": M}`` placed anywhere; the ACL
maps :data:`grid_tasks.db.ACL_KEYS` to lists of names.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from grid_tasks.db import AccountingRecord as Acct
from grid_tasks.db import ReservationKind, repository
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import Reservation as ReservationRow
from grid_tasks.db.models import ResourceManager as RmRow
from grid_tasks.errors import GridTasksError
from grid_tasks.gc_pause import collector_paused
from grid_tasks.maui import ACL, Job, Node, Reservation, Scheduler, SchedulerConfig
from grid_tasks.maui import ReservationKind as CoreKind
from grid_tasks.maui.cfg import MauiConfig, load_maui_config, parse_maui_config
from grid_tasks.maui.cfgbridge import scheduler_config
from grid_tasks.maui.model import USABLE_STATES
from grid_tasks.maui.priority import Fairshare
from grid_tasks.maui.queue_cache import QueueCache
from grid_tasks.scheduling.fences import hold_in
from grid_tasks.scheduling.idle_queue import idle_core_jobs, queue_cache, read_queue
from grid_tasks.scheduling.node_table import node_table
# re-exported: the loader's callers know them from here
from grid_tasks.scheduling.job_rows import (  # noqa: F401
    COLUMNS as _COLUMNS, DEFAULT_WALLTIME, IDLE_COLUMNS as _IDLE_COLUMNS, IDLE_MAUI_STATES,
    ORDER as _ORDER, core_job, epoch, holding_nodes,
)
from grid_tasks.scheduling.requester import Requester
from grid_tasks.states import JobState, MauiJobState, NodeState
from grid_tasks.utc import from_epoch  # noqa: F401 - re-exported for callers

log = logging.getLogger(__name__)

#: A running job past its walltime still holds its nodes for this much longer in
#: the plan, so a late finisher is never overcommitted.
OVERRUN_MARGIN = 60.0
_parsed: dict[tuple[str, float], MauiConfig] = {}
_configs: dict[int, tuple[MauiConfig, SchedulerConfig]] = {}


def maui_config(policy_file: str | os.PathLike[str] | None) -> MauiConfig:
    """The parsed maui.cfg (cached per file and modification time); Maui's defaults
    without a file.  A broken file raises its MauiConfigError (line and column)."""
    if not policy_file:
        return parse_maui_config("", source="<defaults>")
    path = Path(policy_file)
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise GridTasksError(f"policy file {path} cannot be read: {exc.strerror}") from None
    key = (str(path), mtime)
    cached = _parsed.get(key)
    if cached is None:
        cached = _parsed[key] = load_maui_config(path)
    return cached


def policy_config(policy_file: str | os.PathLike[str] | None) -> SchedulerConfig:
    """The SchedulerConfig of a maui.cfg (cached per file and modification time).

    Module names (MODULES) are left out: the live iteration builds the modules with
    their context (:func:`grid_tasks.schedmods.scheduler_parts`); planning views run none.
    """
    if not policy_file:
        return SchedulerConfig()
    cfg = maui_config(policy_file)
    cached = _configs.get(id(cfg))
    if cached is None or cached[0] is not cfg:
        config = dataclasses.replace(scheduler_config(cfg), modules=())
        cached = _configs[id(cfg)] = (cfg, config)
    return cached[1]


def _rm_config(session: Session, rm: str, topology: Any) -> SchedulerConfig:
    if topology is not None:
        spec = topology.rm(rm)
        return policy_config(str(spec.policy_file) if spec.policy_file else None)
    return policy_config(rm_policy_file(session, rm))


def _rm_nodes(session: Session, rm: str, topology: Any) -> tuple[Any, Any]:
    """The RM's nodes for a new core: from the topology a list, from SQL the shared node
    set of the kept :class:`~grid_tasks.scheduling.node_table.NodeTable` (and the table)."""
    if topology is not None:
        return [Node(n.name, n.procs, n.memory_mb or 0, n.disk_mb or 0, n.swap_mb or 0,
                     frozenset(n.features)) for n in topology.rm(rm).nodes], None
    table = node_table(session, rm)
    return table.nodeset, table


def rm_policy_file(session: Session, rm: str) -> str | None:
    """The RM's maui.cfg path, read by a prebuilt Core statement (every iteration asks);
    NotFoundError naming the known RMs for an unknown one."""
    found = session.connection().execute(_POLICY_FILE, {"rm": rm}).first()
    if found is None:  # the ORM read raises, naming the known RMs
        return repository.get_rm(session, rm).policy_file
    return found[0]


def _node_states(registry: Any, rm: str, nodes: Any,
                 table: Any = None) -> dict[str, NodeState]:
    """Liveness of the RM's nodes: for a kept node table only the silent nodes (one
    script call, :meth:`~grid_tasks.node.registry.NodeRegistry.silent`), else every one."""
    if registry is None:
        return {}
    if table is not None:
        if hasattr(registry, "silent"):
            return table.silent(registry)
        nodes = table.templates
    found = registry.states([(rm, n.name) for n in nodes])  # states only: every iteration
    return {node: state for (_, node), state in found.items()}


def core_reservation(row: ReservationRow) -> Reservation:
    """A SQL reservation row as a core reservation (admin kind, processors held)."""
    acl = {k: v for k, v in (row.acl or {}).items() if v}
    if row.kind is ReservationKind.GRID and row.owner_job_id is not None:
        acl.setdefault("jobs", [])
        acl["jobs"] = list(acl["jobs"]) + [str(row.owner_job_id)]
    res = row.resources or {}
    nodes = tuple(row.nodes or ())
    tasks = int(res.get("tasks", 0) or 0)
    return Reservation(
        name=row.name, start=epoch(row.start_time) or 0.0, end=epoch(row.end_time) or 0.0,
        acl=ACL.build(**acl), tasks=tasks, procs_per_task=int(res.get("procs_per_task", 1)),
        mem_per_task=int(res.get("mem_per_task", 0) or 0),
        nodes=nodes, kind=CoreKind.ADMIN,
    )


def _admin_reservations(session: Session, rm: str, now: float) -> list[ReservationRow]:
    rows = []
    for row in session.scalars(_RESERVATIONS, {"rm": rm, "after": from_epoch(now)}):
        if row.kind is ReservationKind.ADMIN or (row.kind is ReservationKind.GRID
                                                 and row.confirmed):
            rows.append(row)
    # administrative ones first: a grid reservation may nest inside one (see _lenders_for)
    return sorted(rows, key=lambda r: r.kind is ReservationKind.GRID)


def _lenders_for(row: ReservationRow) -> Job | None:
    """The credentials a grid reservation was made for (its requester): reservations
    admitting them lend it their resources, as when the RM accepted it."""
    if row.kind is not ReservationKind.GRID:
        return None
    who = Requester.from_dict((row.resources or {}).get("requester"))
    return who.probe(f"grid.{row.name}", 1, 1.0, 0.0)


# Built once (every iteration runs them): a statement object's cache key is memoized.
_LIVE = select(*_COLUMNS).where(JobRow.rm == bindparam("rm"),
                                JobRow.state.in_([JobState.PENDING, JobState.ACTIVE]))
_HOLDING = select(*_COLUMNS).where(holding_nodes(bindparam("rm"))).order_by(*_ORDER)
_LIVE = _LIVE.order_by(*_ORDER)
# (plain rows: every iteration reads them, and only these columns)
_POLICY_FILE = select(RmRow.policy_file).where(RmRow.name == bindparam("rm"))
_RESERVATIONS = select(ReservationRow).where(
    ReservationRow.rm == bindparam("rm"), ReservationRow.end_time > bindparam("after")) \
    .order_by(ReservationRow.start_time, ReservationRow.id)


def live_jobs(session: Session, rm: str, *, idle: bool = True) -> list[Any]:
    """PENDING and ACTIVE jobs of ``rm`` (rows with the job's attribute names) in one
    query: priority, then submission order.  ``idle=False``: only those holding nodes
    (running, or starting)."""
    return list(session.connection().execute(_LIVE if idle else _HOLDING, {"rm": rm}))


def idle_jobs(session: Session, rm: str) -> list[Any]:
    """The jobs of ``rm`` waiting in the idle queue (rows of :data:`_IDLE_COLUMNS`), in
    :func:`live_jobs` order."""
    stmt = select(*_IDLE_COLUMNS).where(JobRow.rm == rm, JobRow.state == JobState.PENDING,
                                        JobRow.maui_state.in_(IDLE_MAUI_STATES))
    return list(session.execute(stmt.order_by(*_ORDER)))


def _restore_running(sched: Scheduler, rows: list[Any], rm: str, now: float) -> None:
    for row in rows:
        starting = row.state is JobState.PENDING and row.maui_state is MauiJobState.STARTING
        if not (row.state is JobState.ACTIVE or starting) or not row.nodes_allocated:
            continue
        job = core_job(row)
        start = epoch(row.start_time) or now
        job.walltime = max(job.walltime, now - start + OVERRUN_MARGIN)
        try:
            sched.restore_running(job, start, dict(row.nodes_allocated), now)
        except GridTasksError as exc:  # e.g. a node removed from the topology
            log.warning("rm %s: running job %s not restored: %s", rm, row.id, exc)


@dataclass
class _Usage:
    """Fairshare usage charged from accounting records, kept between iterations.

    Accounting only grows (and loses records older than the fairshare windows), so
    each iteration charges just the records it has not seen: re-charging days of
    records every iteration cost as much as the scheduling itself.
    """

    fairshare: Fairshare
    charged: dict[int, float] = field(default_factory=dict)  # record id -> end (epoch)
    seen: int = 0  # the newest record id charged
    lock: threading.Lock = field(default_factory=threading.Lock)


_usage: dict[tuple[str, str, int], _Usage] = {}
_usage_lock = threading.Lock()
#: Accounting rows charged per query (bounded batches).
_CHUNK = 500


def _charge_fairshare(sched: Scheduler, session: Session, rm: str, now: float) -> None:
    cfg = sched.config
    if not sched.fairshare.enabled:
        return
    since = now - cfg.fs_interval * cfg.fs_depth
    window = {"rm": rm, "since": from_epoch(since)}
    key = (str(session.get_bind().url), rm, id(cfg))
    with _usage_lock:
        entry = _usage.get(key)
        if entry is None or entry.fairshare.config is not cfg:
            entry = _usage[key] = _Usage(_fresh_fairshare(sched))
    with entry.lock:
        # Records only grow (ids ascending): count the known ones still in the window
        # instead of reading every id; a different count means some vanished (or one
        # appeared below the newest charged), and the usage is charged anew.
        entry.charged = {i: end for i, end in entry.charged.items() if end >= since}
        known = session.connection().scalar(_CHARGED, {**window, "seen": entry.seen})
        if known != len(entry.charged):
            entry.fairshare, entry.charged, entry.seen = _fresh_fairshare(sched), {}, 0
        while _charge_rows(entry, session, window) == _CHUNK:
            pass
        sched.fairshare.usage = copy.deepcopy(entry.fairshare.usage)
        sched.fairshare.totals = copy.deepcopy(entry.fairshare.totals)
        sched.fairshare._cache.clear()  # noqa: SLF001 - percent cache of the replaced usage


_IN_WINDOW = (Acct.rm == bindparam("rm")) & (Acct.end_time >= bindparam("since")) \
    & Acct.start_time.isnot(None)
_CHARGED = select(func.count(Acct.id)).where(_IN_WINDOW, Acct.id <= bindparam("seen"))
# Plain column tuples, not ORM objects.
_UNCHARGED = select(Acct.id, Acct.job_id, Acct.procs, Acct.user, Acct.group, Acct.account,
                    Acct.job_class, Acct.qos, Acct.start_time, Acct.end_time).where(
    _IN_WINDOW, Acct.id > bindparam("seen")).order_by(Acct.id).limit(_CHUNK)


def _fresh_fairshare(sched: Scheduler) -> Fairshare:
    fs = Fairshare(sched.config)
    fs.machine = sched.fairshare.machine
    return fs


def _charge_rows(entry: _Usage, session: Session, window: dict[str, Any]) -> int:
    """Charge up to _CHUNK records of ``window`` newer than the newest charged, oldest
    id first; how many."""
    fs, count = entry.fairshare, 0
    for rec_id, job_id, procs, user, group, account, job_class, qos, started, ended in \
            session.connection().execute(_UNCHARGED, {**window, "seen": entry.seen}):
        count += 1
        start, end = epoch(started), epoch(ended)
        entry.charged[rec_id], entry.seen = end or 0.0, max(entry.seen, rec_id)
        if start is None or end is None or end <= start:
            continue
        job = Job(id=f"acct.{job_id}", tasks=max(1, procs or 1), user=user, group=group,
                  account=account, job_class=job_class, qos=qos)
        fs.charge(job, fs.usage_rate(job), start, end)
    return count


def load_scheduler(session: Session, rm: str, *, now: float, registry: Any = None,
                   topology: Any = None, observed: bool = False,
                   idle_if_free: bool = False, idle: bool = True,
                   config: SchedulerConfig | None = None, kept: bool = False) -> Scheduler:
    """The Maui core of ``rm`` at ``now`` (POSIX seconds) with its SQL state loaded.

    ``registry`` (a NodeRegistry) supplies node liveness: silent nodes are Unknown
    and get no new work; without it every node is taken as up (planning view).
    ``topology`` overrides the SQL node list and policy file.  ``observed``: scheduler
    modules will observe the iteration (the caller calls them, see
    :class:`~grid_tasks.maui.modules.Observers`), so the whole idle queue is read for them.
    ``config``: the RM's :func:`policy_config` if the caller has it (the iteration has
    read the RM's maui.cfg path already), else it is looked up here.
    ``idle_if_free``: leave the idle queue out when no job could start anyway
    (:meth:`~grid_tasks.maui.Scheduler.nothing_free`, not ``observed``): with a deep queue
    on a full machine, reading and ranking it was most of every iteration's cost.
    ``idle=False``: never read the idle queue (what holds nodes only): the operator
    commands replaying a cached plan's decisions need no idle job but the one asked about.
    ``kept``: the core takes and updates what this process keeps of the RM's queue
    between schedulers (its verdicts, ranking columns: a
    :class:`~grid_tasks.maui.queue_cache.QueueCache`); only for the RM's live iteration
    (one at a time, under the RM's lock) and the warm start before any: two schedulers
    must not share one at once.  Other loaders (plans, estimates) reuse the kept jobs
    and derive the rest afresh.
    Raises NotFoundError for an unknown RM.
    """
    # Its reads are Core statements on the session's connection (no ORM layer per
    # statement, and so no autoflush): the session's own changes are flushed first.
    session.flush()
    if config is None:
        config = _rm_config(session, rm, topology)  # also: NotFoundError for an unknown RM
    nodes, table = _rm_nodes(session, rm, topology)
    sched = Scheduler(nodes, config)
    _charge_fairshare(sched, session, rm, now)
    rows = live_jobs(session, rm, idle=False)
    # The queue is read before the reservations: every SELECT sees the newest commit
    # (SQLite outside a write, PostgreSQL's READ COMMITTED), so a reservation made
    # before a job was submitted is then always seen with that job, never the job
    # without it.  Read as the RM's kept image (idle_queue): cheap when unchanged.
    queue = read_queue(session, rm) if idle else None
    _restore_running(sched, rows, rm, now)
    hold_in(sched, session, rm, now)  # fenced launches' nodes, until their deadline
    for row in _admin_reservations(session, rm, now):
        try:
            # running jobs the ACL admits continue inside their reservation
            sched.add_reservation(core_reservation(row), now, take_in_admitted=True,
                                  within=_lenders_for(row))
        except GridTasksError as exc:
            log.warning("rm %s: reservation %s not honoured: %s", rm, row.name, exc)
    for name, state in _node_states(registry, rm, nodes, table).items():
        if state not in USABLE_STATES:
            sched.update_node(name, now, state=state)
    if queue is None or (idle_if_free and not observed and sched.nothing_free(now)):
        return sched
    with collector_paused():  # (a deep queue's load: see gc_pause)
        jobs = idle_core_jobs(session, rm, queue)
        sched.submit_many(jobs, now, queue_cache(queue) if kept else QueueCache())
    return sched
