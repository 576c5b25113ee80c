"""A non-recoverable migration's evidence (issue 13 item 3): ``migration_evidence``, one row per
(migration, Pod UID), the first evidence the governor accepted for that Pod.

The same table as :data:`services.adapters.projection.governance_tables.migration_evidence`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0014_migration_evidence
Revises: 0013_pod_lifecycle_stages
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014_migration_evidence"
down_revision: str | None = "0013_pod_lifecycle_stages"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.create_table(
        "migration_evidence",
        sa.Column("migration_id", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod_name", sa.Text(), nullable=False),
        sa.Column("resource_version", sa.Text(), nullable=False),
        sa.Column("status", postgresql.JSONB(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("migration_id", "pod_uid", name="migration_evidence_pkey"),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_table("migration_evidence", schema=_schema())
