"""Fixtures of the stream tests (the health agent, forwarding, the governor).

``stream_settings`` (from ``tests/conftest.py``) is extended here with a governance topic and a
decisions topic private to the test (``t<tag>.governance``, ``t<tag>.decisions``: the worker
forwards to and reads them; they are deleted with the test's other topics), so a test worker never
touches the shared ``devicestate.governance.v1``.
"""

from __future__ import annotations

import pytest

from services.runtime.config import Settings


def with_governance_topics(settings: Settings) -> Settings:
    """``settings`` with governance and decisions topics named after its event topic's tag."""
    tag = settings.topic.removesuffix(".events")
    return settings.model_copy(
        update={"governance_topic": f"{tag}.governance", "decisions_topic": f"{tag}.decisions"}
    )


@pytest.fixture
def stream_settings(stream_settings: Settings) -> Settings:
    return with_governance_topics(stream_settings)
