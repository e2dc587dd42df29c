"""Fences: the resources of a job part declared lost, held until it is surely dead."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, JSONDict, UTCDateTime, utcnow


class Fence(Base):
    """One fenced launch of a job: its allocation stays held until ``deadline``.

    Recovery writes one when a launch is declared lost (a job manager's lease expired)
    or rolled back unconfirmed: its launch token is superseded in Redis by a tombstone
    at ``seen_at``, and a part that cannot read it (its daemon frozen, cut off) is
    killed by its own renewal bound.  Until ``deadline`` (``seen_at`` plus the fence
    span, :func:`grid_tasks.leases.fence_span`) the iteration counts ``nodes`` as busy
    and, when ``requeue``, keeps the job on its ``fence`` hold: never two copies of a
    part, never an overcommitted node.  Deleted once the deadline has passed.
    """

    __tablename__ = "fences"
    __table_args__ = (Index("ix_fences_rm_deadline", "rm", "deadline"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    rm: Mapped[str | None] = mapped_column(ForeignKey("resource_managers.name"))
    token: Mapped[str | None] = mapped_column(String(128))  # the fenced launch epoch
    nodes: Mapped[dict[str, int]] = mapped_column(JSONDict, default=dict)  # node -> tasks held
    mem_per_task: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    deadline: Mapped[datetime] = mapped_column(UTCDateTime)
    requeue: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def __repr__(self) -> str:
        return f"Fence({self.id}, job {self.job_id}, until {self.deadline})"
