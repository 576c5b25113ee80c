"""Workloads in the directory (issue 13 item 1): ``pod_workloads``, one row per Pod UID with its
controller chain and migration class (the newest ``PodWorkloadObserved``).

The same table as :data:`services.adapters.projection.workload_tables.pod_workloads`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0010_workloads_pod_workloads
Revises: 0009_frozen_observations
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010_workloads_pod_workloads"
down_revision: str | None = "0009_frozen_observations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    schema = _schema()
    op.create_table(
        "pod_workloads",
        sa.Column("pod_uid", sa.Text(), primary_key=True),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod_name", sa.Text(), nullable=False),
        sa.Column("status_version", sa.Numeric(39, 0)),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("workload_kind", sa.Text(), nullable=False),
        sa.Column("workload_name", sa.Text(), nullable=False),
        sa.Column("workload_uid", sa.Text(), nullable=False),
        sa.Column("chain", postgresql.JSONB(), nullable=False),
        sa.Column("chain_complete", sa.Boolean(), nullable=False),
        sa.Column("chain_reason", sa.Text()),
        sa.Column("migration_class", sa.Text(), nullable=False),
        sa.Column("migration_source", sa.Text(), nullable=False),
        sa.Column("checkpoint_max_age_seconds", sa.Integer()),
        sa.Column("shard", sa.Text()),
        sa.Column("migration_reasons", postgresql.JSONB(), nullable=False),
        schema=schema,
    )
    op.create_index("ix_pod_workloads_node", "pod_workloads", ["node"], schema=schema)
    op.create_index("ix_pod_workloads_namespace", "pod_workloads", ["namespace"], schema=schema)


def downgrade() -> None:
    op.drop_table("pod_workloads", schema=_schema())
