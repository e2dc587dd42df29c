"""Per-RM change counters of the idle queue, kept by the database itself.

A scheduler keeps the last idle queue it read (``scheduling/idle_queue.py``) and must
know, cheaply and exactly, whether any row entered, left or changed in that queue
since.  Job rows have many writers (gatekeepers, iterations, followers, cancels,
operator commands; ORM and Core), so the counter is not left to them: triggers on
``jobs`` (migration 0004) add one for every insert, update or delete of a row that is
or was an idle job of the RM, in the writer's own transaction.  SQLite fires them at
once (its writers are serialised); PostgreSQL at commit (a deferred constraint
trigger), so the counter row is locked only while committing and two writers of one
RM never wait for each other's job rows while holding it.

Since migration 0005 each count is also logged with the job it counts
(:class:`IdleQueueLog`): a scheduler that kept the queue at count ``c`` reads which
jobs changed since, instead of every row's ``(id, version)``.  The counter row's lock
makes counts and log rows committed in count order; the triggers keep the last
:data:`LOG_KEEP` counts of each RM.  An RM's node list has a counter of its own,
kept the same way (:class:`NodeChanges`, migration 0006).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base


class IdleQueueChanges(Base):
    """How many times ``rm``'s idle queue changed (written only by the triggers)."""

    __tablename__ = "idle_queue_changes"

    rm: Mapped[str] = mapped_column(String(64), primary_key=True)
    changes: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)


#: Counts of an RM kept in the log: a reader further behind reads the whole queue.
LOG_KEEP = 50_000
#: The triggers prune the log once every this many counts (not a delete per change).
LOG_PRUNE_EVERY = 1_000


class IdleQueueLog(Base):
    """Which job the ``seq``-th change of ``rm``'s idle queue was (written only by the
    triggers, pruned by them to the last :data:`LOG_KEEP` counts)."""

    __tablename__ = "idle_queue_log"

    rm: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(Integer, nullable=False)


class NodeChanges(Base):
    """How many times ``rm``'s node list changed as the scheduler plans with it (rows
    added or removed; name, processors, memory, disk, swap or features changed),
    written only by the triggers of migration 0006 (:mod:`grid_tasks.scheduling.node_table`
    reuses its last node list while the counter stands)."""

    __tablename__ = "node_changes"

    rm: Mapped[str] = mapped_column(String(64), primary_key=True)
    changes: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
