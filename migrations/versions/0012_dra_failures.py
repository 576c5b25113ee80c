"""Driver and claim failures (issue 16 item 3): ``dra_failures``, one row per failure source (a
core/v1 Event's uid, or a Pod's ``PodScheduled`` transition) with its class and occurrences (the
``DRAFailureObserved`` records of the health topic).

The same table as :data:`services.adapters.projection.failure_tables.dra_failures`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0012_dra_failures
Revises: 0011_migration_workloads
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_dra_failures"
down_revision: str | None = "0011_migration_workloads"
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
        "dra_failures",
        sa.Column("source_uid", sa.Text(), primary_key=True),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod_name", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text()),
        sa.Column("node", sa.Text()),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("failure_class", sa.Text(), nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("first_observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        schema=schema,
    )
    op.create_index(
        "ix_dra_failures_class", "dra_failures", ["failure_class", "reason"], schema=schema
    )


def downgrade() -> None:
    op.drop_table("dra_failures", schema=_schema())
