"""Jobs by RM, state and Maui state: the idle queue and the starting jobs of a deep queue.

With 100,000 idle jobs on one RM, every iteration's look-ups of its few Starting jobs
(recovery, reconciliation, the next launch timeout) scanned every PENDING row through
``ix_jobs_rm_state``; with the Maui state in the index they are a seek, and the idle
queue's ``(id, version)`` read walks the index in id order, without a sort.

Revision ID: 0003_jobs_queue_index
Revises: 0002_fence
Create Date: 2026-11-28 17:15:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = '0003_jobs_queue_index'
down_revision: str | Sequence[str] | None = '0002_fence'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index('ix_jobs_rm_state_maui', 'jobs', ['rm', 'state', 'maui_state'],
                    unique=False)


def downgrade() -> None:
    op.drop_index('ix_jobs_rm_state_maui', table_name='jobs')
