"""Inventory projection (issue 4): inventory_objects, node_resources, device_identities,
inventory_conflicts.

The same tables as :mod:`services.adapters.projection.inventory_tables`
(``tests/projection/test_migrations.py`` checks the two agree).

Revision ID: 0003_inventory
Revises: 0002_governance
Create Date: 2026-12-13
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003_inventory"
down_revision: str | None = "0002_governance"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


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
        "inventory_objects",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("object_key", sa.Text(), nullable=False),
        sa.Column("record_key", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("object", postgresql.JSONB(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("observed_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "object_key", name="inventory_objects_pkey"),
        schema=schema,
    )
    op.create_index("ix_inventory_objects_node", "inventory_objects", ["node"], schema=schema)

    op.create_table(
        "node_resources",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("capacity", postgresql.JSONB(), nullable=False),
        sa.Column("allocatable", postgresql.JSONB(), nullable=False),
        sa.Column("observed_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("node", name="node_resources_pkey"),
        schema=schema,
    )

    op.create_table(
        "device_identities",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("device_id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("uuid", sa.Text(), nullable=True),
        sa.Column("candidates", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("observed_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("node", "resource_id", name="device_identities_pkey"),
        schema=schema,
    )
    op.create_index(
        "ix_device_identities_device",
        "device_identities",
        ["node", "device_id"],
        schema=schema,
    )

    op.create_table(
        "inventory_conflicts",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("first_seen", _time(), nullable=False),
        sa.Column("last_seen", _time(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "node", "subject", name="inventory_conflicts_pkey"),
        schema=schema,
    )
    op.create_index(
        "ix_inventory_conflicts_active", "inventory_conflicts", ["active"], schema=schema
    )


def downgrade() -> None:
    schema = _schema()
    op.drop_index("ix_inventory_conflicts_active", table_name="inventory_conflicts", schema=schema)
    op.drop_table("inventory_conflicts", schema=schema)
    op.drop_index("ix_device_identities_device", table_name="device_identities", schema=schema)
    op.drop_table("device_identities", schema=schema)
    op.drop_table("node_resources", schema=schema)
    op.drop_index("ix_inventory_objects_node", table_name="inventory_objects", schema=schema)
    op.drop_table("inventory_objects", schema=schema)
