"""The governor's event-time merge's pending records (issue 12 throughput): ``governor_pending``,
one row per forwarded record the merge holds, written once with the batch that leaves it pending
and deleted with the batch that releases it. They used to be part of ``governor_fleet.snapshot``
(key ``order.pending``), which is rewritten every batch: on the training benchmark a lagging
partition kept ~3,700 records pending, ~1.7 MB of that one row a batch. A governor restoring a
fleet snapshot of that layout keeps those records and writes them here with its first batch
(``services.domain.governance.event_order.EventOrder.from_json``).

The same table as :data:`services.adapters.projection.governance_tables.governor_pending`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0017_governor_pending
Revises: 0016_governor_node_labels
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017_governor_pending"
down_revision: str | None = "0016_governor_node_labels"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.create_table(
        "governor_pending",
        sa.Column("source_partition", sa.Integer(), nullable=False),
        sa.Column("source_offset", sa.BigInteger(), nullable=False),
        sa.Column("source_index", sa.Integer(), nullable=False),
        sa.Column("snapshot", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint(
            "source_partition", "source_offset", "source_index", name="governor_pending_pkey"
        ),
        schema=_schema(),
    )


def downgrade() -> None:
    # The previous version reads the pending records from the fleet row only: put them back
    # there (the same objects, in source order), or a rollback would drop them unseen.
    schema = _schema().replace('"', '""')
    op.execute(
        f"""
        UPDATE "{schema}".governor_fleet
        SET snapshot = jsonb_set(
            snapshot #- '{{order,pendingCount}}',
            '{{order,pending}}',
            COALESCE(
                (SELECT jsonb_agg(p.snapshot
                                  ORDER BY p.source_partition, p.source_offset, p.source_index)
                 FROM "{schema}".governor_pending AS p),
                '[]'::jsonb
            )
        )
        WHERE snapshot ? 'order'
        """
    )
    op.drop_table("governor_pending", schema=_schema())
