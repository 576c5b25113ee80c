"""Quarantines that still hold their device, as the projection's readers hand them on: the
reconciler turns them into DeviceTaintRules, the API counts them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from services.domain.governance.device_state import QuarantineStatus

HOLDING_STATUSES: Final = (QuarantineStatus.ACTIVE.value, QuarantineStatus.RECOVERING.value)
"""Quarantine statuses that still hold the device, sorted."""


@dataclass(frozen=True, slots=True)
class QuarantineRow:
    """What the reconciler reads of one quarantine (``quarantines`` joined with
    ``device_governance`` for the device's ``source``; ``None`` when the device has no row)."""

    quarantine_id: str
    node: str
    resource_id: str
    kind: str
    status: str
    reason: str
    created_at: datetime | None = None
    resource_claim: str | None = None
    source: str | None = None
