"""``docs/configuration.md`` is generated from the settings and must be current."""

from __future__ import annotations

from pathlib import Path

from devtools.config_docs import render
from services.runtime.config import Settings

DOC = Path(__file__).parents[1] / "docs" / "configuration.md"


def test_configuration_reference_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/configuration.md is stale: python -m devtools.config_docs > docs/configuration.md"
    )


def test_every_setting_is_documented_with_a_description() -> None:
    for name, info in Settings.model_fields.items():
        assert info.description, f"setting {name} has no description"
