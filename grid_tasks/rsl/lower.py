"""Lowering: a validated request becomes typed subjob requests for DUROC/GRAM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from grid_tasks.rsl.ast import Boolean, BoolOp, Relation, Spec
from grid_tasks.rsl.errors import RSLError
from grid_tasks.rsl.evaluate import DEFAULT_MAX_SUBSTITUTION, SUBSTITUTION_KEY
from grid_tasks.rsl.unparse import unparse
from grid_tasks.rsl.validate import CheckedJob, as_spec, check
from grid_tasks.states import SubjobCommsType, SubjobStartType

# Keys turned into typed fields; everything else stays in ``relations``.
_TYPED = frozenset(
    {
        "resourcemanagercontact",
        "label",
        "count",
        "hostcount",
        "jobtype",
        "executable",
        "arguments",
        "directory",
        "environment",
        "stdin",
        "stdout",
        "stderr",
        "maxtime",
        "maxwalltime",
        "maxcputime",
        "maxmemory",
        "minmemory",
        "queue",
        "project",
        "subjobstarttype",
        "subjobcommstype",
        "requirements",
        "restart",
        SUBSTITUTION_KEY,
    }
)


@dataclass
class SubjobRequest:
    """One GRAM subjob of a (possibly coallocated) request, with typed fields.

    Times are in seconds (RSL gives minutes), memory in MB.  ``max_time_s`` is
    RSL ``max_time`` (wall or CPU time, the scheduler's choice).  ``stdout``
    and ``stderr`` give the first destination when several are listed.
    ``relations`` holds the relations not turned into a field, verbatim
    (evaluated); ``gram_relations`` everything GRAM must see.  ``restart`` is the
    contact a restart request names (its executable is then empty: the job's is
    the one it was submitted with).
    """

    index: int
    executable: str
    rm_contact: str | None = None
    label: str | None = None
    count: int = 1
    host_count: int | None = None
    job_type: str = "multiple"
    arguments: tuple[str, ...] = ()
    directory: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    max_time_s: int | None = None
    max_wall_time_s: int | None = None
    max_cpu_time_s: int | None = None
    max_memory_mb: int | None = None
    min_memory_mb: int | None = None
    queue: str | None = None
    project: str | None = None
    start_type: SubjobStartType = SubjobStartType.STRICT_BARRIER
    comms_type: SubjobCommsType = SubjobCommsType.BLOCKING_JOIN
    requirements: str | None = None
    restart: str | None = None
    relations: tuple[Relation, ...] = ()
    gram_relations: tuple[Relation, ...] = ()

    def processes(self) -> int:
        """Processes the subjob starts, and so enter its barrier: one for ``jobType
        single`` (GRAM starts ONE process; ``count`` is the processors it holds), else
        ``count`` (``mpi``: mpirun starts ``count`` ranks)."""
        return 1 if self.job_type == "single" else self.count

    def gram_rsl(self) -> str:
        """GRAM RSL for this subjob: DUROC/broker-only attributes removed, the rest verbatim."""
        return unparse(Boolean(BoolOp.AND, self.gram_relations))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (relations as RSL text)."""
        out: dict[str, Any] = {
            name: getattr(self, name)
            for name in self.__dataclass_fields__
            if name not in ("relations", "gram_relations")
        }
        out["arguments"] = list(self.arguments)
        out["start_type"] = self.start_type.value
        out["comms_type"] = self.comms_type.value
        out["relations"] = [unparse(rel) for rel in self.relations]
        out["gram_rsl"] = self.gram_rsl()
        return out


def _minutes(values: Mapping[str, Any], key: str) -> int | None:
    return values[key] * 60 if key in values else None


def _first(values: Mapping[str, Any], key: str) -> str | None:
    return values[key][0] if key in values else None


def _subjob(index: int, job: CheckedJob) -> SubjobRequest:
    v = job.values
    return SubjobRequest(
        index=index,
        executable=v.get("executable", ""),
        rm_contact=v.get("resourcemanagercontact"),
        label=v.get("label"),
        count=v.get("count", 1),
        host_count=v.get("hostcount"),
        job_type=v.get("jobtype", "multiple"),
        arguments=v.get("arguments", ()),
        directory=v.get("directory"),
        environment=dict(v.get("environment", ())),
        stdin=v.get("stdin"),
        stdout=_first(v, "stdout"),
        stderr=_first(v, "stderr"),
        max_time_s=_minutes(v, "maxtime"),
        max_wall_time_s=_minutes(v, "maxwalltime"),
        max_cpu_time_s=_minutes(v, "maxcputime"),
        max_memory_mb=v.get("maxmemory"),
        min_memory_mb=v.get("minmemory"),
        queue=v.get("queue"),
        project=v.get("project"),
        start_type=SubjobStartType(v.get("subjobstarttype", SubjobStartType.STRICT_BARRIER.value)),
        comms_type=SubjobCommsType(v.get("subjobcommstype", SubjobCommsType.BLOCKING_JOIN.value)),
        requirements=v.get("requirements"),
        restart=v.get("restart"),
        relations=tuple(r for r in job.relations if r.key not in _TYPED),
        gram_relations=tuple(
            r for r in job.relations if job.rules[r.key].forwarded and r.key != SUBSTITUTION_KEY
        ),
    )


def lower(
    request: str | bytes | Spec,
    variables: Mapping[str, str] | None = None,
    *,
    source: str = "<string>",
    max_substitution: int = DEFAULT_MAX_SUBSTITUTION,
) -> list[SubjobRequest]:
    """Validate a request and return one :class:`SubjobRequest` per job.

    A single job gives a list of one; a DUROC multi-request ``+(...)(...)``
    gives one per component, indexed from 0 in order.  ``variables`` are the
    caller's GRAM variables for ``$(NAME)`` substitution.  Substitutions are
    applied before GRAM sees the relations, so ``gram_rsl()`` carries no
    ``rsl_substitution``; they may produce at most ``max_substitution`` bytes
    (1 MiB by default; see :mod:`grid_tasks.rsl.evaluate`).  Raises
    :class:`RSLError` on any invalid input.
    """
    spec, text = as_spec(request, source)
    try:
        _, jobs = check(spec, variables, max_substitution=max_substitution)
    except RSLError as exc:
        raise exc.with_text(text, source) from None
    return [_subjob(i, job) for i, job in enumerate(jobs)]
