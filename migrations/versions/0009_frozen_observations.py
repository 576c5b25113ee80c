"""Frozen observations (issue 15 item 2): ``device_history.frozen``, true for a Healthy reported by
a terminated Pod, recorded but not applied to the device.

The same column as :data:`services.adapters.projection.tables.device_history`
(``tests/projection/test_migrations.py`` checks they agree). Rows written before this revision
read false: no observation was frozen then.

Revision ID: 0009_frozen_observations
Revises: 0008_dashboard_views
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_frozen_observations"
down_revision: str | None = "0008_dashboard_views"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.add_column(
        "device_history",
        sa.Column("frozen", sa.Boolean(), nullable=False, server_default=sa.false()),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_column("device_history", "frozen", schema=_schema())
