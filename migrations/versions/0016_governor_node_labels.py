"""Each node's labels as the governor's adoption gate holds them (issue 16, issue 12 throughput):
``governor_node_labels``, one row per node, written by the governor only when that node's labels
change. They used to be part of ``governor_fleet.snapshot`` (key ``adoption.nodeLabels``), which
is rewritten every batch: 5,000 nodes of ~100 labels made that one row ~29 MB a batch. A governor
restoring a fleet snapshot of that layout keeps those labels and writes them here with its first
batch (``services.domain.governance.adoption_state.AdoptionGov.from_json``).

The same table as :data:`services.adapters.projection.governance_tables.governor_node_labels`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0016_governor_node_labels
Revises: 0015_node_labels
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016_governor_node_labels"
down_revision: str | None = "0015_node_labels"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.create_table(
        "governor_node_labels",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("snapshot", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("node", name="governor_node_labels_pkey"),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_table("governor_node_labels", schema=_schema())
