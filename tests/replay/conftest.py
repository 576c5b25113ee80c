"""Fixtures of the replay tests: ``stream_settings`` with private governance and decisions topics
(see ``tests/streams/conftest.py``)."""

from __future__ import annotations

import pytest

from services.runtime.config import Settings
from tests.streams.conftest import with_governance_topics


@pytest.fixture
def stream_settings(stream_settings: Settings) -> Settings:
    return with_governance_topics(stream_settings)
