"""Data model of the Maui core: nodes, jobs, reservations, ACLs and iteration results.

Everything here is a plain dataclass; the scheduler never mutates a caller's object
except through the documented node-state update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter
from typing import Iterable, Mapping

from grid_tasks.errors import GridTasksError
from grid_tasks.states import USABLE_STATES, NodeState  # noqa: F401 - USABLE_STATES re-exported

INFINITY = math.inf


class SchedulerError(GridTasksError):
    """A request to the scheduler that cannot be honoured (unknown job, bad value...)."""


class ReservationRefused(GridTasksError):
    """``reserve`` or ``add_reservation`` could not place the reservation; says why."""


class ReservationKind(str, Enum):
    """Who made a reservation."""

    ADMIN = "admin"  # setres / standing reservation / metascheduler reserve()
    JOB = "job"  # made by the scheduler for an idle priority job
    RUNNING = "running"  # the job reservation of a running job (held until walltime)


@dataclass(frozen=True)
class ACL:
    """Who may use a reservation's resources.

    Each field lists admitted names; a job is admitted when ANY listed credential
    matches (Maui's default OR semantics).  An ACL with every list empty admits nobody
    but the jobs named in ``jobs``.
    """

    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    accounts: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()
    qos: frozenset[str] = frozenset()
    jobs: frozenset[str] = frozenset()

    @classmethod
    def build(cls, **lists: object) -> "ACL":
        """``ACL.build(users=["u1"], jobs="17")``: any iterable or single string per field."""
        conv = {}
        for key, value in lists.items():
            if key not in cls.__dataclass_fields__:
                raise SchedulerError(f"unknown ACL field {key!r}")
            items = (value,) if isinstance(value, str) else tuple(value or ())  # type: ignore[arg-type]
            conv[key] = frozenset(str(v) for v in items)
        return cls(**conv)

    def admits(self, job: "Job") -> bool:
        """True when the job's id or one of its credentials is listed."""
        return (
            job.id in self.jobs
            or (job.user is not None and job.user in self.users)
            or (job.group is not None and job.group in self.groups)
            or (job.account is not None and job.account in self.accounts)
            or (job.job_class is not None and job.job_class in self.classes)
            or (job.qos is not None and job.qos in self.qos)
        )

    @property
    def empty(self) -> bool:
        return not (self.users or self.groups or self.accounts or self.classes or self.qos or self.jobs)


@dataclass
class Node:
    """A compute node as the resource manager reports it (MB for memory, disk, swap)."""

    name: str
    procs: int
    memory: int = 0
    disk: int = 0
    swap: int = 0
    features: frozenset[str] = frozenset()
    state: NodeState = NodeState.IDLE
    load: float = 0.0
    #: resources used by processes the scheduler did not start (R.Utilized)
    utilized_procs: int = 0
    utilized_memory: int = 0
    priority: float = 0.0

    def __post_init__(self) -> None:
        if not self.name:
            raise SchedulerError("a node needs a name")
        if self.procs < 0 or min(self.memory, self.disk, self.swap) < 0:
            raise SchedulerError(f"node {self.name}: resources cannot be negative")
        self.features = frozenset(self.features)
        self.state = NodeState(self.state)

    @property
    def usable(self) -> bool:
        return self.state in USABLE_STATES

    def copy(self) -> "Node":
        """A copy, unchecked (this one was checked): a scheduler changes its nodes'
        state in place, so a node list kept between schedulers hands out copies."""
        other = object.__new__(Node)
        other.__dict__.update(self.__dict__)
        return other


_NONE: frozenset[str] = frozenset()


def _frozen(values: frozenset[str] | set[str] | tuple[str, ...] | list[str]) -> frozenset[str]:
    """``values`` as a frozenset; every empty one is the shared :data:`_NONE`."""
    if not values:
        return _NONE
    return values if values.__class__ is frozenset else frozenset(values)


@dataclass(slots=True)
class Job:
    """A job as Maui sees it: tasks of identical shape, a walltime and credentials.

    Slotted: a scheduler keeps one per queued job (100,000 on a deep queue), and the
    per-instance dict was a third of its memory per job."""

    id: str
    tasks: int = 1
    procs_per_task: int = 1
    walltime: float = 1.0
    submit_time: float = 0.0
    user: str | None = None
    group: str | None = None
    account: str | None = None
    job_class: str | None = None
    qos: str | None = None
    mem_per_task: int = 0
    disk_per_task: int = 0
    swap_per_task: int = 0
    tasks_per_node: int | None = None
    features: frozenset[str] = frozenset()
    holds: frozenset[str] = frozenset()
    depends_on: tuple[str, ...] = ()
    early_start: bool = True
    priority: float = 0.0

    def __post_init__(self) -> None:
        # Cheap when the values are already normal (a str id, frozensets, no
        # dependencies): a deep queue's first load builds 100,000 jobs, and the plain
        # conversions were a third of each job's construction.
        if self.id.__class__ is not str:
            self.id = str(self.id)
        if self.tasks < 1 or self.procs_per_task < 0:
            raise SchedulerError(f"job {self.id}: needs at least one task and procs_per_task >= 0")
        if not self.walltime > 0:
            raise SchedulerError(f"job {self.id}: walltime must be positive, got {self.walltime!r}")
        if self.tasks_per_node is not None and self.tasks_per_node < 1:
            raise SchedulerError(f"job {self.id}: tasks_per_node must be >= 1")
        # the empty sets shared: an empty frozenset is 216 bytes, most jobs have two
        self.features = _frozen(self.features)
        self.holds = _frozen(self.holds)
        if self.depends_on:
            self.depends_on = tuple(str(d) for d in self.depends_on)
        elif self.depends_on.__class__ is not tuple:
            self.depends_on = ()

    @property
    def procs(self) -> int:
        """Processors the whole job dedicates."""
        return self.tasks * self.procs_per_task

    @property
    def simple(self) -> bool:
        """Only processors asked for: the pool fast path can place it."""
        return not (
            self.mem_per_task or self.disk_per_task or self.swap_per_task or self.features
            or self.holds or self.depends_on or self.tasks_per_node or not self.early_start
        )

    def task_demand(self) -> tuple[int, int, int, int]:
        """Per-task (procs, memory, disk, swap)."""
        return (self.procs_per_task, self.mem_per_task, self.disk_per_task, self.swap_per_task)


#: A job's shape and credentials: everything the scheduler's fixed facts about a waiting
#: job read (whether it may ever start, its fixed priority components; not its id,
#: walltime or submission), so a deep queue's jobs are judged once per distinct value
#: of it rather than once per job (a queue of 100,000 has a few dozen).
job_shape = attrgetter("tasks", "procs_per_task", "mem_per_task", "disk_per_task",
                       "swap_per_task", "tasks_per_node", "features", "user", "group",
                       "account", "job_class", "qos")


def by_shape(jobs: Iterable[Job]) -> tuple[list[int], list[Job]]:
    """Each job's shape as a number (its position in the second list), and the first
    job of each distinct :data:`job_shape`.  No shape is kept per job: 100,000 kept
    tuples made the cycle collector walk them again and again."""
    slots: dict[tuple, int] = {}
    reps: list[Job] = []

    def slot(job: Job, shape: tuple) -> int:
        at = slots.get(shape)
        if at is None:
            at = slots[shape] = len(reps)
            reps.append(job)
        return at
    return list(map(slot, jobs, map(job_shape, jobs))), reps


@dataclass
class Reservation:
    """An administrative or job reservation over [start, end).

    Resources: ``tasks`` x ``procs_per_task`` (and per-task memory) somewhere, or, with
    ``nodes`` given and ``tasks`` 0, every resource of those nodes.  ``allocation``
    is filled by the scheduler: node name -> tasks held there.
    """

    name: str
    start: float
    end: float = INFINITY
    acl: ACL = field(default_factory=ACL)
    tasks: int = 0
    procs_per_task: int = 1
    mem_per_task: int = 0
    nodes: tuple[str, ...] = ()
    kind: ReservationKind = ReservationKind.ADMIN
    job_id: str | None = None
    allocation: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.end > self.start:
            raise SchedulerError(f"reservation {self.name}: end {self.end} must be after start {self.start}")
        if self.tasks < 0 or (self.tasks == 0 and not self.nodes and self.kind is ReservationKind.ADMIN):
            raise SchedulerError(f"reservation {self.name}: give tasks or a node list")
        self.nodes = tuple(self.nodes)

    @classmethod
    def with_duration(cls, name: str, start: float, duration: float, **kw: object) -> "Reservation":
        return cls(name=name, start=start, end=start + duration, **kw)  # type: ignore[arg-type]

    @property
    def duration(self) -> float:
        return self.end - self.start

    def active(self, now: float) -> bool:
        return self.start <= now < self.end


@dataclass(frozen=True)
class Start:
    """Decision: start ``job_id`` at ``time`` on ``allocation`` (node -> tasks)."""

    job_id: str
    time: float
    allocation: Mapping[str, int]


@dataclass
class IterationResult:
    """Decisions of one iteration, in the order they were taken."""

    now: float
    started: list[Start] = field(default_factory=list)
    reservations_created: list[Reservation] = field(default_factory=list)
    reservations_released: list[Reservation] = field(default_factory=list)
    #: statistics: idle jobs considered, blocked by throttling, backfilled starts
    considered: int = 0
    throttled: int = 0
    backfilled: int = 0


@dataclass(frozen=True)
class StartEstimate:
    """``showstart``: the job could start at ``time`` on ``allocation``."""

    time: float
    allocation: Mapping[str, int]


@dataclass(frozen=True)
class Window:
    """``showbf``: ``procs`` processors on ``nodes`` nodes free from ``start`` for ``duration``."""

    procs: int
    nodes: int
    start: float
    duration: float


@dataclass(frozen=True)
class PriorityBreakdown:
    """One ``diagnose -p`` row: a job's total priority and its weighted components."""

    job_id: str
    total: float
    components: Mapping[str, float]
