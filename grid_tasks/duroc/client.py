"""The application's side of DUROC: requests to the scheduler, the door of a
coallocated job (it spans RMs, so no single gatekeeper is).

:class:`CoallocClient` checks what it can locally (the RSL, with line and column;
labels; the barrier timeout), then sends a signed request to the scheduler queue and
waits for the answer (:func:`grid_tasks.gram.door.ask`).  The scheduler's side is
:class:`~grid_tasks.duroc.control_door.DoorService`.  An application needs broker and
Redis access and its own key, never the database.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from grid_tasks.duroc.door import (
    ADD_SUBJOBS, CANCEL, DEFAULT_BARRIER_TIMEOUT_S, DELETE_SUBJOB, RELEASE_BARRIER, REQUEST,
    STATUS, login,
)
from grid_tasks.duroc.door import labels as labels_for
from grid_tasks.duroc.errors import CoallocRequestError
from grid_tasks.duroc.status import CoallocStatus, parse_job_ref, store_id
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.waiting import wait_for_end
from grid_tasks.gram.door import DEFAULT_TIMEOUT_S, ask
from grid_tasks.rsl import lower
from grid_tasks.services import Services


class CoallocClient:
    """An application's DUROC calls, each one signed request to the scheduler; the
    coordination store is read only to wait for barrier entries."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._store: CoordinationStore | None = None

    @property
    def store(self) -> CoordinationStore:
        if self._store is None:
            self._store = CoordinationStore.from_settings(self.services.settings)
        return self._store

    def _ask(self, task: str, kwargs: dict[str, Any], shadow: str,
             claim: str | None = None) -> dict[str, Any]:
        """Ask the scheduler; ``claim`` is who this client says it is, believed only on
        an unsigned grid (a signed request's owner is its verified signer)."""
        return ask(self.services.app, task, None, {**kwargs, "submitter": claim or login()},
                   shadow=shadow, timeout=DEFAULT_TIMEOUT_S)

    def job_request(self, rsl: str, *, user: str | None = None,
                    barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT_S,
                    variables: dict[str, str] | None = None, source: str = "<rsl>",
                    lowered: list[Any] | None = None) -> int:
        """Ask the scheduler to store and start a coallocated job; its id (see
        :meth:`Grid.job_request`).  ``user``: the local account its subjobs ask for
        (among those the grid map allows; on an unsigned grid also the owner claimed);
        ``lowered``: ``rsl`` lowered already (with ``variables``), not parsed again."""
        if not barrier_timeout or barrier_timeout <= 0:
            raise CoallocRequestError(f"barrier_timeout must be positive, not {barrier_timeout!r}")
        subs = lowered if lowered is not None else lower(
            rsl, variables, source=source,
            max_substitution=self.services.settings.rsl_max_substitution)
        labels_for(subs, set())  # duplicate labels: refused here, before any message
        reply = self._ask(REQUEST, {
            "rsl": rsl, "account": user, "barrier_timeout": float(barrier_timeout),
            "variables": variables, "source": source},
            shadow=f"coalloc-request {len(subs)} subjobs", claim=user)
        return int(reply["job"])

    def subjob_add(self, job: int | str, rsl: str, *, variables: dict[str, str] | None = None,
                   source: str = "<rsl>") -> list[str]:
        """Ask to add the request's component(s) before release; their labels.
        StructureFrozenError after release or abort, Unauthorized if not the owner's."""
        job_id = parse_job_ref(job)
        lower(rsl, variables, source=source,  # RSL errors at once, with line and column
              max_substitution=self.services.settings.rsl_max_substitution)
        reply = self._ask(ADD_SUBJOBS, {"job": job_id, "rsl": rsl,
                                              "variables": variables, "source": source},
                          shadow=f"coalloc-add coalloc-{job_id}")
        return [str(label) for label in reply["labels"]]

    def subjob_delete(self, job: int | str, label: str) -> CoallocStatus:
        """Ask to delete a subjob before release (its GRAM job is cancelled); the new
        snapshot."""
        job_id = parse_job_ref(job)
        self._ask(DELETE_SUBJOB, {"job": job_id, "label": label},
                  shadow=f"coalloc-delete coalloc-{job_id}/{label}")
        return self.subjob_states(job_id)

    def barrier_release(self, job: int | str, wait_for_subjobs: bool = True,
                        timeout: float | None = None) -> CoallocStatus:
        """Release the barrier: waiting here (up to ``timeout``, reading the store) for
        every barrier subjob to be in, or at once (BarrierNotReadyError when some are
        not); then the scheduler records the release."""
        job_id = parse_job_ref(job)
        if wait_for_subjobs:
            self.store.await_entries(store_id(job_id), None, timeout)
        self._ask(RELEASE_BARRIER, {"job": job_id},
                  shadow=f"coalloc-release coalloc-{job_id}")
        return self.subjob_states(job_id)

    def job_cancel(self, job: int | str) -> CoallocStatus:
        """Ask to cancel the whole job at any stage; CoallocFinishedError once ended.
        The snapshot's ``notes`` name subjob cancels still under way (a Slurm RM whose
        gatekeeper is unreachable: recorded, and retried until it answers)."""
        job_id = parse_job_ref(job)
        reply = self._ask(CANCEL, {"job": job_id}, shadow=f"coalloc-cancel coalloc-{job_id}")
        return replace(self.subjob_states(job_id),
                       notes=tuple(str(n) for n in reply.get("notes") or ()))

    def subjob_states(self, job: int | str) -> CoallocStatus:
        """The job's snapshot, as the scheduler tells its owner (a pure read: the job's
        fate is settled by events, never by a look); NotFoundError for an unknown job."""
        job_id = parse_job_ref(job)
        reply = self._ask(STATUS, {"job": job_id}, shadow=f"coalloc-status coalloc-{job_id}")
        return CoallocStatus.from_dict(reply)

    def existing(self, job: int | str) -> int:
        """The id of a coallocated job the scheduler knows (NotFoundError otherwise)."""
        return self.subjob_states(job).id

    def wait(self, job: int | str, timeout: float | None = None,
             poll_s: float = 1.0) -> CoallocStatus:
        """Block until the job is DONE or FAILED (WaitTimeoutError after ``timeout``);
        woken by the job's and its subjobs' events (:mod:`grid_tasks.duroc.waiting`)."""
        return wait_for_end(self, parse_job_ref(job), timeout, safety_s=poll_s)
