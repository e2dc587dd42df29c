"""CoallocHandle: the application's handle on one coallocated (DUROC) job."""

from __future__ import annotations

from typing import Any

from grid_tasks.duroc.status import CoallocStatus, SubjobStatus


class CoallocHandle:
    """A coallocated job: its contact, per-subjob results, and the DUROC control calls."""

    def __init__(self, coallocator: Any, job_id: int) -> None:
        self.coallocator, self.id = coallocator, int(job_id)
        self.contact = f"duroc://coalloc/{self.id}"

    def __repr__(self) -> str:
        return f"CoallocHandle({self.id}, {self.contact!r})"

    def status(self) -> CoallocStatus:
        """The snapshot (``subjob_states``)."""
        return self.coallocator.subjob_states(self.id)

    @property
    def subjobs(self) -> tuple[SubjobStatus, ...]:
        """Per-subjob results: label, RM, GRAM job, state, barrier entries, reason."""
        return self.status().subjobs

    def wait(self, timeout: float | None = None) -> CoallocStatus:
        return self.coallocator.wait(self.id, timeout)

    def add(self, rsl: str, **kw: Any) -> list[str]:
        return self.coallocator.subjob_add(self.id, rsl, **kw)

    def delete(self, label: str) -> CoallocStatus:
        return self.coallocator.subjob_delete(self.id, label)

    def release(self, wait_for_subjobs: bool = True,
                timeout: float | None = None) -> CoallocStatus:
        return self.coallocator.barrier_release(self.id, wait_for_subjobs, timeout)

    def cancel(self) -> CoallocStatus:
        return self.coallocator.job_cancel(self.id)
