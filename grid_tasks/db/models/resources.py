"""Resource managers (clusters) and their nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from grid_tasks.states import NodeState

from .base import Base, EnumText, JSONDict, JSONList, UTCDateTime, utcnow


class ResourceManager(Base):
    """A named cluster with its own Maui policy file; the name is the key everywhere."""

    __tablename__ = "resource_managers"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    policy_file: Mapped[str | None] = mapped_column(String(1024))
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONDict, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    nodes: Mapped[list["Node"]] = relationship(
        back_populates="resource_manager",
        cascade="all, delete-orphan",
        order_by="Node.name",
    )

    def __repr__(self) -> str:
        return f"ResourceManager({self.name!r})"


class Node(Base):
    """A compute host of one resource manager, with configured resources.

    ``procs``/``memory_mb``/``disk_mb``/``swap_mb`` are what the scheduler may
    hand out (Maui's configured resources); ``last_seen`` is the last heartbeat
    recorded durably (the live TTL heartbeat lives in Redis).
    """

    __tablename__ = "nodes"
    __table_args__ = (UniqueConstraint("rm", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rm: Mapped[str] = mapped_column(
        ForeignKey("resource_managers.name", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(128))
    procs: Mapped[int] = mapped_column(Integer, default=1)
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    disk_mb: Mapped[int] = mapped_column(Integer, default=0)
    swap_mb: Mapped[int] = mapped_column(Integer, default=0)
    features: Mapped[list[str]] = mapped_column(JSONList, default=list)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONDict, default=dict)
    state: Mapped[NodeState] = mapped_column(EnumText(NodeState), default=NodeState.UNKNOWN)
    registered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_seen: Mapped[datetime | None] = mapped_column(UTCDateTime)

    resource_manager: Mapped[ResourceManager] = relationship(back_populates="nodes")

    def __repr__(self) -> str:
        return f"Node({self.rm}/{self.name}, {self.state.value})"
