"""Accounting: one immutable row per finished job, feeding fairshare and showstats."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from grid_tasks.states import JobState

from .base import Base, EnumText, JSONDict, UTCDateTime, utcnow


class AccountingRecord(Base):
    """What a finished job used, copied out of ``jobs`` so purging jobs loses nothing.

    ``job_id`` is deliberately not a foreign key: the job checker may purge old
    jobs while their accounting must stay.
    """

    __tablename__ = "accounting"
    __table_args__ = (
        Index("ix_accounting_user_name", "user_name"),
        Index("ix_accounting_rm_end_time", "rm", "end_time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(Integer, unique=True)
    rm: Mapped[str | None] = mapped_column(String(64))
    owner: Mapped[str | None] = mapped_column(String(256))
    user: Mapped[str | None] = mapped_column("user_name", String(128))
    group: Mapped[str | None] = mapped_column("group_name", String(128))
    account: Mapped[str | None] = mapped_column(String(128))
    job_class: Mapped[str | None] = mapped_column("class_name", String(128))
    qos: Mapped[str | None] = mapped_column(String(128))
    nodes: Mapped[dict[str, int]] = mapped_column(JSONDict, default=dict)  # node -> tasks
    procs: Mapped[int] = mapped_column(Integer, default=1)
    submit_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    start_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    end_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    wall_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    proc_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    exit_status: Mapped[int | None] = mapped_column(Integer)
    final_state: Mapped[JobState] = mapped_column(EnumText(JobState))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    @property
    def wait_seconds(self) -> float | None:
        """Queue wait (start - submit), or None when either time is missing."""
        if self.submit_time is None or self.start_time is None:
            return None
        return (self.start_time - self.submit_time).total_seconds()

    def __repr__(self) -> str:
        return f"AccountingRecord(job {self.job_id}, {self.final_state.value})"
