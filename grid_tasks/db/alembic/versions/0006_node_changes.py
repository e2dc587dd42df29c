"""Per-RM change counters of the node list, kept by triggers on ``nodes``.

A scheduler keeps the node list it read last (:mod:`grid_tasks.scheduling.node_table`)
while the RM's counter is the one it read then: reading and decoding every node row of
a 100-node RM was a fifth of the per-node cost of every iteration.  Every insert or
delete of a node row, and every update of what the scheduler plans with (its RM, name,
processors, memory, disk, swap, features), adds one to its RM's counter in the writer's
transaction, whoever the writer is; a heartbeat's ``last_seen`` or ``state`` does not
count.  SQLite runs the triggers at once; PostgreSQL at commit (deferred constraint
trigger), as the idle queue's counters of 0004 do.

Revision ID: 0006_node_changes
Revises: 0005_idle_queue_log
Create Date: 2026-12-01 23:55:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006_node_changes'
down_revision: str | Sequence[str] | None = '0005_idle_queue_log'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The planned-with columns, frozen here as a migration must be.
_COLUMNS = ("rm", "name", "procs", "memory_mb", "disk_mb", "swap_mb")
_BUMP = ("INSERT INTO node_changes (rm, changes) VALUES ({rm}, 1) ON CONFLICT (rm) "
         "DO UPDATE SET changes = node_changes.changes + 1;")
_SQLITE_CHANGED = " OR ".join([f"OLD.{c} IS NOT NEW.{c}" for c in _COLUMNS]
                              + ["OLD.features IS NOT NEW.features"])
# an update moving a node to another RM counts for both; within one RM once
_SQLITE_MOVED = ("INSERT INTO node_changes (rm, changes) SELECT NEW.rm, 1 WHERE NEW.rm IS NOT "
                 "OLD.rm ON CONFLICT (rm) DO UPDATE SET changes = node_changes.changes + 1;")
_SQLITE = {
    "nodes_changes_insert": ("AFTER INSERT ON nodes", _BUMP.format(rm="NEW.rm")),
    "nodes_changes_delete": ("AFTER DELETE ON nodes", _BUMP.format(rm="OLD.rm")),
    "nodes_changes_update": (f"AFTER UPDATE ON nodes WHEN {_SQLITE_CHANGED}",
                             _BUMP.format(rm="OLD.rm") + " " + _SQLITE_MOVED),
}
_PG_CHANGED = " OR ".join([f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in _COLUMNS]
                          + ["OLD.features::text IS DISTINCT FROM NEW.features::text"])
_PG_FUNCTION = f"""
CREATE FUNCTION node_list_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NOT ({_PG_CHANGED}) THEN
    RETURN NULL;
  END IF;
  IF TG_OP <> 'INSERT' THEN
    {_BUMP.format(rm="OLD.rm")}
  END IF;
  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND OLD.rm IS DISTINCT FROM NEW.rm) THEN
    {_BUMP.format(rm="NEW.rm")}
  END IF;
  RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.create_table('node_changes',
    sa.Column('rm', sa.String(length=64), nullable=False),
    sa.Column('changes', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('rm', name=op.f('pk_node_changes'))
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute("CREATE CONSTRAINT TRIGGER nodes_changes AFTER INSERT OR UPDATE OR DELETE "
                   "ON nodes DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                   "EXECUTE FUNCTION node_list_changed()")
        return
    for name, (when, body) in _SQLITE.items():
        op.execute(f"CREATE TRIGGER {name} {when} BEGIN {body} END")


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER nodes_changes ON nodes")
        op.execute("DROP FUNCTION node_list_changed()")
    else:
        for name in _SQLITE:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table('node_changes')
