"""pod_tombstones (issue 11 item 7): one row per released Pod UID with the release's ordering key,
so an observation older than the release adds no allocation back.

The same table as :mod:`services.adapters.projection.tables`
(``tests/projection/test_migrations.py`` checks the two agree).

Revision ID: 0005_pod_tombstones
Revises: 0004_identity_reported_with
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_pod_tombstones"
down_revision: str | None = "0004_identity_reported_with"
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
        "pod_tombstones",
        sa.Column("pod_uid", sa.Text(), primary_key=True),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("status_version", sa.Numeric(39, 0), nullable=True),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=False),
        schema=schema,
    )
    op.create_index(
        "ix_pod_tombstones_released_at", "pod_tombstones", ["released_at"], schema=schema
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_index("ix_pod_tombstones_released_at", table_name="pod_tombstones", schema=schema)
    op.drop_table("pod_tombstones", schema=schema)
