"""governance_commands.request_fingerprint (issue 11, item 4): the fingerprint of the HTTP request
that made a command with an Idempotency-Key, recorded by the governor with its decision, so that
every API process (after a restart, another replica) tells a retry from another request.

The same column as :mod:`services.adapters.projection.governance_tables`
(``tests/projection/test_migrations.py`` checks the two agree).

Revision ID: 0006_command_fingerprint
Revises: 0005_pod_tombstones
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_command_fingerprint"
down_revision: str | None = "0005_pod_tombstones"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    op.add_column(
        "governance_commands",
        sa.Column("request_fingerprint", sa.Text(), nullable=True),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_column("governance_commands", "request_fingerprint", schema=_schema())
