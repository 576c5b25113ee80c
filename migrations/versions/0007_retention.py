"""Retention (issue 11 item 9): ``device_identities.last_observed_at`` and ``partition`` (a claim
alias is forgotten a week after its last observation once unallocated), and an index of
``device_history`` by partition and event time (its optional retention deletes by them).

The same columns and index as :mod:`services.adapters.projection.inventory_tables` and
:mod:`services.adapters.projection.tables` (``tests/projection/test_migrations.py`` checks they
agree). Rows written before this revision keep NULLs (not forgotten) until their alias is
observed again; a replay fills them.

Revision ID: 0007_retention
Revises: 0006_command_fingerprint
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_retention"
down_revision: str | None = "0006_command_fingerprint"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    schema = _schema()
    op.add_column(
        "device_identities",
        sa.Column("last_observed_at", sa.DateTime(timezone=True), nullable=True),
        schema=schema,
    )
    op.add_column(
        "device_identities", sa.Column("partition", sa.Integer(), nullable=True), schema=schema
    )
    op.create_index(
        "ix_device_history_partition_time",
        "device_history",
        ["topic", "partition", "observed_at"],
        schema=schema,
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_index("ix_device_history_partition_time", table_name="device_history", schema=schema)
    op.drop_column("device_identities", "partition", schema=schema)
    op.drop_column("device_identities", "last_observed_at", schema=schema)
