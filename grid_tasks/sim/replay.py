"""A replay: traces on clusters, each with its own Maui core, on one clock.

>>> run = Replay([ClusterSpec("SDSC-SP2.swf.gz")], policy="easy", conventions="pyss")
>>> result = run.run()
>>> result.summary.mean_wait_s

Several :class:`ClusterSpec` give a multi-cluster replay: each trace feeds its
own cluster and scheduler, all advancing on the engine's single clock.  Before
:meth:`Replay.run`, a caller may reach :attr:`Replay.engine` to inject jobs into
any cluster or to watch starts (the metascheduler does).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid_tasks.errors import GridTasksError
from grid_tasks.sim.conventions import Convention, SimJob, get_convention
from grid_tasks.sim.core import new_scheduler, observe_modules, policy_label, read_config, to_core_job
from grid_tasks.sim.feasibility import NeverStart, limit_sources, never_start
from grid_tasks.sim.engine import Cluster, Engine, Progress
from grid_tasks.sim.metrics import Summary, summarize
from grid_tasks.sim.swf import SWFHeader, SWFReader

__all__ = ["ClusterSpec", "ClusterRun", "Replay", "ReplayError", "ReplayResult",
           "ReservationSpan", "parse_cluster_arg"]


class ReplayError(GridTasksError):
    """A replay cannot be set up: unknown machine size, bad cluster argument..."""


@dataclass
class ClusterSpec:
    """One cluster of a replay: its trace, size (default: the header's MaxProcs),
    name (default: the trace's file name) and a time offset added to its submits.

    With ``align="unix"`` the replay adds each trace's UnixStartTime shift, so traces
    recorded at different dates keep their real relative timing; ``"start"`` (the
    default) starts every trace at its own time 0.
    """

    trace: str | Path
    procs: int | None = None
    name: str | None = None
    offset: float = 0.0


def parse_cluster_arg(text: str) -> ClusterSpec:
    """``TRACE`` or ``TRACE:P`` (as the CLI's ``--cluster`` takes it)."""
    path, sep, size = text.rpartition(":")
    if sep and size.isdigit() and path:
        if int(size) < 1:
            raise ReplayError(f"--cluster {text}: the processor count must be at least 1")
        return ClusterSpec(path, int(size))
    return ClusterSpec(text)


def _trace_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".swf"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or str(path)


@dataclass
class ReservationSpan:
    """A reservation the core held during the Gantt window (for shading)."""

    cluster: str
    name: str
    kind: str
    job_id: str | None
    start: float
    end: float
    procs: int


@dataclass
class ClusterRun:
    """One cluster's part of a replay: its input, conventions and (after the run) metrics."""

    name: str
    trace: Path
    procs: int
    header: SWFHeader
    reader: SWFReader
    convention: Convention
    summary: Summary | None = None

    @property
    def bad_lines(self) -> int:
        return self.reader.bad_lines

    def info(self) -> dict[str, Any]:
        """Input facts for reports: lines read, bad, dropped, unmeasured."""
        return {"trace": str(self.trace), "procs": self.procs,
                "job_lines": self.reader.job_lines, "bad_lines": self.reader.bad_lines,
                "dropped": self.convention.dropped, "unmeasured": self.convention.unmeasured}


@dataclass
class ReplayResult:
    """What a replay produced: per-cluster metrics, jobs and counters."""

    policy: str
    conventions: str
    clusters: list[ClusterRun]
    jobs: list[SimJob]
    events: int
    iterations: int
    unfinished: int
    reservations: list[ReservationSpan] = field(default_factory=list)
    summary: Summary | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the overall headline, then one entry per cluster."""
        out: dict[str, Any] = {"policy": self.policy, "conventions": self.conventions}
        if self.summary is not None:
            out.update(self.summary.headline())
        out.update(events=self.events, iterations=self.iterations, unfinished=self.unfinished)
        out["clusters"] = {
            c.name: {**c.info(), **(c.summary.headline() if c.summary else {})}
            for c in self.clusters
        }
        return out


class Replay:
    """Set up the clusters of a replay; :meth:`run` plays it to the end."""

    def __init__(self, specs: list[ClusterSpec], *, policy: str | None = "easy",
                 config: str | Path | None = None, conventions: str = "default",
                 first: int | None = None, skip_bad: bool = False,
                 window: tuple[float, float] | None = None, align: str = "start") -> None:
        if not specs:
            raise ReplayError("a replay needs at least one trace")
        if first is not None and first < 1:
            raise ReplayError(f"--first must be at least 1, got {first}")
        if align not in ("start", "unix"):
            raise ReplayError(f"unknown alignment {align!r}: choose start or unix")
        self.policy = policy_label(policy, config)
        self.conventions = conventions
        self.window = window
        self.reservations: list[ReservationSpan] = []
        self._seen: set[tuple[str, str, float, float]] = set()
        self.engine = Engine()
        self.runs: list[ClusterRun] = []
        core_config, self.maui_config = read_config(policy, config)
        self.core_config = core_config
        self._inputs: list[tuple[Path, int, bool, int | None]] = []
        readers: list[SWFReader] = []
        try:
            for spec in specs:
                readers.append(SWFReader(spec.trace, skip_bad=skip_bad, first=first))
            offsets = _offsets(specs, readers, align)
            for spec, reader, offset in zip(specs, readers, offsets, strict=True):
                self._add(spec, reader, core_config, offset)
        except BaseException:
            for reader in readers:
                reader.close()
            raise
        self._watching = False
        if window is not None:
            self.watch(window)

    def watch(self, window: tuple[float, float]) -> None:
        """Record the reservations the cores hold during ``window`` (for a Gantt chart)."""
        self.window = window
        if not self._watching:
            self._watching = True
            self.engine.on_iterate(self._capture)

    def _add(self, spec: ClusterSpec, reader: SWFReader, core_config: Any,
             offset: float) -> None:
        path = Path(spec.trace)
        procs = spec.procs or reader.header.max_procs or reader.header.max_nodes
        if not procs:
            reader.close()
            raise ReplayError(f"{path}: the header gives no MaxProcs; say how many "
                              "processors the machine has (--procs P or TRACE:P)")
        name = spec.name or _trace_name(path)
        taken = {r.name for r in self.runs}
        base, n = name, 2
        while name in taken:
            name, n = f"{base}#{n}", n + 1
        convention = get_convention(self.conventions, procs)
        self._inputs.append((path, procs, reader.skip_bad, reader.first))
        run = ClusterRun(name, path, procs, reader.header, reader, convention)
        self.runs.append(run)
        cluster = self.engine.add_cluster(name, procs, new_scheduler(procs, core_config, name),
                                          to_core_job, _jobs(reader, convention, offset))
        observe_modules(self.engine, cluster, core_config)

    def never_start(self) -> list[NeverStart]:
        """The configured throttles some trace jobs exceed on their own (they can never
        start), one finding per limit; reads the traces once more, only when the
        configuration has throttles at all."""
        if not any(self.core_config.throttles.values()):
            return []
        sources = limit_sources(self.maui_config) if self.maui_config is not None else {}
        return never_start(self.core_config.throttles, self._core_jobs(), sources=sources)

    def _core_jobs(self) -> Iterator[Any]:
        for path, procs, skip_bad, first in self._inputs:
            convention = get_convention(self.conventions, procs)
            with SWFReader(path, skip_bad=skip_bad, first=first) as reader:
                for record in reader:
                    job = convention.convert(record)
                    if job is not None:
                        yield to_core_job(job)

    def expected_jobs(self) -> int | None:
        """Job lines the traces should hold (for a progress bar), if the headers say."""
        total = 0
        for run in self.runs:
            count = run.header.max_records or run.header.max_jobs
            if count is None:
                return None
            total += min(count, run.reader.first) if run.reader.first else count
        return total

    def submitted(self) -> int:
        """Jobs submitted so far over every cluster."""
        return self.engine.submitted()

    def _capture(self, cluster: Cluster, now: float, result: Any) -> None:
        lo, hi = self.window  # type: ignore[misc]
        if now > hi:
            return
        for res in cluster.scheduler.reservations():  # type: ignore[attr-defined]
            kind = getattr(res.kind, "value", str(res.kind))
            if kind == "running" or res.end <= lo or res.start >= hi:
                continue
            key = (cluster.name, res.name, res.start, res.end)
            if key in self._seen:
                continue
            self._seen.add(key)
            procs = res.tasks * res.procs_per_task or sum(res.allocation.values())
            self.reservations.append(ReservationSpan(
                cluster.name, res.name, kind, res.job_id, res.start, res.end, procs))

    def close(self) -> None:
        """Close the traces (a replay set up but never run; :meth:`run` closes them too)."""
        for run in self.runs:
            run.reader.close()

    def run(self, progress: Progress | None = None) -> ReplayResult:
        """Play every event, then compute each cluster's metrics and the overall ones.

        ``progress(submitted, finished)`` is called every few events (see
        :meth:`Engine.run`); the caller throttles its display by wall time.
        """
        try:
            self.engine.run(progress=progress)
        finally:
            self.close()
        jobs = self.engine.finished
        by_cluster: dict[str, list[SimJob]] = {r.name: [] for r in self.runs}
        for job in jobs:
            by_cluster[job.cluster].append(job)
        for run in self.runs:
            if any(j.measured for j in by_cluster[run.name]):
                run.summary = summarize(by_cluster[run.name], run.procs)
        overall = (self.runs[0].summary if len(self.runs) == 1 else
                   summarize(jobs, sum(r.procs for r in self.runs))
                   if any(j.measured for j in jobs) else None)
        return ReplayResult(
            policy=self.policy, conventions=self.conventions, clusters=self.runs, jobs=jobs,
            events=self.engine.events,
            iterations=sum(c.iterations for c in self.engine.clusters.values()),
            unfinished=len(self.engine.unfinished()), reservations=self.reservations,
            summary=overall)


def _offsets(specs: list[ClusterSpec], readers: list[SWFReader], align: str) -> list[float]:
    """Per-cluster submit offsets: the spec's own, plus the UnixStartTime shift for ``unix``."""
    if align == "start":
        return [spec.offset for spec in specs]
    starts = [r.header.unix_start_time for r in readers]
    if any(s is None for s in starts):
        missing = next(str(sp.trace) for sp, s in zip(specs, starts, strict=True) if s is None)
        raise ReplayError(f"{missing}: no UnixStartTime in the header, cannot align on it")
    origin = min(starts)  # type: ignore[type-var]
    return [spec.offset + (s - origin) for spec, s in zip(specs, starts, strict=True)]  # type: ignore[operator]


def _jobs(reader: SWFReader, convention: Convention, offset: float) -> Iterator[SimJob]:
    convert = convention.convert
    for record in reader:
        job = convert(record)
        if job is not None:
            if offset:
                job.submit += offset
            yield job
