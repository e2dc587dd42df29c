"""How an SWF record becomes a simulated job: the conventions.

A trace records what happened on a real machine; replaying it needs choices the
trace does not make (which processor count the scheduler sees, what the
walltime is, what to do with cancelled or broken records).  Each convention is
a small class with one method, ``convert(record) -> SimJob | None`` (``None``
drops the record), so a replay can be compared one to one with another
simulator's by choosing its convention.

``default`` (this project's):
    * dropped (counted in ``dropped``): run time <= 0 (the job never ran),
      submit time < 0, or no processor count at all;
    * processors = requested processors if given, else allocated; a job asking
      for more than the machine's ``P`` is dropped (it could never start);
    * walltime = requested time if given, else the run time (a perfect estimate);
    * actual run time = the trace's run time; a job that ran past its walltime
      is killed at the walltime by the simulator;
    * every simulated job is measured.

``pyss`` (the Hebrew University simulator, the reference table's conversion):
    * a record with run time <= 0, allocated processors <= 0 or submit time < 0
      becomes a 1-second job on max(1, allocated) processors submitted at
      max(submit, 1), simulated but left out of every metric;
    * otherwise walltime = max(requested, run, 1), actual run =
      max(min(requested, run), 1) (so a missing request, -1, gives a 1-second
      run: pyss's own behaviour), processors = max(min(allocated, P), 1)
      (allocated, never requested: CTC's requested field is -1 throughout);
    * times are truncated to whole seconds as pyss does.
    One guard pyss lacks: a broken record allocated more than ``P`` processors
    is capped at ``P`` (pyss would wait for it forever; no shared trace has one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grid_tasks.errors import GridTasksError
from grid_tasks.sim.swf import SWFRecord

__all__ = ["SimJob", "Convention", "DefaultConvention", "PyssConvention",
           "CONVENTIONS", "get_convention", "ConventionError"]


class ConventionError(GridTasksError):
    """An unknown convention name or an unusable machine size."""


@dataclass(slots=True, eq=False)
class SimJob:
    """A job as the simulator replays it, and what happened to it.

    ``estimate`` is the walltime the scheduler is told; ``runtime`` how long the
    job really runs if not killed.  ``start``/``end`` are -1 until known.
    """

    id: str
    submit: float
    estimate: float
    runtime: float
    procs: int
    user: int = -1
    group: int = -1
    queue: int = -1
    measured: bool = True
    cluster: str = ""
    start: float = -1.0
    end: float = -1.0
    killed: bool = False

    @property
    def wait(self) -> float:
        """Seconds between submission and start."""
        return self.start - self.submit

    @property
    def ran(self) -> float:
        """Seconds the job really occupied its processors."""
        return self.end - self.start


@dataclass
class Convention:
    """Base of the record-to-job conversions; ``procs`` is the machine size P."""

    procs: int
    name: str = field(default="", init=False)
    dropped: int = field(default=0, init=False)
    unmeasured: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.procs < 1:
            raise ConventionError(f"a cluster needs at least one processor, got {self.procs}")

    def convert(self, record: SWFRecord) -> SimJob | None:  # pragma: no cover - abstract
        """The simulated job for ``record``, or ``None`` to drop it."""
        raise NotImplementedError


@dataclass
class DefaultConvention(Convention):
    """This project's conversion (see the module docstring)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.name = "default"

    def convert(self, record: SWFRecord) -> SimJob | None:
        run = record.run_time
        procs = record.requested_procs if record.requested_procs > 0 else record.allocated_procs
        if run <= 0 or record.submit_time < 0 or procs <= 0 or procs > self.procs:
            self.dropped += 1
            return None
        estimate = record.requested_time if record.requested_time > 0 else run
        return SimJob(str(record.job_number), record.submit_time, estimate, run, procs,
                      record.user_id, record.group_id, record.queue)


@dataclass
class PyssConvention(Convention):
    """The reference simulator's conversion (see the module docstring)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.name = "pyss"

    def convert(self, record: SWFRecord) -> SimJob | None:
        run = record.run_time
        alloc = record.allocated_procs
        submit = record.submit_time
        if run <= 0 or alloc <= 0 or submit < 0:
            self.unmeasured += 1
            return SimJob(str(record.job_number), max(submit, 1), 1, 1,
                          min(max(1, alloc), self.procs), record.user_id, record.group_id,
                          record.queue, measured=False)
        req = record.requested_time
        return SimJob(str(record.job_number), submit, int(max(req, run, 1)),
                      int(max(min(req, run), 1)), max(min(alloc, self.procs), 1),
                      record.user_id, record.group_id, record.queue)


CONVENTIONS: dict[str, type[Convention]] = {
    "default": DefaultConvention,
    "pyss": PyssConvention,
}


def get_convention(name: str, procs: int) -> Convention:
    """A fresh convention object by name (``default`` or ``pyss``) for a P-processor machine."""
    try:
        cls = CONVENTIONS[name]
    except KeyError:
        known = ", ".join(sorted(CONVENTIONS))
        raise ConventionError(f"unknown conventions {name!r} (known: {known})") from None
    return cls(procs)
