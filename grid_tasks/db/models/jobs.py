"""GRAM jobs, their state history, and DUROC coallocated jobs with their subjobs."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from grid_tasks.states import JobState, MauiJobState, SubjobCommsType, SubjobStartType

from .base import Base, EnumText, JSONDict, JSONList, UTCDateTime, utcnow


class BarrierState(str, Enum):
    """Where a coallocated job's start barrier stands."""

    WAITING = "waiting"  # subjobs still being submitted or checking in
    RELEASED = "released"
    FAILED = "failed"  # a strict subjob failed before release
    TIMED_OUT = "timed-out"
    CANCELLED = "cancelled"


class Job(Base):
    """One GRAM job at one resource manager (a coallocation's subjob is one too).

    ``version`` is an optimistic lock: a flush that updates a row another
    session changed in the meantime fails instead of silently overwriting.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_rm_state", "rm", "state"),
        # the idle queue and the few Starting jobs of a deep queue (migration 0003)
        Index("ix_jobs_rm_state_maui", "rm", "state", "maui_state"),
        Index("ix_jobs_coallocation_id", "coallocation_id"),
        Index("ix_jobs_user_name", "user_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    contact: Mapped[str | None] = mapped_column(String(512), unique=True)
    rm: Mapped[str | None] = mapped_column(ForeignKey("resource_managers.name"))
    # Credentials in Maui's vocabulary; ``owner`` is the submitting grid identity.
    owner: Mapped[str | None] = mapped_column(String(256))
    user: Mapped[str | None] = mapped_column("user_name", String(128))
    group: Mapped[str | None] = mapped_column("group_name", String(128))
    account: Mapped[str | None] = mapped_column(String(128))
    job_class: Mapped[str | None] = mapped_column("class_name", String(128))
    qos: Mapped[str | None] = mapped_column(String(128))
    rsl: Mapped[str | None] = mapped_column(Text)
    request: Mapped[dict[str, Any]] = mapped_column(JSONDict, default=dict)
    state: Mapped[JobState] = mapped_column(EnumText(JobState), default=JobState.UNSUBMITTED)
    maui_state: Mapped[MauiJobState] = mapped_column(
        EnumText(MauiJobState), default=MauiJobState.IDLE
    )
    exit_code: Mapped[int | None] = mapped_column(Integer)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    gram_error_code: Mapped[int | None] = mapped_column(Integer)
    gram_error: Mapped[str | None] = mapped_column(String(64))  # e.g. INVALID_COUNT
    submit_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    start_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    end_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    walltime: Mapped[int | None] = mapped_column(Integer)  # requested, seconds
    procs: Mapped[int] = mapped_column(Integer, default=1)
    tasks: Mapped[int] = mapped_column(Integer, default=1)
    nodes_allocated: Mapped[dict[str, int]] = mapped_column(JSONDict, default=dict)  # node -> tasks
    priority: Mapped[int] = mapped_column(Integer, default=0)
    holds: Mapped[list[str]] = mapped_column(JSONList, default=list)
    dependencies: Mapped[list[int]] = mapped_column(JSONList, default=list)
    early_start: Mapped[bool] = mapped_column(Boolean, default=True)
    coallocation_id: Mapped[int | None] = mapped_column(
        ForeignKey("coallocated_jobs.id", ondelete="SET NULL")
    )
    coallocation_label: Mapped[str | None] = mapped_column(String(128))
    idempotency_key: Mapped[str | None] = mapped_column(String(128), unique=True)
    launch_token: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    version: Mapped[int] = mapped_column(Integer, nullable=False)

    __mapper_args__ = {"version_id_col": version}

    history: Mapped[list["JobStateHistory"]] = relationship(
        back_populates="job",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="JobStateHistory.id",
    )
    coallocation: Mapped["CoallocatedJob | None"] = relationship(back_populates="jobs")

    def __repr__(self) -> str:
        return f"Job({self.id}, {self.rm}, {self.state.value if self.state else None})"


class JobStateHistory(Base):
    """One state change of a job: from, to, why, when."""

    __tablename__ = "job_state_history"
    __table_args__ = (Index("ix_job_state_history_job_id_at", "job_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    from_state: Mapped[JobState | None] = mapped_column(EnumText(JobState))
    to_state: Mapped[JobState] = mapped_column(EnumText(JobState))
    reason: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UTCDateTime)

    job: Mapped[Job] = relationship(back_populates="history")

    def __repr__(self) -> str:
        src = self.from_state.value if self.from_state else "-"
        return f"JobStateHistory(job {self.job_id}: {src} -> {self.to_state.value})"


class CoallocatedJob(Base):
    """A DUROC job: several subjobs released together through one start barrier."""

    __tablename__ = "coallocated_jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    contact: Mapped[str | None] = mapped_column(String(512), unique=True)
    owner: Mapped[str | None] = mapped_column(String(256))
    rsl: Mapped[str | None] = mapped_column(Text)
    state: Mapped[JobState] = mapped_column(EnumText(JobState), default=JobState.UNSUBMITTED)
    barrier_state: Mapped[BarrierState] = mapped_column(
        EnumText(BarrierState), default=BarrierState.WAITING
    )
    barrier_timeout: Mapped[float | None] = mapped_column(Float)  # seconds
    barrier_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[int] = mapped_column(Integer, nullable=False)

    __mapper_args__ = {"version_id_col": version}

    subjobs: Mapped[list["Subjob"]] = relationship(
        back_populates="coallocation",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="Subjob.position",
    )
    jobs: Mapped[list[Job]] = relationship(back_populates="coallocation")

    def __repr__(self) -> str:
        return f"CoallocatedJob({self.id}, {self.barrier_state.value})"


class Subjob(Base):
    """One component of a multi-request: its RM, start/comms types and GRAM job."""

    __tablename__ = "subjobs"
    __table_args__ = (UniqueConstraint("coallocation_id", "label"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    coallocation_id: Mapped[int] = mapped_column(
        ForeignKey("coallocated_jobs.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer, default=0)  # index in the multi-request
    label: Mapped[str | None] = mapped_column(String(128))
    rm: Mapped[str] = mapped_column(ForeignKey("resource_managers.name"))
    rsl: Mapped[str | None] = mapped_column(Text)
    start_type: Mapped[SubjobStartType] = mapped_column(
        EnumText(SubjobStartType), default=SubjobStartType.STRICT_BARRIER
    )
    comms_type: Mapped[SubjobCommsType] = mapped_column(
        EnumText(SubjobCommsType), default=SubjobCommsType.BLOCKING_JOIN
    )
    state: Mapped[JobState] = mapped_column(EnumText(JobState), default=JobState.UNSUBMITTED)
    gram_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    checked_in: Mapped[int] = mapped_column(Integer, default=0)  # processes at the barrier
    failure_reason: Mapped[str | None] = mapped_column(Text)

    coallocation: Mapped[CoallocatedJob] = relationship(back_populates="subjobs")
    gram_job: Mapped[Job | None] = relationship(foreign_keys=[gram_job_id])

    def __repr__(self) -> str:
        return f"Subjob({self.coallocation_id}/{self.label or self.position}, {self.rm})"
