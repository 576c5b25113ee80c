"""Each Node's labels (issue 16, pools selected by node labels): ``node_labels``, one row per
node, from its newest ``NodeLabelsChanged`` record.

The same table as :data:`services.adapters.projection.inventory_tables.node_labels`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0015_node_labels
Revises: 0014_migration_evidence
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0015_node_labels"
down_revision: str | None = "0014_migration_evidence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.create_table(
        "node_labels",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("labels", postgresql.JSONB(), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("node", name="node_labels_pkey"),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_table("node_labels", schema=_schema())
