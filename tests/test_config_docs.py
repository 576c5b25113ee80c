"""``docs/configuration.md`` is generated from the settings and must be current."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from devtools.config_docs import render
from services.runtime.config import GROUPS, Settings, WatcherProcessSettings

DOC = Path(__file__).parents[1] / "docs" / "configuration.md"


def test_configuration_reference_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/configuration.md is stale: python -m devtools.config_docs > docs/configuration.md"
    )


def test_every_setting_is_documented_with_a_description() -> None:
    for name, info in Settings.model_fields.items():
        assert info.description, f"setting {name} has no description"


def test_every_setting_is_declared_in_exactly_one_group() -> None:
    declared = [name for group in GROUPS for name in vars(group).get("__annotations__", {})]
    assert sorted(declared) == sorted(Settings.model_fields)
    assert all(issubclass(Settings, group) for group in GROUPS)


def test_a_process_reads_only_the_variables_of_its_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVICESTATE_TOPIC", "t.v1")
    monkeypatch.setenv("DEVICESTATE_ALERT_RETRIES", "-1")  # invalid, but not the watcher's
    watcher = WatcherProcessSettings()
    assert watcher.topic == "t.v1"
    assert not hasattr(watcher, "alert_retries")
    with pytest.raises(ValidationError):
        Settings()


def test_the_watcher_record_schema_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 12: ``DEVICESTATE_WATCHER_RECORD_SCHEMA`` is 1 or 2, read from its text."""
    assert WatcherProcessSettings().watcher_record_schema == 2
    monkeypatch.setenv("DEVICESTATE_WATCHER_RECORD_SCHEMA", "1")
    assert WatcherProcessSettings().watcher_record_schema == 1
    monkeypatch.setenv("DEVICESTATE_WATCHER_RECORD_SCHEMA", "3")
    with pytest.raises(ValidationError):
        WatcherProcessSettings()
