"""Initial projection: devices, device_history, partition_progress.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATUS_VERSION = sa.Numeric(39, 0)


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    schema = _schema()
    op.create_table(
        "devices",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("resource_name", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("health", sa.Text(), nullable=False),
        sa.Column("raw_health", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("status_version", STATUS_VERSION, nullable=True),
        sa.Column("ordered", sa.Boolean(), nullable=False),
        sa.Column("last_observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_transition_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("allocations", postgresql.JSONB(), nullable=False),
        sa.Column("flags", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.PrimaryKeyConstraint("node", "resource_id", name="devices_pkey"),
        schema=schema,
    )
    op.create_index("ix_devices_health", "devices", ["health"], schema=schema)
    op.create_index("ix_devices_resource_name", "devices", ["resource_name"], schema=schema)
    op.create_index("ix_devices_source", "devices", ["source"], schema=schema)
    op.create_index(
        "ix_devices_allocations",
        "devices",
        ["allocations"],
        schema=schema,
        postgresql_using="gin",
        postgresql_ops={"allocations": "jsonb_path_ops"},
    )

    op.create_table(
        "device_history",
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("health", sa.Text(), nullable=False),
        sa.Column("status_version", STATUS_VERSION, nullable=True),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("transition", sa.Boolean(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod_name", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("raw_health", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('observed', 'released')", name="ck_device_history_kind"),
        sa.PrimaryKeyConstraint(
            "topic", "partition", "offset", "node", "resource_id", name="device_history_pkey"
        ),
        schema=schema,
    )
    op.create_index(
        "ix_device_history_device",
        "device_history",
        ["node", "resource_id", "observed_at"],
        schema=schema,
    )

    op.create_table(
        "partition_progress",
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=True),
        sa.Column("highwater", sa.BigInteger(), nullable=True),
        sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("topic", "partition", name="partition_progress_pkey"),
        schema=schema,
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_table("partition_progress", schema=schema)
    op.drop_index("ix_device_history_device", table_name="device_history", schema=schema)
    op.drop_table("device_history", schema=schema)
    op.drop_index("ix_devices_allocations", table_name="devices", schema=schema)
    op.drop_index("ix_devices_source", table_name="devices", schema=schema)
    op.drop_index("ix_devices_resource_name", table_name="devices", schema=schema)
    op.drop_index("ix_devices_health", table_name="devices", schema=schema)
    op.drop_table("devices", schema=schema)
