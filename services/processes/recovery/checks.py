"""What a recovery executor is asked to run and what it answers (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from services.domain.events import DeviceSource
from services.domain.governance.inputs import RecoveryStage


@dataclass(frozen=True, slots=True)
class RecoveryCheck:
    """One probe or canary of one quarantined device, run under a granted lease.

    From the ``RecoveryStageStarted`` decision: the device, ``stage``, ``quarantine_id``,
    ``attempt``, ``resource_name`` (``nvidia.com/gpu``, or ``claim:<podClaim>[/<request>]`` for
    DRA), ``source`` and ``resource_claim`` (the ResourceClaim object's name, DRA only);
    ``deadline`` is the stage's deadline. From the ``RecoveryLeaseGranted`` decision: ``holder``,
    ``fencing_token`` and ``lease_expires_at``. Both times are the governor's event time;
    ``budget_seconds``, when set, is how long the check may still take measured on that clock
    (the service sets it; executors prefer it to comparing those times with the wall clock).
    """

    node: str
    resource_id: str
    stage: RecoveryStage
    quarantine_id: str
    attempt: int
    resource_name: str
    source: DeviceSource
    holder: str
    fencing_token: int
    resource_claim: str | None = None
    deadline: datetime | None = None
    lease_expires_at: datetime | None = None
    budget_seconds: float | None = None

    @property
    def must_end_by(self) -> datetime | None:
        """The earlier of the stage deadline and the lease expiry (a later report is useless)."""
        ends = [t for t in (self.deadline, self.lease_expires_at) if t is not None]
        return min(ends) if ends else None


@dataclass(frozen=True, slots=True)
class CheckResult:
    """``passed`` and a one-line ``detail`` for the report (why it failed, what ran)."""

    passed: bool
    detail: str


class Executor(Protocol):
    """Runs one check. Must not raise for a failing device (return ``passed=False``); an
    exception is reported as a failed check by the service."""

    async def run(self, check: RecoveryCheck) -> CheckResult: ...
