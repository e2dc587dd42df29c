"""Per-RM change counters of the idle queue, kept by triggers on ``jobs``.

A scheduler reuses the idle queue it read last while the RM's counter is the one it
read then (:mod:`grid_tasks.scheduling.idle_queue`): with 100,000 idle jobs, reading
every row's ``(id, version)`` only to find nothing changed was most of an unchanged
iteration.  Every insert, update or delete of a row that is or was an idle job
(``state`` PENDING, ``maui_state`` Idle) adds one to its RM's counter in the writer's
transaction, whoever the writer is.  SQLite runs the triggers at once (one writer at a
time); PostgreSQL at commit (deferred constraint trigger), so the counter row's lock is
held only while committing, never while a transaction goes on to lock job rows.

Revision ID: 0004_idle_queue_changes
Revises: 0003_jobs_queue_index
Create Date: 2026-11-28 20:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004_idle_queue_changes'
down_revision: str | Sequence[str] | None = '0003_jobs_queue_index'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The idle queue's rows as stored (EnumText keeps the values); frozen here, as a
# migration must be: a change of IDLE_MAUI_STATES needs a migration of its own.
_IDLE_OLD = "OLD.rm IS NOT NULL AND OLD.state = 'PENDING' AND OLD.maui_state = 'Idle'"
_IDLE_NEW = "NEW.rm IS NOT NULL AND NEW.state = 'PENDING' AND NEW.maui_state = 'Idle'"
_BUMP = ("INSERT INTO idle_queue_changes (rm, changes) VALUES ({rm}, 1) ON CONFLICT (rm) "
         "DO UPDATE SET changes = idle_queue_changes.changes + 1;")
_SQLITE = {
    "jobs_idle_insert": f"AFTER INSERT ON jobs WHEN {_IDLE_NEW}",
    "jobs_idle_delete": f"AFTER DELETE ON jobs WHEN {_IDLE_OLD}",
    "jobs_idle_left": f"AFTER UPDATE ON jobs WHEN {_IDLE_OLD}",
    "jobs_idle_entered": (f"AFTER UPDATE ON jobs WHEN {_IDLE_NEW} AND NOT ({_IDLE_OLD} "
                          "AND OLD.rm = NEW.rm)"),
}
_PG_FUNCTION = f"""
CREATE FUNCTION idle_queue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' AND {_IDLE_OLD} THEN
    {_BUMP.format(rm="OLD.rm")}
  END IF;
  IF TG_OP <> 'DELETE' AND {_IDLE_NEW}
     AND NOT (TG_OP = 'UPDATE' AND {_IDLE_OLD} AND OLD.rm = NEW.rm) THEN
    {_BUMP.format(rm="NEW.rm")}
  END IF;
  RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.create_table('idle_queue_changes',
    sa.Column('rm', sa.String(length=64), nullable=False),
    sa.Column('changes', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('rm', name=op.f('pk_idle_queue_changes'))
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute("CREATE CONSTRAINT TRIGGER jobs_idle_queue AFTER INSERT OR UPDATE OR DELETE "
                   "ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                   "EXECUTE FUNCTION idle_queue_changed()")
        return
    for name, when in _SQLITE.items():
        row = "OLD.rm" if name in ("jobs_idle_delete", "jobs_idle_left") else "NEW.rm"
        op.execute(f"CREATE TRIGGER {name} {when} BEGIN {_BUMP.format(rm=row)} END")


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER jobs_idle_queue ON jobs")
        op.execute("DROP FUNCTION idle_queue_changed()")
    else:
        for name in _SQLITE:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table('idle_queue_changes')
