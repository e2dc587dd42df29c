"""The idle queue's changes logged with their jobs, by the triggers of 0004.

A scheduler that kept an RM's queue at change count ``c`` and finds the count moved
read every row's ``(id, version)`` to learn what changed: with 100,000 idle jobs that
was most of a changed iteration.  Each count is now also a row (rm, seq = the new
count, job id) of ``idle_queue_log``, written by the same trigger right after the
count, so it reads only the jobs of counts past ``c``.  The counter row is updated
first: its lock orders the writers, so counts, and log rows, commit in count order.
Once every LOG_PRUNE_EVERY counts the trigger deletes what is older than the last
LOG_KEEP (an index range, not a delete per change).

Revision ID: 0005_idle_queue_log
Revises: 0004_idle_queue_changes
Create Date: 2026-12-02 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005_idle_queue_log'
down_revision: str | Sequence[str] | None = '0004_idle_queue_changes'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here, as a migration must be (the model's LOG_KEEP may change later).
_KEEP, _EVERY = 50_000, 1_000
# 0004's conditions and count, as it wrote them.
_IDLE_OLD = "OLD.rm IS NOT NULL AND OLD.state = 'PENDING' AND OLD.maui_state = 'Idle'"
_IDLE_NEW = "NEW.rm IS NOT NULL AND NEW.state = 'PENDING' AND NEW.maui_state = 'Idle'"
_BUMP = ("INSERT INTO idle_queue_changes (rm, changes) VALUES ({rm}, 1) ON CONFLICT (rm) "
         "DO UPDATE SET changes = idle_queue_changes.changes + 1")
_SQLITE = {
    "jobs_idle_insert": ("NEW", f"AFTER INSERT ON jobs WHEN {_IDLE_NEW}"),
    "jobs_idle_delete": ("OLD", f"AFTER DELETE ON jobs WHEN {_IDLE_OLD}"),
    "jobs_idle_left": ("OLD", f"AFTER UPDATE ON jobs WHEN {_IDLE_OLD}"),
    "jobs_idle_entered": ("NEW", f"AFTER UPDATE ON jobs WHEN {_IDLE_NEW} AND NOT ({_IDLE_OLD} "
                                 "AND OLD.rm = NEW.rm)"),
}


def _sqlite_body(row: str, log: bool) -> str:
    """The statements of one SQLite trigger for the ``row`` (OLD or NEW) it counts."""
    body = f"{_BUMP.format(rm=f'{row}.rm')};"
    if log:
        count = f"FROM idle_queue_changes WHERE rm = {row}.rm"
        body += (f" INSERT INTO idle_queue_log (rm, seq, job_id) SELECT rm, changes, {row}.id"
                 f" {count}; DELETE FROM idle_queue_log WHERE rm = {row}.rm AND seq <= (SELECT"
                 f" CASE WHEN changes % {_EVERY} = 0 THEN changes - {_KEEP} ELSE -1 END {count});")
    return body


def _pg_count(row: str, log: bool) -> str:
    if not log:
        return f"{_BUMP.format(rm=f'{row}.rm')};"
    return (f"{_BUMP.format(rm=f'{row}.rm')} RETURNING changes INTO n;"
            f" INSERT INTO idle_queue_log (rm, seq, job_id) VALUES ({row}.rm, n, {row}.id);"
            f" IF n % {_EVERY} = 0 THEN DELETE FROM idle_queue_log WHERE rm = {row}.rm"
            f" AND seq <= n - {_KEEP}; END IF;")


def _pg_function(log: bool) -> str:
    return f"""
CREATE OR REPLACE FUNCTION idle_queue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n BIGINT;
BEGIN
  IF TG_OP <> 'INSERT' AND {_IDLE_OLD} THEN
    {_pg_count("OLD", log)}
  END IF;
  IF TG_OP <> 'DELETE' AND {_IDLE_NEW}
     AND NOT (TG_OP = 'UPDATE' AND {_IDLE_OLD} AND OLD.rm = NEW.rm) THEN
    {_pg_count("NEW", log)}
  END IF;
  RETURN NULL;
END $$
"""


def _triggers(log: bool) -> None:
    """(Re)write the counting triggers of 0004, logging (``log``) or not."""
    if op.get_context().dialect.name == "postgresql":
        op.execute(_pg_function(log))  # the trigger of 0004 calls it by name
        return
    for name, (row, when) in _SQLITE.items():
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute(f"CREATE TRIGGER {name} {when} BEGIN {_sqlite_body(row, log)} END")


def upgrade() -> None:
    op.create_table('idle_queue_log',
    sa.Column('rm', sa.String(length=64), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('rm', 'seq', name=op.f('pk_idle_queue_log'))
    )
    _triggers(log=True)


def downgrade() -> None:
    _triggers(log=False)
    op.drop_table('idle_queue_log')
