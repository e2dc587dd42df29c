"""The one door for coallocated (DUROC) jobs, the scheduler's side.

A client never writes or reads a coallocated job's records itself: it asks the
scheduler (:class:`~grid_tasks.duroc.client.CoallocClient`; a DUROC job spans RMs, so
no single gatekeeper is its door).  :class:`DoorService` is what the scheduler worker
runs for those requests (the tasks in :mod:`grid_tasks.duroc.tasks`): the job's owner
is whoever signed the request (a scheduler may vouch for one), checked against the
grid map on every RM the job spans before anything is stored; only that owner (or an
operator) may then look at it, add or delete subjobs, release or cancel it (when a
grid map says who is who; a one-user grid lets anyone trusted, as the RM gatekeepers
do for GRAM).
"""

from __future__ import annotations

from typing import Any

from grid_tasks.db import session_scope
from grid_tasks.duroc.control_rows import coalloc_row
from grid_tasks.duroc.door import login
from grid_tasks.duroc.records import parse_job_ref
from grid_tasks.rsl import lower
from grid_tasks.security.authorization import check_owner, gridmap_for
from grid_tasks.security.errors import Unauthorized
from grid_tasks.services import Services

class DoorService:
    """The scheduler worker's side of the door; the Coallocator provides the rest."""

    services: Services
    request_here: Any
    add_here: Any
    subjob_states: Any

    def serve_request(self, who: str | None, rsl: str, *, account: str | None,
                      barrier_timeout: float, variables: dict[str, str] | None,
                      source: str) -> int:
        """Store and start a job for ``who`` (the verified submitter); its id.  With a
        grid map, ``who`` must be mapped on every RM the job spans (Unauthorized
        naming it, nothing stored, otherwise)."""
        subs = lower(rsl, variables, source=source,
                     max_substitution=self.services.settings.rsl_max_substitution)
        self._authorize(who, subs, account)
        return self.request_here(rsl, owner=who or login(), account=account,
                                 barrier_timeout=barrier_timeout, lowered=subs)

    def serve_add(self, who: str | None, job: int | str, rsl: str, *,
                  variables: dict[str, str] | None, source: str) -> list[str]:
        """The owner adds subjobs; their watchers vouch for the job's owner."""
        job_id, owner = self.owned(job, who)
        return self.add_here(job_id, rsl, owner=owner, variables=variables, source=source)

    def serve_status(self, who: str | None, job: int | str, *,
                     admin: bool = False) -> dict[str, Any]:
        """The job's snapshot for its owner (or an operator, ``admin``): a pure read."""
        job_id = parse_job_ref(job) if admin else self.owned(job, who)[0]
        return self.subjob_states(job_id).to_dict()

    def owned(self, job: int | str, who: str | None) -> tuple[int, str | None]:
        """(id, owner) of a job ``who`` may change: its owner, when a grid map says who
        is who (Unauthorized otherwise); NotFoundError for an unknown job."""
        job_id = parse_job_ref(job)
        with session_scope(self.services.sessions) as session:
            owner = coalloc_row(session, job_id).owner
        check_owner(self.services.settings, owner, who, f"coallocated job {job_id}")
        return job_id, owner

    def _authorize(self, who: str | None, subs: list[Any], account: str | None) -> None:
        gridmap = gridmap_for(self.services.settings)
        if gridmap is None:
            return
        if not who:
            raise Unauthorized("the grid accepts coallocation requests only signed by a user "
                               "in its grid map: this one carries no verified identity")
        for rm in sorted({s.rm_contact for s in subs if s.rm_contact}):
            gridmap.authorize(who, rm, account)
