"""Structure changes of a coallocated job until its barrier is released: DUROC's
``subjob_add`` and ``subjob_delete`` as the scheduler worker runs them (a mixin of
:class:`~grid_tasks.duroc.control.Coallocator`)."""

from __future__ import annotations

from typing import Any

from grid_tasks.db import session_scope
from grid_tasks.duroc.control_rows import (
    DEFAULT_BARRIER_TIMEOUT_S, check_rms, coalloc_row, detach, labels as labels_for,
    new_subjob_row,
)
from grid_tasks.duroc.records import store_id
from grid_tasks.duroc.settle import deadline_of
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.effects import failed_signature, watch_signature
from grid_tasks.rsl import lower
from grid_tasks.scheduling.slurm_jobs import slurm_rm_names
from grid_tasks.services import Services
from grid_tasks.states import SubjobStartType


class StructureChanges:
    """DUROC's ``subjob_add``/``subjob_delete`` as the scheduler worker runs them (the
    client asks through the door, :mod:`grid_tasks.duroc.control_door`); the
    Coallocator provides services, store and the rest."""

    services: Services
    store: Any
    ask_submit: Any
    settle: Any
    _existing: Any
    _cancel_gram: Any

    def add_here(self, job: int | str, rsl: str, *, owner: str | None,
                 variables: dict[str, str] | None = None, source: str = "<rsl>") -> list[str]:
        """Add the request's component(s) to the job before release; their labels.

        They join the same barrier; their watchers vouch for the job's ``owner`` at
        their gatekeepers.  StructureFrozenError after release or abort.
        """
        job_id = self._existing(job, changing=True)
        subs = lower(rsl, variables, source=source,
                     max_substitution=self.services.settings.rsl_max_substitution)
        with session_scope(self.services.sessions) as session:
            row = coalloc_row(session, job_id)
            check_rms(session, subs, slurm_rm_names(self.services.settings))
            labels = labels_for(subs, {s.label for s in row.subjobs if s.label})
            deadline = deadline_of(row) if row.barrier_timeout else \
                row.created_at.timestamp() + DEFAULT_BARRIER_TIMEOUT_S
        for sub, label in zip(subs, labels):
            info = self.store.add_subjob(store_id(job_id), SubjobSpec(
                label, sub.processes(), sub.start_type, sub.comms_type))
            with session_scope(self.services.sessions) as session:
                session.add(new_subjob_row(job_id, info.address, label, sub))
            if sub.start_type is SubjobStartType.NO_BARRIER:
                self.ask_submit(job_id, info.address, sub.rm_contact, owner)
            else:  # its own watcher: its failure takes the same error path as the chord's
                sig = watch_signature(self.services.app, job_id, info.address,
                                      sub.rm_contact, deadline, submitter=owner)
                detach(sig.apply_async(
                    link_error=failed_signature(self.services.app, job_id)))
        self.settle(job_id)
        return labels

    def delete_here(self, job: int | str, label: str) -> int:
        """Delete a subjob before release (its GRAM job is cancelled); the job's id."""
        job_id = self._existing(job, changing=True)
        self.store.delete_subjob(store_id(job_id), label)
        with session_scope(self.services.sessions) as session:
            row = next((s for s in coalloc_row(session, job_id).subjobs if s.label == label), None)
            gram_id = None if row is None else row.gram_job_id
            if row is not None:
                session.delete(row)
        if gram_id is not None:
            self._cancel_gram(gram_id)
        self.settle(job_id)  # the deletion may have completed (released) the barrier
        return job_id
