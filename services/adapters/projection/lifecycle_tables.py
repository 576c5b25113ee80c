"""The ``pod_lifecycle_stages`` table (issue 16 item 5): the claim lifecycle stages of each Pod
from its ``PodLifecycleObserved`` (:mod:`services.domain.lifecycle_events`), one row per
(Pod UID, stage, device class, path, claim UID). The first record of a Pod wins: a re-publish
writes nothing. Created by the Alembic revision ``0013_pod_lifecycle_stages``;
``tests/projection/test_migrations.py`` checks they agree. Every value comes from the record.
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Column, DateTime, Float, Index, Table, Text

from services.adapters.projection.tables import metadata

pod_lifecycle_stages = Table(
    "pod_lifecycle_stages",
    metadata,
    Column("pod_uid", Text, primary_key=True),
    Column("stage", Text, primary_key=True),
    Column("device_class", Text, primary_key=True),
    Column("path", Text, primary_key=True),
    # The ResourceClaim's UID for claim_allocated (one per claim); '' for the Pod's stages.
    Column("claim_uid", Text, primary_key=True),
    Column("node", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod_name", Text, nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("seconds", Float, nullable=False),
    CheckConstraint("seconds >= 0", name="ck_pod_lifecycle_stages_seconds"),
    Index("ix_pod_lifecycle_stages_class", "device_class", "observed_at"),
)
"""Per Pod, the seconds of each claim lifecycle stage when it was first seen Ready."""
