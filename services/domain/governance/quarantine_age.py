"""Quarantines that need an operator (issue 15 item 4): an active quarantine that made no recovery
progress for ``quarantine_operator_age_seconds`` of event time (default 72 h).

A device plugin never clears Unhealthy by itself (NVIDIA k8s-device-plugin: "there is no way to
recover from the Unhealthy state"), so such a quarantine can sit for days: past the age, only an
operator (reset, RMA, release) moves it. The age runs from the quarantine's creation and restarts at
every recovery stage passed (``RecoveryStagePassed``, the only progress: a stage started and failed
again is none). Its deadline, ``QuarantineRecord.operator_due_at``, is one of the device's timers
(:func:`~.state.device_deadlines`), so the decision is made on event time and a replay makes it at
the same record. Decisions: ``QuarantineNeedsOperator`` (alert firing, incident
``quarantine-age/<quarantineID>``) once per quarantine, resolved (``QuarantineOperatorResolved``)
by the next stage passed or the release.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from services.domain.governance import context
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.device_state import DeviceGov, QuarantineStatus
from services.domain.governance.state import TimerKind


def _incident(quarantine_id: str) -> str:
    return f"quarantine-age/{quarantine_id}"


def start(ctx: context.Ctx, device: DeviceGov, at: datetime) -> None:
    """(Re)start the age of the device's quarantine at ``at`` (its creation, or a stage passed),
    resolving the alert if it was firing."""
    q = device.quarantine
    assert q is not None
    if q.needs_operator:
        resolve(ctx, device, at, "recovery progressed")
    q.operator_due_at = at + timedelta(seconds=ctx.policy.quarantine_operator_age_seconds)
    ctx.state.schedule(q.operator_due_at, TimerKind.DEVICE, device.node, device.resource_id)
    ctx.touch(device)


def check(ctx: context.Ctx, device: DeviceGov, due: datetime) -> None:
    """A device timer fired at ``due``: raise the alert if the quarantine's age is past."""
    q = device.quarantine
    if (
        q is None
        or q.needs_operator
        or q.status is QuarantineStatus.RELEASED
        or q.operator_due_at is None
        or q.operator_due_at > due
    ):
        return
    q.needs_operator = True
    ctx.touch(device)
    age = (q.operator_due_at - q.created_at).total_seconds()
    ctx.emit(
        DecisionKind.QUARANTINE_NEEDS_OPERATOR,
        q.operator_due_at,
        device=device,
        incident=_incident(q.quarantine_id),
        alert=AlertAction.FIRING,
        severity=Severity.WARNING,
        summary=f"{context.device_name(device)}: quarantined {age:g} s without recovery "
        f"progress ({q.reason}); needs an operator (reset or RMA)",
        quarantineID=q.quarantine_id,
        reason=q.reason,
        quarantinedSeconds=age,
        recoveryAttempts=q.recovery_attempts,
        ageSeconds=ctx.policy.quarantine_operator_age_seconds,
    )


def resolve(
    ctx: context.Ctx, device: DeviceGov, at: datetime, why: str, *, touch: bool = True
) -> None:
    """End the alert of the device's quarantine (a stage passed, or the release), if firing.
    ``touch``: false for a device merged away (its row is deleted, not written)."""
    q = device.quarantine
    if q is None or not q.needs_operator:
        return
    q.needs_operator = False
    if touch:
        ctx.touch(device)
    ctx.emit(
        DecisionKind.QUARANTINE_OPERATOR_RESOLVED,
        at,
        device=device,
        incident=_incident(q.quarantine_id),
        alert=AlertAction.RESOLVED,
        severity=Severity.INFO,
        summary=f"{context.device_name(device)}: no longer waiting for an operator: {why}",
        quarantineID=q.quarantine_id,
        reason=why,
    )
