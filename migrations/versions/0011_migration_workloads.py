"""The migration policy's workload facts (issue 13 item 2, branch ``migration``):
``governor_workloads``, one row per (node, resourceID, Pod UID) the governor knows holds a
device, written by the governor when a fact changes and read back when it restores its state.

The same table as :data:`services.adapters.projection.governance_tables.governor_workloads`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0011_migration_workloads
Revises: 0010_workloads_pod_workloads
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011_migration_workloads"
down_revision: str | None = "0010_workloads_pod_workloads"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.create_table(
        "governor_workloads",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("snapshot", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("node", "resource_id", "pod_uid", name="governor_workloads_pkey"),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_table("governor_workloads", schema=_schema())
