"""Fixtures of the stream tests (the health agent, forwarding, the governor).

``stream_settings`` (from ``tests/conftest.py``) is extended here with a governance topic and a
decisions topic private to the test (``t<tag>.governance``, ``t<tag>.decisions``: the worker
forwards to and reads them; they are deleted with the test's other topics), so a test worker never
touches the shared ``devicestate.governance.v1``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import uuid4

import pytest

from services.runtime.config import Settings
from tests.conftest import SchemaFactory

TopicSets = Callable[..., Awaitable[Settings]]
"""``await topic_sets(**updates)``: settings of one more private run (see :func:`topic_sets`)."""


def with_governance_topics(settings: Settings) -> Settings:
    """``settings`` with governance and decisions topics named after its event topic's tag."""
    tag = settings.topic.removesuffix(".events")
    return settings.model_copy(
        update={"governance_topic": f"{tag}.governance", "decisions_topic": f"{tag}.decisions"}
    )


@pytest.fixture
def stream_settings(stream_settings: Settings) -> Settings:
    return with_governance_topics(stream_settings)


@pytest.fixture
async def topic_sets(
    kafka_admin: Any, new_schema: SchemaFactory, tmp_path: Any
) -> AsyncIterator[TopicSets]:
    """More private runs like ``stream_settings``: each call makes topics ``t<tag>.events`` (3
    partitions), ``t<tag>.dead-letter``, ``t<tag>.governance`` and ``t<tag>.decisions`` (through
    the service's ``ensure_topics``: the broker auto-creates nothing), a consumer group, a fresh
    schema and a data directory, with ``updates`` applied; everything is deleted after the
    test."""
    from services.adapters.kafka.topics import ensure_topics

    tags: list[str] = []

    async def make(**updates: Any) -> Settings:
        tag = f"t{uuid4().hex[:12]}"
        tags.append(tag)
        settings = with_governance_topics(
            Settings(
                topic=f"{tag}.events",
                dead_letter_topic=f"{tag}.dead-letter",
                topic_partitions=3,
                consumer_group=f"{tag}.worker",
                database_schema=await new_schema(),
                worker_data_dir=str(tmp_path / f"{tag}-worker"),
                worker_metrics_port=0,
                worker_batch_size=500,
                worker_batch_within_seconds=0.2,
            ).model_copy(update=updates)
        )
        await ensure_topics(settings)
        return settings

    yield make
    names = [t for t in await kafka_admin.list_topics() if any(tag in t for tag in tags)]
    if names:
        await kafka_admin.delete_topics(names)
