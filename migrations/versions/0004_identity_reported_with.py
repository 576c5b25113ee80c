"""device_identities.reported_with (issue 10): the claim each reported device was last reported
with, so that a worker loaded from the tables re-resolves an unresolved identity when its claim
arrives, as one that never stopped does.

The same column as :mod:`services.adapters.projection.inventory_tables`
(``tests/projection/test_migrations.py`` checks the two agree).

Revision ID: 0004_identity_reported_with
Revises: 0003_inventory
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004_identity_reported_with"
down_revision: str | None = "0003_inventory"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.add_column(
        "device_identities",
        sa.Column("reported_with", postgresql.JSONB(), nullable=True),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_column("device_identities", "reported_with", schema=_schema())
