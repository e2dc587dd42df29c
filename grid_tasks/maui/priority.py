"""Job priority as Maui computes it, and the fairshare usage it depends on.

Priority = sum over components (CRED, FS, SERV, RES) of the component weight times the
weighted sum of its subcomponents, plus the job's own system priority:

* CRED: USER/GROUP/ACCOUNT/CLASS/QOS priorities of the job's credentials;
* FS:   per credential, target share minus effective usage (percent), a floor target
        (``N+``) only ever raises priority and a ceiling (``N-``) only lowers it;
* SERV: QUEUETIME in minutes, XFACTOR = (queued + walltime) / walltime;
* RES:  PROC (processors), NODE (nodes asked for), MEM (MB), PE (processor equivalents).
"""

from __future__ import annotations

from collections import defaultdict
from math import ceil
from typing import Callable, Iterable

from grid_tasks.maui.config import CREDENTIAL_KINDS, FairsharePolicy, FSTarget, SchedulerConfig
from grid_tasks.maui.model import Job, PriorityBreakdown

_SUBCOMPONENTS = {
    "CRED": ("USER", "GROUP", "ACCOUNT", "CLASS", "QOS"),
    "FS": ("FSUSER", "FSGROUP", "FSACCOUNT", "FSCLASS", "FSQOS"),
    "SERV": ("QUEUETIME", "XFACTOR"),
    "RES": ("PROC", "NODE", "MEM", "PE"),
}
_COMPONENT_WEIGHT = {"CRED": "CREDWEIGHT", "FS": "FSWEIGHT", "SERV": "SERVWEIGHT", "RES": "RESWEIGHT"}


_CREDENTIAL_ATTRS = {"USER": "user", "GROUP": "group", "ACCOUNT": "account",
                     "CLASS": "job_class", "QOS": "qos"}


def credential(job: Job, kind: str) -> str | None:
    """The job's name for a credential kind (USER, GROUP, ACCOUNT, CLASS, QOS)."""
    return getattr(job, _CREDENTIAL_ATTRS[kind])


def processor_equivalents(job: Job, machine: tuple[float, float, float, float]) -> float:
    """Maui's PE: the job's largest share of any configured resource, in processors."""
    procs = machine[0] or 1.0
    asked = (job.procs, job.tasks * job.mem_per_task, job.tasks * job.disk_per_task, job.tasks * job.swap_per_task)
    return procs * max(a / total for a, total in zip(asked, machine) if total > 0) if any(machine) else job.procs


class Fairshare:
    """Decayed per-credential usage over FSDEPTH windows of FSINTERVAL seconds.

    DEDICATEDPS charges dedicated processor-seconds, DEDICATEDPES processor-equivalent
    seconds; UTILIZEDPS has no per-job utilization to go by here and charges like DEDICATEDPS.
    """

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        #: configured (procs, memory, disk, swap) of the whole machine, for PE
        self.machine: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
        # kind -> name -> window index -> usage; window totals per kind
        self.usage: dict[str, dict[str, dict[int, float]]] = {k: defaultdict(dict) for k in CREDENTIAL_KINDS}
        self.totals: dict[int, float] = defaultdict(float)
        self._cache: dict[tuple[str, str, float], float] = {}  # percent per (kind, name, now)
        self._slots: dict[tuple, list[dict[int, float]]] = {}  # usage rows per credential tuple
        self._slots_of = self.usage

    @property
    def enabled(self) -> bool:
        return self.config.fs_policy is not FairsharePolicy.NONE

    def usage_rate(self, job: Job) -> float:
        """What one second of the job costs under FSPOLICY."""
        if self.config.fs_policy is FairsharePolicy.DEDICATEDPES:
            return processor_equivalents(job, self.machine)
        return float(job.procs)

    def charge(self, job: Job, procs: float, start: float, end: float) -> None:
        """Account ``procs`` (a usage rate) over ``[start, end)`` to every credential of the job."""
        if not self.enabled or end <= start:
            return
        self._cache.clear()
        self._add(self._rows(job), procs, start, end)

    def charge_running(self, due: list[tuple[Job, float, float]]) -> None:
        """:meth:`charge` each ``(job, start, end)`` at its :meth:`usage_rate`, in order
        (the same additions as one call per job, without the per-call set-up: every
        iteration charges every running job)."""
        if not self.enabled or not due:
            return
        self._cache.clear()
        rate, add, rows = self.usage_rate, self._add, self._rows
        for job, start, end in due:
            if end > start:
                add(rows(job), rate(job), start, end)

    def _rows(self, job: Job) -> list[dict[int, float]]:
        """The usage rows of the job's credentials, looked up once per credential tuple."""
        if self._slots_of is not self.usage:  # usage replaced (state restored): rows are new
            self._slots, self._slots_of = {}, self.usage
        creds = (job.user, job.group, job.account, job.job_class, job.qos)
        slots = self._slots.get(creds)
        if slots is None:
            slots = self._slots[creds] = [self.usage[kind][name] for kind in CREDENTIAL_KINDS
                                          if (name := credential(job, kind)) is not None]
        return slots

    def _add(self, slots: list[dict[int, float]], procs: float, start: float, end: float) -> None:
        width = self.config.fs_interval
        totals = self.totals
        t = start
        while t < end:
            w = int(t // width)
            upto = min(end, (w + 1) * width)
            amount = procs * (upto - t)
            totals[w] += amount
            for slot in slots:
                slot[w] = slot.get(w, 0.0) + amount
            t = upto

    def percent(self, kind: str, name: str, now: float) -> float:
        """Effective usage share of ``name`` in percent, older windows decayed by FSDECAY."""
        hit = self._cache.get((kind, name, now))
        if hit is not None:
            return hit
        cfg = self.config
        current = int(now // cfg.fs_interval)
        mine = total = 0.0
        slots = self.usage[kind].get(name, {})
        for i in range(cfg.fs_depth):
            factor = cfg.fs_decay ** i
            mine += factor * slots.get(current - i, 0.0)
            total += factor * self.totals.get(current - i, 0.0)
        value = self._cache[(kind, name, now)] = 100.0 * mine / total if total > 0 else 0.0
        return value

    def delta(self, kind: str, name: str | None, now: float) -> float:
        if name is None:
            return 0.0
        target: FSTarget | None = self.config.fs_targets.get(kind, {}).get(name)
        if target is None:
            return 0.0
        diff = target.value - self.percent(kind, name, now)
        if target.mode == "+":
            return max(diff, 0.0)
        if target.mode in ("-", "^"):
            return min(diff, 0.0)
        return diff


def _nodes_asked(job: Job) -> int:
    return ceil(job.tasks / job.tasks_per_node) if job.tasks_per_node else 1


def subcomponents(job: Job, now: float, config: SchedulerConfig, fs: Fairshare) -> dict[str, float]:
    """Raw (unweighted) value of every priority subcomponent."""
    queued = max(0.0, now - job.submit_time)
    raw = {
        "QUEUETIME": queued / 60.0,
        "XFACTOR": (queued + job.walltime) / job.walltime,
        "PROC": float(job.procs),
        "NODE": float(_nodes_asked(job)),
        "MEM": float(job.tasks * job.mem_per_task),
        "PE": processor_equivalents(job, fs.machine),
    }
    for kind in CREDENTIAL_KINDS:
        name = credential(job, kind)
        raw[kind] = config.cred_priority.get(kind, {}).get(name, 0.0) if name is not None else 0.0
        raw["FS" + kind] = fs.delta(kind, name, now) if fs.enabled else 0.0
    return raw


def breakdown(job: Job, now: float, config: SchedulerConfig, fs: Fairshare) -> PriorityBreakdown:
    """The ``diagnose -p`` row of one job."""
    raw = subcomponents(job, now, config, fs)
    w = config.weights
    comps: dict[str, float] = {}
    for comp, subs in _SUBCOMPONENTS.items():
        comps[comp] = w[_COMPONENT_WEIGHT[comp]] * sum(w[s + "WEIGHT"] * raw[s] for s in subs)
    comps["SYSTEM"] = job.priority
    return PriorityBreakdown(job.id, sum(comps.values()), comps)


RawFn = Callable[[Job, float, SchedulerConfig, "Fairshare"], float]


def _queue_time(job: Job, now: float, config: SchedulerConfig, fs: Fairshare) -> float:
    return max(0.0, now - job.submit_time) / 60.0


def _xfactor(job: Job, now: float, config: SchedulerConfig, fs: Fairshare) -> float:
    return (max(0.0, now - job.submit_time) + job.walltime) / job.walltime


def _fs_of(kind: str) -> RawFn:
    attr = _CREDENTIAL_ATTRS[kind]

    def fs_delta(job: Job, now: float, config: SchedulerConfig, fs: Fairshare) -> float:
        return fs.delta(kind, getattr(job, attr), now) if fs.enabled else 0.0
    return fs_delta


def _cred_of(kind: str) -> RawFn:
    attr = _CREDENTIAL_ATTRS[kind]

    def cred(job: Job, now: float, config: SchedulerConfig, fs: Fairshare) -> float:
        name = getattr(job, attr)
        return config.cred_priority.get(kind, {}).get(name, 0.0) if name is not None else 0.0
    return cred


#: Subcomponents that do not change while a job waits (credentials, size).
FIXED = frozenset(("USER", "GROUP", "ACCOUNT", "CLASS", "QOS", "PROC", "NODE", "MEM", "PE"))

#: Each subcomponent's raw value as a function, looked up once per ranking instead of
#: a chain of string tests per job and subcomponent.
RAW: dict[str, RawFn] = {
    "QUEUETIME": _queue_time,
    "XFACTOR": _xfactor,
    "PROC": lambda job, now, config, fs: float(job.procs),
    "NODE": lambda job, now, config, fs: float(_nodes_asked(job)),
    "MEM": lambda job, now, config, fs: float(job.tasks * job.mem_per_task),
    "PE": lambda job, now, config, fs: processor_equivalents(job, fs.machine),
    **{"FS" + kind: _fs_of(kind) for kind in CREDENTIAL_KINDS},
    **{kind: _cred_of(kind) for kind in CREDENTIAL_KINDS},
}


def _raw(job: Job, sub: str, now: float, config: SchedulerConfig, fs: Fairshare) -> float:
    """One subcomponent's raw value (the same numbers :func:`subcomponents` gives)."""
    return RAW[sub](job, now, config, fs)


def score(job: Job, now: float, config: SchedulerConfig, fs: Fairshare,
          terms: Terms | None = None) -> float:
    """``breakdown(...).total`` computed without the breakdown: only weighted terms
    (``terms``: :func:`weighted_terms` of ``config``, when scoring many jobs)."""
    total = 0.0
    for cw, subs in weighted_terms(config) if terms is None else terms:
        part = 0.0
        for sub, sw in subs:
            part += sw * _raw(job, sub, now, config, fs)
        total += cw * part
    return total + job.priority


#: (component weight, ((subcomponent, weight), ...)) per component with a nonzero weight.
Terms = tuple[tuple[float, tuple[tuple[str, float], ...]], ...]


def weighted_terms(config: SchedulerConfig) -> Terms:
    """The nonzero weights of ``config`` in :data:`_SUBCOMPONENTS` order: :func:`score`
    sums in that order, so every score is the same float as summing over all weights."""
    w = config.weights
    return tuple((w[_COMPONENT_WEIGHT[comp]],
                  tuple((sub, w[sub + "WEIGHT"]) for sub in subs if w[sub + "WEIGHT"]))
                 for comp, subs in _SUBCOMPONENTS.items() if w[_COMPONENT_WEIGHT[comp]])


def prioritize(jobs: Iterable[Job], seq: dict[str, int], now: float, config: SchedulerConfig,
               fs: Fairshare) -> list[Job]:
    """Jobs in decreasing priority; submission order breaks ties.  (The scheduler ranks
    its queue with :class:`grid_tasks.maui.ranking.Ranking`, which gives the same order
    faster for big queues.)"""
    jobs = list(jobs)
    if config.fifo and not any(j.priority for j in jobs):
        return sorted(jobs, key=lambda j: (j.submit_time, seq[j.id]))
    terms = weighted_terms(config)  # once, not once per job
    scored = [(-score(j, now, config, fs, terms), seq[j.id], j) for j in jobs]
    scored.sort(key=lambda x: (x[0], x[1]))
    return [j for _, _, j in scored]
