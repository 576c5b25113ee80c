"""What the recovery executor runs: the probe or canary stage a ``RecoveryStageStarted`` decision
starts (:class:`StageRequest`), read from the decision's details by :func:`stage_request`.

Only stages ``probe`` and ``canary`` (:data:`EXECUTABLE_STAGES`) have a check to run; ``stability``
is the governor's own wait. Details the governor writes: ``stage``, ``source`` (default
``devicePlugin``), ``quarantineID``, ``attempt`` (int), ``resourceName``, ``resourceClaim`` (DRA),
``deadline`` (RFC 3339, the governor's event time). Nothing here raises: a decision lacking what a
check needs gives ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from services.domain.codec import parse_time
from services.domain.events import DeviceSource
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.device_state import DeviceKey
from services.domain.governance.inputs import RecoveryStage

EXECUTABLE_STAGES: Final = frozenset({RecoveryStage.PROBE, RecoveryStage.CANARY})


@dataclass(frozen=True, slots=True)
class StageRequest:
    """A ``RecoveryStageStarted`` decision this executor can run."""

    node: str
    resource_id: str
    stage: RecoveryStage
    quarantine_id: str
    attempt: int
    resource_name: str
    source: DeviceSource
    resource_claim: str | None
    deadline: datetime | None

    @property
    def key(self) -> DeviceKey:
        return (self.node, self.resource_id)


def opt_time(value: Any) -> datetime | None:
    """An RFC 3339 time of a decision's details; None for a missing or unparsable one."""
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def stage_request(decision: Decision) -> StageRequest | None:
    """The request in a ``RecoveryStageStarted`` decision, or ``None`` when it is another kind,
    a stage with nothing to run (stability) or lacks what a check needs."""
    if decision.kind is not DecisionKind.RECOVERY_STAGE_STARTED:
        return None
    details = decision.details
    try:
        stage = RecoveryStage(str(details.get("stage")))
        source = DeviceSource(details.get("source") or DeviceSource.DEVICE_PLUGIN.value)
    except ValueError:
        return None
    if stage not in EXECUTABLE_STAGES or not decision.node or not decision.resource_id:
        return None
    claim = details.get("resourceClaim")
    attempt = details.get("attempt")
    return StageRequest(
        node=decision.node,
        resource_id=decision.resource_id,
        stage=stage,
        quarantine_id=str(details.get("quarantineID") or ""),
        attempt=attempt if type(attempt) is int else 0,
        resource_name=str(details.get("resourceName") or ""),
        source=source,
        resource_claim=claim if isinstance(claim, str) and claim else None,
        deadline=opt_time(details.get("deadline")),
    )
