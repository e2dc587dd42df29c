"""The one door for coallocated (DUROC) jobs: the client asks, the scheduler records.

A client never writes a coallocated job itself.  :class:`DoorRequests` (the client's
side of :class:`~grid_tasks.duroc.control.Coallocator`) checks what it can locally
(the RSL, with line and column; labels; the barrier timeout), then sends a signed
request to the scheduler queue - a DUROC job spans RMs, so no single gatekeeper is
its door - and waits for the answer (:func:`grid_tasks.gram.door.ask`).

:class:`DoorService` is the scheduler worker's side (the tasks in
:mod:`grid_tasks.duroc.tasks`): the job's owner is whoever signed the request (a
scheduler may vouch for one), checked against the grid map on every RM the job
spans before anything is stored; only that owner may then add or delete subjobs,
release or cancel it (when a grid map says who is who; a one-user grid lets anyone
trusted, as the RM gatekeepers do for GRAM cancel).

Read-only views (``subjob_states``, ``wait``) still read SQL and the coordination
store directly.
"""

from __future__ import annotations

import getpass
from typing import Any

from grid_tasks.db import session_scope
from grid_tasks.duroc.control_rows import (
    DEFAULT_BARRIER_TIMEOUT_S, coalloc_row, labels as labels_for,
)
from grid_tasks.duroc.errors import CoallocRequestError
from grid_tasks.duroc.records import CoallocStatus, parse_job_ref, store_id
from grid_tasks.gram.door import DEFAULT_TIMEOUT_S, ask


class DoorRequests:
    """The client's DUROC control calls, each one signed request to the scheduler."""

    grid: Any
    store: Any
    subjob_states: Any

    def _ask(self, task: str, kwargs: dict[str, Any], shadow: str,
             claim: str | None = None) -> dict[str, Any]:
        """Ask the scheduler; ``claim`` is who this client says it is, believed only on
        an unsigned grid (a signed request's owner is its verified signer)."""
        return ask(self.grid.app, task, None, {**kwargs, "submitter": claim or _login()},
                   shadow=shadow, timeout=DEFAULT_TIMEOUT_S)

    def job_request(self, rsl: str, *, user: str | None = None,
                    barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT_S,
                    variables: dict[str, str] | None = None, source: str = "<rsl>",
                    lowered: list[Any] | None = None) -> int:
        """Ask the scheduler to store and start a coallocated job; its id (see
        :meth:`Grid.job_request`).  ``user``: the local account its subjobs ask for
        (among those the grid map allows; on an unsigned grid also the owner claimed);
        ``lowered``: ``rsl`` lowered already (with ``variables``), not parsed again."""
        from grid_tasks.duroc import tasks
        from grid_tasks.rsl import lower

        if not barrier_timeout or barrier_timeout <= 0:
            raise CoallocRequestError(f"barrier_timeout must be positive, not {barrier_timeout!r}")
        subs = lowered if lowered is not None else lower(
            rsl, variables, source=source,
            max_substitution=self.grid.settings.rsl_max_substitution)
        labels_for(subs, set())  # duplicate labels: refused here, before any message
        reply = self._ask(tasks.REQUEST, {
            "rsl": rsl, "account": user, "barrier_timeout": float(barrier_timeout),
            "variables": variables, "source": source},
            shadow=f"coalloc-request {len(subs)} subjobs", claim=user)
        return int(reply["job"])

    def subjob_add(self, job: int | str, rsl: str, *, variables: dict[str, str] | None = None,
                   source: str = "<rsl>") -> list[str]:
        """Ask to add the request's component(s) before release; their labels.
        StructureFrozenError after release or abort, Unauthorized if not the owner's."""
        from grid_tasks.duroc import tasks
        from grid_tasks.rsl import lower

        job_id = parse_job_ref(job)
        lower(rsl, variables, source=source,  # RSL errors at once, with line and column
              max_substitution=self.grid.settings.rsl_max_substitution)
        reply = self._ask(tasks.ADD_SUBJOBS, {"job": job_id, "rsl": rsl,
                                              "variables": variables, "source": source},
                          shadow=f"coalloc-add coalloc-{job_id}")
        return [str(label) for label in reply["labels"]]

    def subjob_delete(self, job: int | str, label: str) -> CoallocStatus:
        """Ask to delete a subjob before release (its GRAM job is cancelled); the new
        snapshot."""
        from grid_tasks.duroc import tasks

        job_id = parse_job_ref(job)
        self._ask(tasks.DELETE_SUBJOB, {"job": job_id, "label": label},
                  shadow=f"coalloc-delete coalloc-{job_id}/{label}")
        return self.subjob_states(job_id)

    def barrier_release(self, job: int | str, wait_for_subjobs: bool = True,
                        timeout: float | None = None) -> CoallocStatus:
        """Release the barrier: waiting here (up to ``timeout``, reading the store) for
        every barrier subjob to be in, or at once (BarrierNotReadyError when some are
        not); then the scheduler records the release."""
        from grid_tasks.duroc import tasks

        job_id = parse_job_ref(job)
        if wait_for_subjobs:
            self.store.await_entries(store_id(job_id), None, timeout)
        self._ask(tasks.RELEASE_BARRIER, {"job": job_id},
                  shadow=f"coalloc-release coalloc-{job_id}")
        return self.subjob_states(job_id)

    def job_cancel(self, job: int | str) -> CoallocStatus:
        """Ask to cancel the whole job at any stage; CoallocFinishedError once ended."""
        from grid_tasks.duroc import tasks

        job_id = parse_job_ref(job)
        self._ask(tasks.CANCEL, {"job": job_id}, shadow=f"coalloc-cancel coalloc-{job_id}")
        return self.subjob_states(job_id)


class DoorService:
    """The scheduler worker's side of the door; the Coallocator provides the rest."""

    grid: Any
    request_here: Any
    add_here: Any

    def serve_request(self, who: str | None, rsl: str, *, account: str | None,
                      barrier_timeout: float, variables: dict[str, str] | None,
                      source: str) -> int:
        """Store and start a job for ``who`` (the verified submitter); its id.  With a
        grid map, ``who`` must be mapped on every RM the job spans (Unauthorized
        naming it, nothing stored, otherwise)."""
        from grid_tasks.rsl import lower

        subs = lower(rsl, variables, source=source,
                     max_substitution=self.grid.settings.rsl_max_substitution)
        self._authorize(who, subs, account)
        return self.request_here(rsl, owner=who or _login(), account=account,
                                 barrier_timeout=barrier_timeout, lowered=subs)

    def serve_add(self, who: str | None, job: int | str, rsl: str, *,
                  variables: dict[str, str] | None, source: str) -> list[str]:
        """The owner adds subjobs; their watchers vouch for the job's owner."""
        job_id, owner = self.owned(job, who)
        return self.add_here(job_id, rsl, owner=owner, variables=variables, source=source)

    def owned(self, job: int | str, who: str | None) -> tuple[int, str | None]:
        """(id, owner) of a job ``who`` may change: its owner, when a grid map says who
        is who (Unauthorized otherwise); NotFoundError for an unknown job."""
        from grid_tasks.security.authorization import check_owner

        job_id = parse_job_ref(job)
        with session_scope(self.grid.sessions) as session:
            owner = coalloc_row(session, job_id).owner
        check_owner(self.grid.settings, owner, who, f"coallocated job {job_id}")
        return job_id, owner

    def _authorize(self, who: str | None, subs: list[Any], account: str | None) -> None:
        from grid_tasks.security.authorization import gridmap_for
        from grid_tasks.security.errors import Unauthorized

        gridmap = gridmap_for(self.grid.settings)
        if gridmap is None:
            return
        if not who:
            raise Unauthorized("the grid accepts coallocation requests only signed by a user "
                               "in its grid map: this one carries no verified identity")
        for rm in sorted({s.rm_contact for s in subs if s.rm_contact}):
            gridmap.authorize(who, rm, account)


def _login() -> str:
    return getpass.getuser()
