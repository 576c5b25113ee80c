"""``DEVICESTATE_DRIVER_TAINT_KEYS`` (issue 15 item 1): comma-separated taint keys, checked as
label names when the settings are read, and the sorted tuple the governor's policy holds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.domain.governance.policy import GovernancePolicy
from services.runtime.config import Settings


def test_the_default_is_the_nvidia_dra_drivers_fatal_keys() -> None:
    settings = Settings()
    assert settings.driver_taint_keys == "gpu.nvidia.com/gpu-lost,gpu.nvidia.com/xid"
    assert GovernancePolicy.from_settings(settings) == GovernancePolicy()


def test_keys_come_from_the_environment_trimmed_sorted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "DEVICESTATE_DRIVER_TAINT_KEYS", " example.com/b , example.com/a,example.com/b,"
    )
    policy = GovernancePolicy.from_settings(Settings())
    assert policy.driver_taint_keys == ("example.com/a", "example.com/b")


def test_empty_means_no_taint_counts() -> None:
    assert GovernancePolicy.from_settings(Settings(driver_taint_keys="")).driver_taint_keys == ()


@pytest.mark.parametrize("bad", ["gpu xid", "/xid", "Example.com/xid", "gpu.nvidia.com/-x"])
def test_a_key_that_is_not_a_label_name_is_refused_with_the_key(bad: str) -> None:
    with pytest.raises(ValidationError, match="not a taint key"):
        Settings(driver_taint_keys=f"gpu.nvidia.com/xid,{bad}")
