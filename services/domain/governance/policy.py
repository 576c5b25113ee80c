"""Governance timings and limits (issue 3). All durations are seconds of *event time*.

Field names equal the :class:`services.runtime.config.PolicySettings` fields they come from
(``DEVICESTATE_<NAME>``), so :meth:`GovernancePolicy.from_settings` is a plain copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from services.domain.governance.adoption_gate import Thresholds


@dataclass(frozen=True, slots=True)
class GovernancePolicy:
    """The configured policy; defaults equal the PolicySettings defaults."""

    unknown_tolerance_seconds: float = 300.0
    unknown_tolerance_max_seconds: float = 3600.0
    unknown_backoff_factor: float = 2.0
    unknown_backoff_reset_seconds: float = 86400.0
    heartbeat_grace_seconds: float = 120.0
    flap_threshold: int = 3
    flap_window_seconds: float = 3600.0
    node_escalation_share: float = 0.5
    node_escalation_min_devices: int = 2
    restrict_node_burst: int = 8
    restrict_node_refill_seconds: float = 60.0
    restrict_fleet_burst: int = 32
    restrict_fleet_refill_seconds: float = 5.0
    breaker_window_seconds: float = 300.0
    breaker_device_share: float = 0.2
    breaker_min_devices: int = 16
    breaker_node_share: float = 0.2
    breaker_min_nodes: int = 3
    max_devices_per_node: int = 4096
    recovery_probe: bool = True
    recovery_canary: bool = True
    recovery_stage_timeout_seconds: float = 600.0
    recovery_stability_seconds: float = 900.0
    recovery_holddown_seconds: float = 900.0
    recovery_lease_seconds: float = 300.0
    quarantine_operator_age_seconds: float = 259200.0
    adoption: Thresholds = field(default_factory=Thresholds)
    """The adoption gate's thresholds (``AdoptionSettings``: ``DEVICESTATE_ADOPTION_*``)."""
    watch_stale_seconds: float = 75.0
    node_incident_window_seconds: float = 1.0
    node_incident_share: float = 0.5
    node_incident_min_devices: int = 2
    driver_taint_keys: tuple[str, ...] = ("gpu.nvidia.com/gpu-lost", "gpu.nvidia.com/xid")
    migration_node_burst: int = 1
    migration_node_refill_seconds: float = 600.0
    migration_fleet_burst: int = 8
    migration_fleet_refill_seconds: float = 60.0
    migration_lease_seconds: float = 120.0
    migration_takeover_seconds: float = 600.0
    migration_checkpoint_timeout_seconds: float = 900.0

    @classmethod
    def from_settings(cls, settings: Any) -> GovernancePolicy:
        """Copy the same-named fields of ``settings`` (a
        :class:`services.runtime.config.PolicySettings`, or any settings class holding it)."""
        values = {f.name: getattr(settings, f.name) for f in fields(cls) if f.name != "adoption"}
        # The setting is comma-separated text (one environment variable); the policy a tuple.
        keys = values["driver_taint_keys"]
        values["driver_taint_keys"] = tuple(sorted({k for k in keys.split(",") if k}))
        return cls(**values, adoption=thresholds_from_settings(settings))

    def tolerance_for(self, episodes: int) -> float:
        """Tolerance window (seconds) of a device's ``episodes``-th recent Unknown episode (1-based):
        ``unknown_tolerance_seconds * factor**(episodes-1)``, at most the max."""
        window = self.unknown_tolerance_seconds * self.unknown_backoff_factor ** max(
            0, episodes - 1
        )
        return min(window, self.unknown_tolerance_max_seconds)


def thresholds_from_settings(settings: Any) -> Thresholds:
    """The gate's thresholds from ``settings`` fields ``adoption_<name>`` (an
    :class:`services.runtime.config.AdoptionSettings`); the defaults for a settings class
    without them."""
    return Thresholds(
        **{
            f.name: getattr(settings, f"adoption_{f.name}")
            for f in fields(Thresholds)
            if hasattr(settings, f"adoption_{f.name}")
        }
    )
