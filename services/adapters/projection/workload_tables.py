"""The ``pod_workloads`` table (issue 13 item 1): one row per Pod UID, the newest
``PodWorkloadObserved`` (:mod:`services.domain.workloads.fold`). Created by the Alembic revision
``0010_workloads_pod_workloads``; ``tests/projection/test_migrations.py`` checks they agree.
Every value comes from the record (event time, no wall clock): a replay gives the same rows.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, DateTime, Index, Integer, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.adapters.projection.tables import STATUS_VERSION, metadata

pod_workloads = Table(
    "pod_workloads",
    metadata,
    Column("pod_uid", Text, primary_key=True),
    Column("node", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod_name", Text, nullable=False),
    Column("status_version", STATUS_VERSION),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    # The workload: the chain's last link (kind "Pod", name/uid the Pod's own, for a bare Pod).
    Column("workload_kind", Text, nullable=False),
    Column("workload_name", Text, nullable=False),
    Column("workload_uid", Text, nullable=False),
    # [{kind, name, uid, apiVersion}] from the Pod's direct controller up.
    Column("chain", JSONB, nullable=False),
    Column("chain_complete", Boolean, nullable=False),
    Column("chain_reason", Text),
    Column("migration_class", Text, nullable=False),
    Column("migration_source", Text, nullable=False),
    Column("checkpoint_max_age_seconds", Integer),
    Column("shard", Text),
    Column("migration_reasons", JSONB, nullable=False),
    Index("ix_pod_workloads_node", "node"),
    Index("ix_pod_workloads_namespace", "namespace"),
)
"""Per Pod UID, the Pod's controller chain and migration class."""
