"""Governance projection (issue 3): device_governance, governor_nodes, governor_fleet,
quarantines, governance_decisions, governance_commands.

The same tables as :mod:`services.adapters.projection.governance_tables`
(``tests/projection/test_migrations.py`` checks the two agree).

Revision ID: 0002_governance
Revises: 0001_initial
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002_governance"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATUS_VERSION = sa.Numeric(39, 0)


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def _time() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    schema = _schema()
    op.create_table(
        "device_governance",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("resource_name", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("resource_claim", sa.Text(), nullable=True),
        sa.Column("observed_health", sa.Text(), nullable=False),
        sa.Column("effective_health", sa.Text(), nullable=False),
        sa.Column("effective_reason", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("state_since", _time(), nullable=False),
        sa.Column("status_version", STATUS_VERSION, nullable=True),
        sa.Column("unknown_since", _time(), nullable=True),
        sa.Column("deadline", _time(), nullable=True),
        sa.Column("quarantine_id", sa.Text(), nullable=True),
        sa.Column("snapshot", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("node", "resource_id", name="device_governance_pkey"),
        schema=schema,
    )
    op.create_index("ix_device_governance_state", "device_governance", ["state"], schema=schema)

    op.create_table(
        "governor_nodes",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("last_heartbeat_at", _time(), nullable=True),
        sa.Column("heartbeat_lost", sa.Boolean(), nullable=False),
        sa.Column("incident", sa.Text(), nullable=True),
        sa.Column("snapshot", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("node", name="governor_nodes_pkey"),
        schema=schema,
    )

    op.create_table(
        "governor_fleet",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("watermark", _time(), nullable=True),
        sa.Column("breaker_open", sa.Boolean(), nullable=False),
        sa.Column("automation_paused", sa.Boolean(), nullable=False),
        sa.Column("snapshot", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="governor_fleet_pkey"),
        schema=schema,
    )

    op.create_table(
        "quarantines",
        sa.Column("quarantine_id", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("resource_claim", sa.Text(), nullable=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("expires_at", _time(), nullable=True),
        sa.Column("released_at", _time(), nullable=True),
        sa.Column("release_reason", sa.Text(), nullable=True),
        sa.Column("released_by", sa.Text(), nullable=True),
        sa.Column("confirmed_fault", sa.Boolean(), nullable=False),
        sa.Column("lease_holder", sa.Text(), nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("lease_expires_at", _time(), nullable=True),
        sa.Column("recovery_stage", sa.Text(), nullable=True),
        sa.Column("recovery_attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("quarantine_id", name="quarantines_pkey"),
        schema=schema,
    )
    op.create_index("ix_quarantines_device", "quarantines", ["node", "resource_id"], schema=schema)
    op.create_index("ix_quarantines_status", "quarantines", ["status"], schema=schema)

    op.create_table(
        "governance_decisions",
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("at", _time(), nullable=False),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("resource_id", sa.Text(), nullable=True),
        sa.Column("incident", sa.Text(), nullable=True),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("seq", "idx", name="governance_decisions_pkey"),
        schema=schema,
    )
    op.create_index(
        "ix_governance_decisions_device",
        "governance_decisions",
        ["node", "resource_id", "seq"],
        schema=schema,
    )
    op.create_index("ix_governance_decisions_kind", "governance_decisions", ["kind"], schema=schema)

    op.create_table(
        "governance_commands",
        sa.Column("command_id", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("command_id", name="governance_commands_pkey"),
        schema=schema,
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_table("governance_commands", schema=schema)
    op.drop_index("ix_governance_decisions_kind", table_name="governance_decisions", schema=schema)
    op.drop_index(
        "ix_governance_decisions_device", table_name="governance_decisions", schema=schema
    )
    op.drop_table("governance_decisions", schema=schema)
    op.drop_index("ix_quarantines_status", table_name="quarantines", schema=schema)
    op.drop_index("ix_quarantines_device", table_name="quarantines", schema=schema)
    op.drop_table("quarantines", schema=schema)
    op.drop_table("governor_fleet", schema=schema)
    op.drop_table("governor_nodes", schema=schema)
    op.drop_index("ix_device_governance_state", table_name="device_governance", schema=schema)
    op.drop_table("device_governance", schema=schema)
