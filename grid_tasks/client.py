"""The Python API of grid_tasks: submit GRAM jobs and follow them.

    from grid_tasks import Grid
    grid = Grid()                       # settings from GRID_TASKS_* variables
    job = grid.submit("&(executable=/bin/hostname)(count=2)", rm="rmA")
    status = job.wait(timeout=60)       # blocks on Redis pub/sub, not on SQL polling
    print(status.state, job.output())

Connections come from the :class:`~grid_tasks.settings.Settings` given (or the
environment); no global Celery app is used.
"""

from __future__ import annotations

import time
from typing import Any

from grid_tasks.broker.grid_jobs import coallocate
from grid_tasks.duroc.client import CoallocClient
from grid_tasks.duroc.door import DEFAULT_BARRIER_TIMEOUT_S
from grid_tasks.duroc.handle import CoallocHandle
from grid_tasks.errors import ConfigError, GridTasksError, NotFoundError
from grid_tasks.events import OutputLine, iter_output, next_event, subscribe
from grid_tasks.gram.door import CANCEL, DEFAULT_TIMEOUT_S, STATUS, SUBMIT, ask
from grid_tasks.gram.errors import (
    JobFinishedError, JobRefusedError, WaitTimeoutError, check_rm_contact,
)
from grid_tasks.gram.status import CancelAccepted, HistoryEntry, JobStatus, parse_contact
from grid_tasks.rsl import deferred_variables, lower
from grid_tasks.services import Services
from grid_tasks.settings import Settings
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

__all__ = ["CancelAccepted", "Grid", "HistoryEntry", "JobHandle", "JobStatus",
           "JobFinishedError", "JobRefusedError", "NotFoundError", "WaitTimeoutError"]


class Grid:
    """A connection to one grid: requests through its gatekeepers' door, events and
    output from Redis.  Its connections are one :class:`~grid_tasks.services.Services`,
    made lazily (constructing a Grid never blocks or connects)."""

    def __init__(self, settings: Settings | None = None, *,
                 services: Services | None = None) -> None:
        self.services = services or Services(settings or Settings.from_env())
        self.settings = self.services.settings
        self._coallocator: CoallocClient | None = None
        #: the RM of every job this Grid submitted or looked up: its gatekeeper answers
        #: for it (a GRAM client keeps its jobs' contacts)
        self._rm_of: dict[int, str] = {}

    @property
    def sessions(self) -> Any:
        """The grid database's sessionmaker (operators' read commands; an application
        needs no database)."""
        return self.services.sessions

    @property
    def redis(self) -> Any:
        return self.services.redis

    @property
    def app(self) -> Any:
        return self.services.app

    def close(self) -> None:
        """Release the Redis connections and the Celery app made by this Grid."""
        self.services.close()

    def __enter__(self) -> "Grid":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # -- jobs ---------------------------------------------------------------------------
    def submit(self, rsl: str, rm: str | None = None, *, user: str | None = None,
               group: str | None = None, account: str | None = None, qos: str | None = None,
               job_class: str | None = None, idempotency_key: str | None = None,
               extra_env: dict[str, str] | None = None,
               variables: dict[str, str] | None = None, source: str = "<rsl>",
               timeout: float = DEFAULT_TIMEOUT_S) -> "JobHandle":
        """Validate a GRAM job request and ask resource manager ``rm``'s gatekeeper to
        queue it; returns its handle.

        The RSL is checked here first (errors at once, with line and column); then
        the gatekeeper decides: it takes the submitter to be whoever signed the request
        (this process's key), maps that subject through *its* grid map and records the
        job, which runs as the mapped account; ``user`` only picks among the accounts
        the map allows (the first by default).  A refusal comes back as the typed error:
        :class:`~grid_tasks.security.errors.Unauthorized` (subject not mapped, account
        not allowed), NotFoundError (unknown RM), JobRefusedError (larger than the RM
        can ever hold), RSLError (with its GRAM code); ConnectivityError when no
        gatekeeper answers within ``timeout`` seconds.  Nothing is stored on refusal.

        ``rm`` defaults to the RSL's resourceManagerContact, else the only RM of the
        topology.  ``variables`` define ``$(NAME)`` references, except those the job
        manager defines for the mapped account (``HOME``, ``LOGNAME``, the job's
        contact...: :data:`~grid_tasks.rsl.JOB_MANAGER_VARIABLES`).  A restart request
        ``&(restart=CONTACT)`` gives back the handle of the job it names (GRAM's
        NO_STATE_FILE when its RM has no such job of this submitter).  A repeated
        ``idempotency_key`` returns the job first submitted with it.  ``extra_env`` is
        added to every process's environment; ``source`` names the RSL in error
        messages (e.g. its file).
        """
        # the job manager's variables ($(HOME)...) are the mapped account's: stand-ins
        # here, the gatekeeper evaluates them (their values win over ``variables``)
        subjobs = lower(rsl, {**(variables or {}), **deferred_variables()}, source=source,
                        max_substitution=self.settings.rsl_max_substitution)
        if len(subjobs) != 1:
            raise JobRefusedError("a multi-request (+...) is a coallocated job: submit it with "
                                  "grid-tasks coalloc", code="BAD_RSL")
        check_rm_contact(rm, subjobs[0].rm_contact)  # -r and the RSL must agree
        restart = subjobs[0].restart  # a restart request goes to the job's own RM
        name = self._rm_for(rm or subjobs[0].rm_contact or
                            (parse_contact(restart)[1] if restart else None))
        creds = {"user": user, "group": group, "account": account, "qos": qos,
                 "job_class": job_class}
        reply = ask(self.app, SUBMIT, name, {
            "rsl": rsl, "creds": creds, "idempotency_key": idempotency_key,
            "extra_env": extra_env, "variables": variables, "source": source},
            shadow=f"submit to {name}", timeout=timeout)
        self._rm_of[int(reply["id"])] = name
        return JobHandle(self, int(reply["id"]), str(reply["contact"]), name)

    def _rm_for(self, wanted: str | None) -> str:
        """The RM to ask: the one named (NotFoundError if the topology knows it not),
        else the topology's only one."""
        try:
            topology = load_topology(self.settings.topology_file)
        except ConfigError:
            if wanted:  # no topology here: the named RM's gatekeeper will tell
                return wanted
            raise
        if wanted:
            return topology.rm(wanted).name
        if len(topology.rms) == 1:
            return next(iter(topology.rms))
        raise NotFoundError("no resource manager given and none in the RSL "
                            f"(resourceManagerContact); choose one of: {', '.join(topology.rms)}")

    def job(self, job_id_or_contact: int | str) -> "JobHandle":
        """The handle of an existing job, by id or GRAM contact; NotFoundError otherwise
        (Unauthorized for someone else's job, with a grid map)."""
        rm = None
        if isinstance(job_id_or_contact, str) and not job_id_or_contact.isdigit():
            job_id, rm = parse_contact(job_id_or_contact)
        else:
            job_id = int(job_id_or_contact)
        status = self._ask_status(job_id, rm)["status"]
        self._rm_of[job_id] = status["rm"]
        return JobHandle(self, job_id, status["contact"], status["rm"])

    def status(self, job_id: int, *, rm: str | None = None) -> JobStatus:
        """The current status of ``job_id``, as its gatekeeper tells its owner (GRAM's
        job status query: the application needs no database).  ``rm``: the job's RM if
        known (its gatekeeper answers; this Grid remembers the RMs of its jobs); else
        the scheduler does."""
        return JobStatus.from_dict(self._ask_status(int(job_id), rm)["status"])

    def history(self, job_id: int, *, rm: str | None = None) -> list[HistoryEntry]:
        """The job's recorded state changes, oldest first."""
        reply = self._ask_status(int(job_id), rm, history=True)
        return [HistoryEntry.from_dict(h) for h in reply["history"]]

    def _ask_status(self, job_id: int, rm: str | None, *,
                    history: bool = False) -> dict[str, Any]:
        rm = rm or self._rm_of.get(job_id)
        return ask(self.app, STATUS, rm, {"job": job_id, "history": history},
                   shadow=f"status of job {job_id}" + (f" on {rm}" if rm else ""))

    def cancel(self, job_id: int | str, *, rm: str | None = None,
               timeout: float = DEFAULT_TIMEOUT_S) -> JobStatus | CancelAccepted:
        """Ask the job's gatekeeper to cancel it: an idle one fails at once, a running
        one is killed by its job managers (FAILED, USER_CANCELLED).  ``job_id``: an id
        or a GRAM contact; ``rm``: the job's RM when the caller knows it (else the
        contact names it, or the job is looked up first).  NotFoundError for an
        unknown job, JobFinishedError for one that is DONE or FAILED already,
        Unauthorized for someone else's job (with a grid map).  While the grid's
        database is away the gatekeeper still takes the cancel and answers
        :class:`~grid_tasks.gram.status.CancelAccepted` (state unknown until then)."""
        if isinstance(job_id, str) and not job_id.isdigit():
            job, rm = parse_contact(job_id)
        elif rm is None and int(job_id) in self._rm_of:
            job, rm = int(job_id), self._rm_of[int(job_id)]
        elif rm is None:
            handle = self.job(job_id)
            job, rm = handle.id, handle.rm
        else:
            job = int(job_id)
        reply = ask(self.app, CANCEL, str(rm), {"job": job},
                    shadow=f"cancel job {job} on {rm}", timeout=timeout)
        if reply.get("accepted"):
            return CancelAccepted.from_dict(reply)
        return JobStatus.from_dict(reply)

    # -- coallocated (DUROC) jobs: grid_tasks.duroc.control ------------------------------
    @property
    def coallocator(self) -> CoallocClient:
        """The DUROC calls of this grid (requests to the scheduler)."""
        if self._coallocator is None:
            self._coallocator = CoallocClient(self.services)
        return self._coallocator

    def job_request(self, rsl: str, *, user: str | None = None,
                    barrier_timeout: float | None = None,
                    variables: dict[str, str] | None = None, source: str = "<rsl>",
                    coreserve: bool | None = None, allow_early: bool = False,
                    lead: float | None = None) -> Any:
        """Start a coallocated job from a ``+`` multi-request; its CoallocHandle.

        One GRAM subjob per component at its resourceManagerContact, released
        together through one start barrier; a strict job fails and is cleaned up
        when its barrier is not complete within ``barrier_timeout`` seconds.

        With ``coreserve`` (automatic when a component has no resourceManagerContact)
        the broker first places the components and co-reserves them with one common
        start at least ``lead`` s away (``handle.coreservation``); each subjob is bound
        to its grid reservation (``allow_early``: may start before it) and the barrier
        timeout also covers the wait.  See :mod:`grid_tasks.broker.grid_jobs`.
        """
        subs = lower(rsl, variables, source=source,  # once, for both paths below
                     max_substitution=self.settings.rsl_max_substitution)
        if coreserve is not False:
            placed = coallocate(self.services, self.coallocator, rsl, user=user,
                                variables=variables, source=source,
                                barrier_timeout=barrier_timeout or DEFAULT_BARRIER_TIMEOUT_S,
                                coreserve=coreserve, allow_early=allow_early, lead=lead,
                                subs=subs)
            if placed is not None:
                return placed
        job_id = self.coallocator.job_request(
            rsl, user=user, barrier_timeout=barrier_timeout or DEFAULT_BARRIER_TIMEOUT_S,
            variables=variables, source=source, lowered=subs)
        return CoallocHandle(self.coallocator, job_id)

    def coalloc(self, job: int | str) -> Any:
        """The CoallocHandle of an existing coallocated job (id or duroc:// contact)."""
        return CoallocHandle(self.coallocator, self.coallocator.existing(job))

    def subjob_add(self, job: int | str, rsl: str) -> list[str]:
        """Add subjob(s) before release; they join the same barrier. Their labels."""
        return self.coallocator.subjob_add(job, rsl)

    def subjob_delete(self, job: int | str, label: str) -> Any:
        """Delete a subjob before release; the new snapshot."""
        return self.coallocator.subjob_delete(job, label)

    def barrier_release(self, job: int | str, wait_for_subjobs: bool = True,
                        timeout: float | None = None) -> Any:
        """Release the job's start barrier (see Coallocator.barrier_release)."""
        return self.coallocator.barrier_release(job, wait_for_subjobs, timeout)

    def job_cancel(self, job: int | str) -> Any:
        """Cancel a coallocated job at any stage: every subjob on every RM."""
        return self.coallocator.job_cancel(job)

    def subjob_states(self, job: int | str) -> Any:
        """A CoallocStatus snapshot: job state, barrier, each subjob's state and entries."""
        return self.coallocator.subjob_states(job)


class JobHandle:
    """One submitted job, to query, wait for, cancel and read the output of."""

    def __init__(self, grid: Grid, job_id: int, contact: str | None,
                 rm: str | None = None) -> None:
        self.grid, self.id, self.contact = grid, int(job_id), contact
        self.rm = rm if rm is not None or not contact else parse_contact(contact)[1]

    def __repr__(self) -> str:
        return f"JobHandle({self.id}, {self.contact!r})"

    def status(self) -> JobStatus:
        return self.grid.status(self.id, rm=self.rm)

    def wait(self, timeout: float | None = None) -> JobStatus:
        """Block until the job is DONE or FAILED; WaitTimeoutError after ``timeout`` s.

        Subscribes to the job's channel first, asks its status once, then sleeps on
        the subscription; it asks again only when an ending event arrives.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pubsub = subscribe(self.grid.redis, self.id)
        try:
            status = self.status()
            while not status.terminal:
                left = 3600.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeoutError(f"job {self.id} still {status.state.value} after "
                                           f"{timeout:g} s", status)
                event = next_event(pubsub, min(left, 5.0))
                if event is not None and JobState(event.state).terminal:
                    status = self.status()
                elif event is None and left <= 5.0:
                    status = self.status()  # last look before giving up
        finally:
            pubsub.close()
        return status

    def cancel(self) -> JobStatus | CancelAccepted:
        return self.grid.cancel(self.id, rm=self.rm)

    def output(self, stream: str = "stdout") -> str:
        """The captured ``stdout`` or ``stderr`` of all processes, in arrival order."""
        if stream not in ("stdout", "stderr"):
            raise GridTasksError(f"unknown stream {stream!r}: stdout or stderr")
        return "".join(line.text for line in self.lines() if line.stream == stream)

    def lines(self) -> list[OutputLine]:
        """Every captured line of both streams, in arrival order, with node and rank."""
        return list(iter_output(self.grid.redis, self.id))

    def history(self) -> list[HistoryEntry]:
        return self.grid.history(self.id, rm=self.rm)
