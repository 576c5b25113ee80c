"""The projection's tables, as SQLAlchemy Core metadata.

The tables carry no schema: every statement runs with ``schema_translate_map={None: schema}`` (see
:func:`in_schema`), so one definition serves any target schema (``public``, a replay schema, a
test's private schema). The Alembic revisions in ``migrations/versions`` create the same tables;
``tests/projection/test_migrations.py`` checks the two agree.

Replaying the same log must give identical ``devices`` and ``device_history`` rows, so nothing in
them comes from the wall clock; ``partition_progress.updated_at`` is the one wall-clock column, and
it is excluded from replay comparison.
"""

from __future__ import annotations

import re
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    Numeric,
    Table,
    Text,
    false,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData()
"""The projection's tables; schema-less (translated per connection, see :func:`in_schema`)."""

STATUS_VERSION = Numeric(39, 0)
"""Kubernetes resourceVersions are decimal integers that may exceed 2**63; 39 digits hold 2**128."""

devices = Table(
    "devices",
    metadata,
    Column("node", Text, primary_key=True),
    Column("resource_id", Text, primary_key=True),
    Column("resource_name", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("health", Text, nullable=False),
    Column("raw_health", Text),
    Column("message", Text),
    Column("status_version", STATUS_VERSION),
    Column("ordered", Boolean, nullable=False),
    Column("last_observed_at", DateTime(timezone=True), nullable=False),
    Column("last_transition_at", DateTime(timezone=True), nullable=False),
    # Sorted by podUID: [{podUID, namespace, podName, containers: [{name, kind}], claim,
    # statusVersion (decimal string or null)}]
    Column("allocations", JSONB, nullable=False),
    Column("flags", ARRAY(Text), nullable=False),
    Index("ix_devices_health", "health"),
    Index("ix_devices_resource_name", "resource_name"),
    Index("ix_devices_source", "source"),
    Index(
        "ix_devices_allocations",
        "allocations",
        postgresql_using="gin",
        postgresql_ops={"allocations": "jsonb_path_ops"},
    ),
)
"""Current state of each device ``(node, resource_id)``: one row per :class:`DeviceRecord`."""

device_history = Table(
    "device_history",
    metadata,
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("node", Text, primary_key=True),
    Column("resource_id", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("health", Text, nullable=False),
    Column("status_version", STATUS_VERSION),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("transition", Boolean, nullable=False),
    Column("pod_uid", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod_name", Text, nullable=False),
    Column("message", Text),
    Column("raw_health", Text),
    # 0008: a Healthy of a terminated Pod, recorded but not applied (issue 15 item 2).
    Column("frozen", Boolean, nullable=False, server_default=false()),
    CheckConstraint("kind IN ('observed', 'released')", name="ck_device_history_kind"),
    Index("ix_device_history_device", "node", "resource_id", "observed_at"),
    # Retention (0007): the rows of a partition older than its horizon, found without a scan.
    Index("ix_device_history_partition_time", "topic", "partition", "observed_at"),
)
"""Append-only: one row per change an event made to a device, keyed by the event's log position.

``kind`` is ``observed`` (an applied observation) or ``released`` (a Pod's allocation removed).
``health`` is the device's health after the event (a release leaves it unchanged); every other
column is the event's (``message`` and ``raw_health`` are null for a release). ``frozen`` rows are
Healthy observations of terminated Pods: recorded, not applied (``health`` is the observation's,
the device's state is unchanged). With
``DEVICESTATE_DEVICE_HISTORY_RETENTION_SECONDS`` set, rows older than that before their
partition's ``last_event_at`` are deleted (:mod:`services.domain.retention`).
"""

pod_tombstones = Table(
    "pod_tombstones",
    metadata,
    Column("pod_uid", Text, primary_key=True),
    Column("node", Text, nullable=False),
    Column("status_version", STATUS_VERSION),
    Column("released_at", DateTime(timezone=True), nullable=False),
    Index("ix_pod_tombstones_released_at", "released_at"),
)
"""One row per released Pod UID (issue 11 item 7, :mod:`services.domain.tombstones`): the node,
the release's ordering key (``status_version``: the Pod's resourceVersion at its release, or the
LIST's for a snapshot release; null: unordered) and ``released_at`` (the release's
``observedAt``, event time, UTC). Rows older than ``TOMBSTONE_RETENTION`` before the newest row
are deleted with every batch that writes one."""

partition_progress = Table(
    "partition_progress",
    metadata,
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger),
    Column("highwater", BigInteger),
    Column("last_event_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
"""Per Kafka partition: last applied ``offset`` (null: none yet), the ``highwater`` offset the
worker last saw (the offset the next record will get), ``last_event_at`` (newest event ``observedAt``
applied, event time, UTC) and ``updated_at`` (wall clock, excluded from replay comparison)."""

_SCHEMA_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain PostgreSQL identifier (letters, digits, ``_``; at most
    63 characters; not starting with a digit). Raises ``ValueError`` otherwise.

    Schema names end up in SQL text (``CREATE SCHEMA``, the hot-path statements), so only plain
    identifiers are accepted; they are quoted as well.
    """
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(
            f"schema name {schema!r} must be a plain identifier (letters, digits, _; at most 63)"
        )
    return schema


def quoted_schema(schema: str) -> str:
    """``schema`` checked by :func:`check_schema_name` and double-quoted for SQL text."""
    return f'"{check_schema_name(schema)}"'


def in_schema(schema: str) -> dict[str, Any]:
    """Execution options that point the schema-less tables at ``schema``."""
    return {"schema_translate_map": {None: check_schema_name(schema)}}
