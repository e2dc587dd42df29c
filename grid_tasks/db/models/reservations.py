"""Advance reservations (Maui admin/job reservations and grid co-reservations)."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, EnumText, JSONDict, JSONList, UTCDateTime, utcnow

#: The ACL keys a reservation may restrict on, in Maui's credential order.
ACL_KEYS = ("users", "groups", "accounts", "classes", "qos", "jobs")


class ReservationKind(str, Enum):
    """Who made a reservation: an operator, the scheduler for one job, or the grid broker."""

    ADMIN = "admin"
    JOB = "job"
    GRID = "grid"


class Reservation(Base):
    """Resources held on an RM over ``[start_time, end_time)`` for whoever the ACL admits.

    ``acl`` maps each of :data:`ACL_KEYS` to a list of admitted names (job ids for
    ``jobs``); a missing key admits nobody by that credential.  ``nodes`` lists
    the node names held; ``resources`` the amounts held per node (procs,
    memory_mb, ...).  A grid reservation starts unconfirmed with the broker's
    ``token`` and becomes ``confirmed`` when the enactor commits it.
    """

    __tablename__ = "reservations"
    __table_args__ = (
        UniqueConstraint("rm", "name"),
        Index("ix_reservations_rm_start_time_end_time", "rm", "start_time", "end_time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    rm: Mapped[str | None] = mapped_column(ForeignKey("resource_managers.name"))
    kind: Mapped[ReservationKind] = mapped_column(
        EnumText(ReservationKind), default=ReservationKind.ADMIN
    )
    acl: Mapped[dict[str, Any]] = mapped_column(JSONDict, default=dict)
    nodes: Mapped[list[str]] = mapped_column(JSONList, default=list)
    resources: Mapped[dict[str, Any]] = mapped_column(JSONDict, default=dict)
    start_time: Mapped[datetime] = mapped_column(UTCDateTime)
    end_time: Mapped[datetime] = mapped_column(UTCDateTime)
    owner_job_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="SET NULL"), index=True
    )
    token: Mapped[str | None] = mapped_column(String(128), index=True)
    confirmed: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def admits(self, credential: str, value: str | int) -> bool:
        """Whether the ACL lists ``value`` under ``credential`` (one of :data:`ACL_KEYS`)."""
        return value in (self.acl or {}).get(credential, ())

    def __repr__(self) -> str:
        return f"Reservation({self.rm}/{self.name}, {self.kind.value})"
