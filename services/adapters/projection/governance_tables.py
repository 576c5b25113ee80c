"""Tables of the governance projection (issue 3), on the same schema-less ``metadata`` as
:mod:`services.adapters.projection.tables` (Alembic revision ``0002_governance``).

All rows are derived from the governance topic by the governor (``streams/governor.py``), in one
transaction per batch together with the topic's ``partition_progress`` row:

- ``device_governance``: one row per device the governor knows: observed vs effective health, the
  governance state and, in ``snapshot``, the device's full pure state (what a restarted worker
  loads: :func:`services.domain.governance.device_state.DeviceGov.from_json`);
- ``governor_nodes``: per-node state (heartbeat, incidents, plugin loss), snapshot likewise;
- ``governor_node_labels``: each node's labels as the adoption gate holds them (issue 16), one
  row per node, written only when that node's labels change (``0016_governor_node_labels``);
- ``governor_fleet``: one row (``id = 1``): watermarks, token buckets, breaker, automation switch;
- ``governor_pending``: the event-time merge's pending records (issue 12), one row per record,
  written once while it is pending and deleted when it is released (``0017_governor_pending``);
- ``quarantines``: quarantine records (system or manual), with lease holder and fencing token;
- ``governance_decisions``: every decision, keyed by ``(seq, idx)`` (the device timeline);
- ``governance_commands``: operator commands and whether they were accepted.

Times are event times from the log (UTC), never the wall clock, so a replay gives identical rows.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, DateTime, Index, Integer, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.adapters.projection.tables import STATUS_VERSION, metadata

device_governance = Table(
    "device_governance",
    metadata,
    Column("node", Text, primary_key=True),
    Column("resource_id", Text, primary_key=True),
    Column("resource_name", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("resource_claim", Text),
    Column("observed_health", Text, nullable=False),
    Column("effective_health", Text, nullable=False),
    Column("effective_reason", Text),
    Column("state", Text, nullable=False),
    Column("state_since", DateTime(timezone=True), nullable=False),
    Column("status_version", STATUS_VERSION),
    Column("unknown_since", DateTime(timezone=True)),
    Column("deadline", DateTime(timezone=True)),
    Column("quarantine_id", Text),
    Column("snapshot", JSONB, nullable=False),
    Index("ix_device_governance_state", "state"),
)

governor_nodes = Table(
    "governor_nodes",
    metadata,
    Column("node", Text, primary_key=True),
    Column("last_heartbeat_at", DateTime(timezone=True)),
    Column("heartbeat_lost", Boolean, nullable=False),
    Column("incident", Text),
    Column("snapshot", JSONB, nullable=False),
)

governor_node_labels = Table(
    "governor_node_labels",
    metadata,
    # The node's labels the gate holds (AdoptionGov.label_row: {"node", "observedAt", "labels"}),
    # not in governor_fleet's snapshot, which is rewritten every batch (issue 12).
    Column("node", Text, primary_key=True),
    Column("snapshot", JSONB, nullable=False),
)

governor_fleet = Table(
    "governor_fleet",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("watermark", DateTime(timezone=True)),
    Column("breaker_open", Boolean, nullable=False),
    Column("automation_paused", Boolean, nullable=False),
    Column("snapshot", JSONB, nullable=False),
)

governor_pending = Table(
    "governor_pending",
    metadata,
    # A forwarded record the event-time merge holds (EventOrder.pending_rows: the record's wire
    # form with its "order"), keyed by its source (MergeKey.source); not in governor_fleet's
    # snapshot, which is rewritten every batch (issue 12).
    Column("source_partition", Integer, primary_key=True),
    Column("source_offset", BigInteger, primary_key=True),
    Column("source_index", Integer, primary_key=True),
    Column("snapshot", JSONB, nullable=False),
)

quarantines = Table(
    "quarantines",
    metadata,
    Column("quarantine_id", Text, primary_key=True),
    Column("node", Text, nullable=False),
    Column("resource_id", Text, nullable=False),
    Column("resource_claim", Text),
    Column("kind", Text, nullable=False),  # system | manual
    Column("status", Text, nullable=False),  # active | recovering | released
    Column("reason", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True)),
    Column("released_at", DateTime(timezone=True)),
    Column("release_reason", Text),
    Column("released_by", Text),
    Column("confirmed_fault", Boolean, nullable=False),
    Column("lease_holder", Text),
    Column("fencing_token", BigInteger, nullable=False),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("recovery_stage", Text),
    Column("recovery_attempts", Integer, nullable=False),
    Index("ix_quarantines_device", "node", "resource_id"),
    Index("ix_quarantines_status", "status"),
)

governance_decisions = Table(
    "governance_decisions",
    metadata,
    Column("seq", BigInteger, primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("node", Text),
    Column("resource_id", Text),
    Column("incident", Text),
    Column("payload", JSONB, nullable=False),
    Index("ix_governance_decisions_device", "node", "resource_id", "seq"),
    Index("ix_governance_decisions_kind", "kind"),
)

governance_commands = Table(
    "governance_commands",
    metadata,
    Column("command_id", Text, primary_key=True),
    Column("action", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("accepted", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),
    # SHA-256 of the HTTP request of an Idempotency-Key (OperatorCommand.request_fingerprint).
    Column("request_fingerprint", Text),
)

governor_workloads = Table(
    "governor_workloads",
    metadata,
    # The migration policy's workload facts (issue 13): which Pod holds which device, one row
    # per fact, written when it changes (services.domain.migration.book.MigrationBook).
    Column("node", Text, primary_key=True),
    Column("resource_id", Text, primary_key=True),
    Column("pod_uid", Text, primary_key=True),
    Column("snapshot", JSONB, nullable=False),
)

migration_evidence = Table(
    "migration_evidence",
    metadata,
    # A non-recoverable migration's evidence (issue 13 item 3): the first accepted per (migration,
    # Pod UID), written by the governor (services.domain.migration.evidence); never updated.
    Column("migration_id", Text, primary_key=True),
    Column("pod_uid", Text, primary_key=True),
    Column("namespace", Text, nullable=False),
    Column("pod_name", Text, nullable=False),
    Column("resource_version", Text, nullable=False),
    # The Pod's last .status (core/v1 PodStatus) as the executor read it.
    Column("status", JSONB, nullable=False),
    Column("node", Text, nullable=False),
    Column("resource_id", Text, nullable=False),
    Column("holder", Text, nullable=False),
    Column("collected_at", DateTime(timezone=True), nullable=False),
    Column("reported_at", DateTime(timezone=True), nullable=False),
)
