"""Operator commands in the governor: role checks, idempotency by command ID, manual quarantines,
extend, release (break-glass), pause/resume automation, breaker reset."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.domain.events import format_time
from services.domain.governance import context, rules, transitions
from services.domain.governance.adoption import (
    declaration_to_dict,
    retire_problem,
    retirement_to_dict,
)
from services.domain.governance.adoption_gate import Verdict
from services.domain.governance.adoption_verdicts import incident_of
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.device_state import DeviceGov, GovState, QuarantineKind
from services.domain.governance.inputs import (
    ROLE_RANK,
    CommandAction,
    OperatorCommand,
    RecoveryStage,
    Role,
)

# --- operator commands --------------------------------------------------------------------------


def reject(ctx: context.Ctx, c: OperatorCommand, reason: str) -> None:
    ctx.emit(
        DecisionKind.COMMAND_REJECTED,
        c.requested_at,
        node=c.node,
        summary=f"{c.action.value} by {c.actor} rejected: {reason}",
        commandID=c.command_id,
        action=c.action.value,
        actor=c.actor,
        role=c.role.value,
        reason=reason,
        **_fingerprint(c),
    )


def accept(ctx: context.Ctx, c: OperatorCommand, **extra: Any) -> None:
    ctx.emit(
        DecisionKind.COMMAND_ACCEPTED,
        c.requested_at,
        node=c.node,
        summary=f"{c.action.value} by {c.actor} accepted",
        commandID=c.command_id,
        action=c.action.value,
        actor=c.actor,
        role=c.role.value,
        reason=c.reason,
        **_fingerprint(c),
        **extra,
    )


def _fingerprint(c: OperatorCommand) -> dict[str, Any]:
    """The request's fingerprint in the decision (idempotency across API processes), if any."""
    return {} if c.request_fingerprint is None else {"requestFingerprint": c.request_fingerprint}


def on_command(ctx: context.Ctx, c: OperatorCommand) -> None:
    fleet = ctx.state.fleet
    if c.command_id in fleet.commands_seen:
        return  # a client retry of a command already decided
    fleet.commands_seen.append(c.command_id)
    del fleet.commands_seen[: -context.COMMANDS_REMEMBERED]
    needed = Role.ADMIN if c.action is CommandAction.RESET_BREAKER else Role.OPERATOR
    if c.break_glass:
        needed = Role.ADMIN
    if ROLE_RANK[c.role] < ROLE_RANK[needed]:
        reject(ctx, c, f"role {c.role.value} may not {c.action.value}; {needed.value} needed")
        return
    at = c.requested_at
    if c.action is CommandAction.PAUSE:
        fleet.automation_paused, fleet.paused_by, fleet.pause_reason = True, c.actor, c.reason
        accept(ctx, c)
        ctx.emit(
            DecisionKind.AUTOMATION_PAUSED,
            at,
            incident="automation-paused",
            alert=AlertAction.FIRING,
            severity=Severity.WARNING,
            summary=f"automatic restriction paused by {c.actor}: {c.reason}",
            actor=c.actor,
            reason=c.reason,
        )
        return
    if c.action is CommandAction.RESUME:
        fleet.automation_paused, fleet.paused_by, fleet.pause_reason = False, None, None
        accept(ctx, c)
        ctx.emit(
            DecisionKind.AUTOMATION_RESUMED,
            at,
            incident="automation-paused",
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"automatic restriction resumed by {c.actor}",
            actor=c.actor,
        )
        retry_deferred(ctx, at)
        return
    if c.action is CommandAction.RESET_BREAKER:
        if not fleet.breaker_open:
            reject(ctx, c, "the breaker is not open")
            return
        incident = fleet.breaker_incident
        fleet.breaker_open, fleet.breaker_opened_at, fleet.breaker_incident = False, None, None
        fleet.signals = []
        fleet.recount_signals()
        accept(ctx, c)
        ctx.emit(
            DecisionKind.BREAKER_RESET,
            at,
            incident=incident,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"breaker reset by {c.actor}: {c.reason}",
            actor=c.actor,
            reason=c.reason,
        )
        retry_deferred(ctx, at)
        return
    if c.action is CommandAction.ADOPTION_SET:
        command_adoption(ctx, c)
        return
    if c.action is CommandAction.ADOPTION_RETIRE:
        command_adoption_retire(ctx, c)
        return
    device = ctx.state.devices.get((c.node or "", c.resource_id or ""))
    if device is None:
        reject(ctx, c, f"device {c.node}/{c.resource_id} is not in the directory")
        return
    if (
        c.quarantine_id is not None
        and c.action is not CommandAction.QUARANTINE
        and (device.quarantine is None or device.quarantine.quarantine_id != c.quarantine_id)
    ):
        reject(ctx, c, f"quarantine {c.quarantine_id} is not the device's active quarantine")
        return
    if c.action is CommandAction.QUARANTINE:
        command_quarantine(ctx, c, device)
    elif c.action is CommandAction.EXTEND:
        command_extend(ctx, c, device)
    else:
        command_release(ctx, c, device)


def command_adoption(ctx: context.Ctx, c: OperatorCommand) -> None:
    """Record a DRA adoption pool's declared phase (issue 16): one ``AdoptionPhaseDeclared``
    decision, the pool's history that ``GET /v1/adoption`` folds."""
    if c.adoption is None:
        reject(ctx, c, "adoption-set needs a pool declaration")
        return
    if not c.reason:
        reject(ctx, c, "a reason is required")
        return
    declared = declaration_to_dict(c.adoption)
    accept(ctx, c, pool=c.adoption.pool, phase=c.adoption.phase.value)
    ctx.emit(
        DecisionKind.ADOPTION_DECLARED,
        c.requested_at,
        summary=f"pool {c.adoption.pool} declared {c.adoption.phase.value} by {c.actor}",
        commandID=c.command_id,
        actor=c.actor,
        reason=c.reason,
        adoption=declared,
    )


def command_adoption_retire(ctx: context.Ctx, c: OperatorCommand) -> None:
    """Retire a DRA adoption pool: one ``AdoptionPoolRetired`` decision (which resolves the
    pool's firing ``adoption-hold``/``adoption-rollback`` incident, if any); the pool then leaves
    the gate (:func:`.adoption_verdicts.take`) and ``GET /v1/adoption``. Rejected for a pool
    not declared, and for one in ``canary`` or ``dra`` without ``force``
    (:func:`.adoption.retire_problem`)."""
    if c.retire is None:
        reject(ctx, c, "adoption-retire needs a pool")
        return
    if not c.reason:
        reject(ctx, c, "a reason is required")
        return
    ad = ctx.state.fleet.adoption
    pool = c.retire.pool
    declared = ad.pools.get(pool)
    phase = None if declared is None else declared.declaration.phase
    problem = retire_problem(pool, phase, c.retire.force)
    if problem is not None or declared is None:
        reject(ctx, c, problem or f"pool {pool!r} is not declared")
        return
    previous = ad.verdicts.get(pool)
    waiting = pool in ad.waiting  # a plugin pool's wait for slices fired no alert
    incident = None if previous is None else incident_of(pool, Verdict(previous), waiting)
    accept(ctx, c, pool=pool, phase=declared.declaration.phase.value, force=c.retire.force)
    ctx.emit(
        DecisionKind.ADOPTION_RETIRED,
        c.requested_at,
        incident=incident,
        alert=None if incident is None else AlertAction.RESOLVED,
        severity=None if incident is None else Severity.INFO,
        summary=f"pool {pool} ({declared.declaration.phase.value}) retired by {c.actor}",
        commandID=c.command_id,
        actor=c.actor,
        reason=c.reason,
        pool=pool,
        phase=declared.declaration.phase.value,
        previous=previous,
        retire=retirement_to_dict(c.retire),
        adoption=declaration_to_dict(declared.declaration),
    )


def retry_deferred(ctx: context.Ctx, at: datetime) -> None:
    for key in list(ctx.state.fleet.deferred):
        device = ctx.state.devices.get(key)
        if device is not None and device.state is GovState.DEFERRED:
            rules.evaluate(ctx, device, at)


def _passed_on_log_clock(ctx: context.Ctx, c: OperatorCommand) -> bool:
    """Reject (and say so) an expiry the governor's clock has already passed: expiries are timed
    on the log's event time, which can run ahead of the API's wall clock (a recorded stream,
    a watcher clock running fast)."""
    now = ctx.now
    if c.expires_at is None or now is None or c.expires_at > now:
        return False
    ahead = (now - c.requested_at).total_seconds()
    reject(
        ctx,
        c,
        f"expiresAt {format_time(c.expires_at)} has already passed on the governor's clock "
        f"(watermark {format_time(now)}, {ahead:.0f} s ahead of the request)",
    )
    return True


def command_quarantine(ctx: context.Ctx, c: OperatorCommand, device: DeviceGov) -> None:
    if device.quarantine is not None:
        reject(ctx, c, f"already quarantined ({device.quarantine.quarantine_id}); extend it")
        return
    if c.expires_at is not None and c.expires_at <= c.requested_at:
        reject(ctx, c, "expiresAt must be later than the request")
        return
    if _passed_on_log_clock(ctx, c):
        return
    if not c.reason:
        reject(ctx, c, "a reason is required")
        return
    quarantine_id = f"manual/{c.command_id}"
    accept(ctx, c, quarantineID=quarantine_id)
    if device.key in ctx.state.fleet.deferred:
        ctx.state.fleet.deferred.remove(device.key)
    device.pending = None
    ctx.state.refresh(device)
    device.pending_reason = None
    transitions.quarantine(
        ctx,
        device,
        c.requested_at,
        kind=QuarantineKind.MANUAL,
        reason=c.reason,
        actor=c.actor,
        quarantine_id=quarantine_id,
        expires_at=c.expires_at,
    )


def command_extend(ctx: context.Ctx, c: OperatorCommand, device: DeviceGov) -> None:
    q = device.quarantine
    if q is None:
        reject(ctx, c, "the device has no active quarantine")
        return
    if c.expires_at is None or c.expires_at <= c.requested_at:
        reject(ctx, c, "extend needs an expiresAt later than the request")
        return
    if _passed_on_log_clock(ctx, c):
        return
    if q.kind is QuarantineKind.MANUAL and q.expires_at is None:
        reject(ctx, c, "the quarantine has no expiry: it holds until released")
        return
    current = q.expires_at if q.kind is QuarantineKind.MANUAL else q.next_recovery_at
    if current is not None and c.expires_at <= current:
        reject(ctx, c, f"the quarantine already holds until {format_time(current)}")
        return
    accept(ctx, c, quarantineID=q.quarantine_id)
    if device.state is GovState.RECOVERING:
        transitions.fail_recovery(ctx, device, c.requested_at, f"extended by {c.actor}: {c.reason}")
    held = q.expires_at if q.kind is QuarantineKind.MANUAL else q.next_recovery_at
    if held is None or c.expires_at > held:
        transitions.extend(
            ctx, device, c.requested_at, c.reason or "extended", c.expires_at, c.actor
        )


def command_release(ctx: context.Ctx, c: OperatorCommand, device: DeviceGov) -> None:
    q = device.quarantine
    if q is None:
        reject(ctx, c, "the device has no active quarantine")
        return
    passed = device.state is GovState.RECOVERING and q.recovery_stage is RecoveryStage.STABILITY
    if c.break_glass:
        if not c.reason:
            reject(ctx, c, "a break-glass release needs a reason")
            return
        reason = f"break-glass: {c.reason}"
        device.cleared, device.cleared_version = True, device.status_version
    elif q.kind is QuarantineKind.MANUAL or passed:
        reason = c.reason or "released by operator"
    else:
        reject(
            ctx,
            c,
            "a system quarantine is released only after a passed recovery (probe and canary), "
            "or by an admin's break-glass with a reason",
        )
        return
    accept(ctx, c, quarantineID=q.quarantine_id)
    rules.release(ctx, device, c.requested_at, reason, c.actor)
