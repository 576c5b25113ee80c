"""The claim lifecycle stages of each Pod (issue 16 item 5): ``pod_lifecycle_stages``, one row
per (Pod UID, stage, device class, path, claim UID) from the ``PodLifecycleObserved`` records,
first wins (the DRA-against-plugin comparison report reads it).

The same table as :data:`services.adapters.projection.lifecycle_tables.pod_lifecycle_stages`
(``tests/projection/test_migrations.py`` checks they agree).

Revision ID: 0013_pod_lifecycle_stages
Revises: 0012_dra_failures
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_pod_lifecycle_stages"
down_revision: str | None = "0012_dra_failures"
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
        "pod_lifecycle_stages",
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=False),
        sa.Column("device_class", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("claim_uid", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod_name", sa.Text(), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.CheckConstraint("seconds >= 0", name="ck_pod_lifecycle_stages_seconds"),
        sa.PrimaryKeyConstraint(
            "pod_uid",
            "stage",
            "device_class",
            "path",
            "claim_uid",
            name="pod_lifecycle_stages_pkey",
        ),
        schema=schema,
    )
    op.create_index(
        "ix_pod_lifecycle_stages_class",
        "pod_lifecycle_stages",
        ["device_class", "observed_at"],
        schema=schema,
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_index("ix_pod_lifecycle_stages_class", "pod_lifecycle_stages", schema=schema)
    op.drop_table("pod_lifecycle_stages", schema=schema)
