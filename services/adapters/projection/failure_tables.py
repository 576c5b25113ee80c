"""The ``dra_failures`` table (issue 16 item 3): one row per failure source (``sourceUID``: a
core/v1 Event's uid, or a Pod's ``PodScheduled`` transition), the ``DRAFailureObserved`` with the
most ``occurrences`` (:mod:`services.domain.adoption.failure_events`). Created by the Alembic
revision ``0012_dra_failures``; ``tests/projection/test_migrations.py`` checks they agree. Every
value comes from the records (event time, no wall clock): a replay gives the same rows. Rows stay
when the Event expires (the API's ``devicestate_dra_failures_total`` sums them: a counter).
"""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Index, Integer, Table, Text

from services.adapters.projection.tables import metadata

dra_failures = Table(
    "dra_failures",
    metadata,
    Column("source_uid", Text, primary_key=True),
    Column("occurrences", Integer, nullable=False),
    Column("origin", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod_name", Text, nullable=False),
    Column("pod_uid", Text),
    Column("node", Text),
    Column("reason", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("failure_class", Text, nullable=False),
    Column("why", Text, nullable=False),
    # observedAt of the first record of the source, and of the one with the most occurrences.
    Column("first_observed_at", DateTime(timezone=True), nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Index("ix_dra_failures_class", "failure_class", "reason"),
)
"""Per failure source, its class, reason and how many times it happened."""
