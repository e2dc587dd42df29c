"""Fences: resources of lost or unconfirmed job parts, held until their fence deadline.

Revision ID: 0002_fence
Revises: 0001
Create Date: 2026-11-26 14:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002_fence'
down_revision: str | Sequence[str] | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('fences',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('rm', sa.String(length=64), nullable=True),
    sa.Column('token', sa.String(length=128), nullable=True),
    sa.Column('nodes', sa.JSON(), nullable=False),
    sa.Column('mem_per_task', sa.Integer(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('deadline', sa.DateTime(timezone=True), nullable=False),
    sa.Column('requeue', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_fences_job_id_jobs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['rm'], ['resource_managers.name'], name=op.f('fk_fences_rm_resource_managers')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_fences'))
    )
    op.create_index(op.f('ix_fences_job_id'), 'fences', ['job_id'], unique=False)
    op.create_index('ix_fences_rm_deadline', 'fences', ['rm', 'deadline'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_fences_rm_deadline', table_name='fences')
    op.drop_index(op.f('ix_fences_job_id'), table_name='fences')
    op.drop_table('fences')
