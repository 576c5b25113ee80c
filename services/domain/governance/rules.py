"""The per-device rules of the governor: effective health, what a device's state should be
(tolerance, restriction under the blast-radius limits, quarantine, staged recovery) and release,
after which the device is judged afresh (``docs/governance.md``). The changes themselves are
carried out by :mod:`.transitions`."""

from __future__ import annotations

from datetime import datetime, timedelta

from services.domain.events import DeviceSource, Health, format_time
from services.domain.governance import context, limits, quarantine_age, transitions
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.device_state import (
    DeviceGov,
    GovState,
    PendingAction,
    QuarantineKind,
    QuarantineStatus,
)
from services.domain.governance.inputs import (
    RecoveryStage,
)
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState


def effective(state: GovernorState, device: DeviceGov) -> tuple[Health, str | None]:
    """Effective health and its reason: Pod status plus node facts (heartbeat, plugin loss)."""
    if device.observed_health is Health.UNHEALTHY:
        return Health.UNHEALTHY, context.REASON_UNHEALTHY
    if device.driver_taint is not None:  # issue 15: the driver's taint is a fault of its own
        return Health.UNHEALTHY, device.driver_taint.reason
    node = state.nodes.get(device.node)
    if node is not None and node.heartbeat_lost_since is not None:
        return Health.UNKNOWN, context.REASON_HEARTBEAT
    if (
        node is not None
        and device.source is DeviceSource.DEVICE_PLUGIN
        and device.resource_name in node.plugin_lost
    ):
        return Health.UNKNOWN, context.REASON_PLUGIN
    if device.observed_health is Health.UNKNOWN:
        return (
            Health.UNKNOWN,
            context.REASON_UNRECOGNISED if device.raw_health else context.REASON_UNKNOWN,
        )
    return Health.HEALTHY, None


# --- the per-device rules -----------------------------------------------------------------------


def evaluate(ctx: context.Ctx, device: DeviceGov, at: datetime) -> None:
    """Bring the device's governance state in line with its effective health and due timers."""
    health, reason = effective(ctx.state, device)
    if device.effective_reason != reason:
        device.effective_reason = reason
        ctx.state.refresh(device)
        ctx.touch(device)
        transitions.sync_unknown_incident(ctx, device.node, at)
    if device.state in (GovState.QUARANTINED, GovState.RECOVERING):
        evaluate_quarantined(ctx, device, at, health)
        return
    if health is Health.UNHEALTHY:
        if device.cleared and device.cleared_version == device.status_version:
            # An admin's break-glass released this very observation: wait for a new one.
            if device.state is not GovState.AVAILABLE:
                transitions.back_to_available(ctx, device, at)
            return
        want(ctx, device, PendingAction.QUARANTINE, at, reason or context.REASON_UNHEALTHY)
        return
    if health is Health.UNKNOWN:
        assert reason is not None
        if device.state is GovState.AVAILABLE:
            transitions.start_tolerance(ctx, device, at, reason)
        elif device.state is GovState.UNKNOWN_TOLERATED and context.due(ctx, device.deadline):
            assert device.deadline is not None
            want(ctx, device, PendingAction.RESTRICT, device.deadline, reason)
        elif device.state is GovState.DEFERRED and device.pending is not None:
            want(ctx, device, device.pending, at, device.pending_reason or reason)
        return
    if device.state is not GovState.AVAILABLE:
        transitions.back_to_available(ctx, device, at)


def want(
    ctx: context.Ctx, device: DeviceGov, action: PendingAction, at: datetime, reason: str
) -> None:
    """An automatic restriction (or quarantine) is due: do it if the limits allow, else defer."""
    if device.pending is PendingAction.QUARANTINE:
        action = PendingAction.QUARANTINE  # never downgrade a deferred quarantine
    fleet = ctx.state.fleet
    # Automatic restrictions are dated on one monotonic clock (the fleet bucket's), so the
    # buckets bound them by decision time even when observations arrive out of time order.
    clock = None if fleet.fleet_bucket is None else fleet.fleet_bucket.updated_at
    if clock is not None and clock > at:
        at = clock
    blocked: str | None = None
    if fleet.automation_paused:
        blocked = f"automation paused by {fleet.paused_by}"
    elif fleet.breaker_open:
        blocked = "circuit breaker open (mass signal); an operator must reset it"
    elif not limits.take_restriction_tokens(fleet, device.node, at, ctx.policy):
        blocked = "rate limit: node or fleet restriction budget spent"
    if blocked is not None:
        if device.state is GovState.DEFERRED and device.pending is action:
            return
        device.pending = action
        ctx.state.refresh(device)
        device.pending_reason = reason
        if device.key not in fleet.deferred:
            fleet.deferred.append(device.key)
        # The breaker and the pause alert once for all; a rate-limited quarantine alerts alone.
        rate_limited = not (fleet.automation_paused or fleet.breaker_open)
        if device.alert_incident is None and rate_limited and action is PendingAction.QUARANTINE:
            device.alert_incident = f"deferred/{context.device_name(device)}/{format_time(at)}"
        ctx.emit(
            DecisionKind.RESTRICTION_DEFERRED,
            at,
            device=device,
            incident=device.alert_incident,
            alert=AlertAction.FIRING if device.alert_incident else None,
            severity=Severity.WARNING,
            summary=f"{action.value} of {context.device_name(device)} deferred: {blocked}",
            action=action.value,
            reason=reason,
            blockedBy=blocked,
        )
        transitions.set_state(ctx, device, GovState.DEFERRED, at, blocked)
        return
    if device.key in fleet.deferred:
        fleet.deferred.remove(device.key)
    device.pending = None
    ctx.state.refresh(device)
    device.pending_reason = None
    if action is PendingAction.QUARANTINE:
        transitions.quarantine(
            ctx,
            device,
            at,
            kind=QuarantineKind.SYSTEM,
            reason=reason,
            actor=context.SYSTEM_ACTOR,
            quarantine_id=system_quarantine_id(ctx, device),
        )
        return
    ctx.emit(
        DecisionKind.RESTRICTED,
        at,
        device=device,
        severity=Severity.WARNING,
        summary=f"{context.device_name(device)} restricted: Unknown ({reason}) past its tolerance window",
        reason=reason,
        unknownSince=device.unknown_since,
    )
    transitions.set_state(ctx, device, GovState.RESTRICTED, at, reason)


def system_quarantine_id(ctx: context.Ctx, device: DeviceGov) -> str:
    # (deviceID, statusVersion): a duplicate or replayed observation finds the same id.
    version = device.status_version if device.status_version is not None else f"seq{ctx.seq}"
    return f"{device.node}/{device.resource_id}@{version}"


def is_flapping(device: DeviceGov, at: datetime, policy: GovernancePolicy) -> bool:
    horizon = at - timedelta(seconds=policy.flap_window_seconds)
    return sum(1 for t in device.unhealthy_transitions if t > horizon) >= policy.flap_threshold


def evaluate_quarantined(ctx: context.Ctx, device: DeviceGov, at: datetime, health: Health) -> None:
    q = device.quarantine
    assert q is not None
    if q.kind is QuarantineKind.MANUAL:
        if context.due(ctx, q.expires_at):
            assert q.expires_at is not None
            release(ctx, device, q.expires_at, "expired", context.SYSTEM_ACTOR)
        return
    if health is not Health.HEALTHY:
        if health is Health.UNHEALTHY and not q.confirmed_fault:
            q.confirmed_fault = True
            ctx.touch(device)
        if device.state is GovState.RECOVERING:
            stage = q.recovery_stage.value if q.recovery_stage else "recovery"
            transitions.fail_recovery(ctx, device, at, f"device read {health.value} during {stage}")
        return
    if device.state is GovState.QUARANTINED:
        now = ctx.now if ctx.now is not None else at
        if is_flapping(device, now, ctx.policy):
            hold = device.unhealthy_transitions[-1] + timedelta(
                seconds=ctx.policy.flap_window_seconds
            )
            if q.next_recovery_at is None or q.next_recovery_at < hold:
                transitions.extend(
                    ctx,
                    device,
                    at,
                    f"flapping: {len(device.unhealthy_transitions)} Unhealthy transitions "
                    f"within {ctx.policy.flap_window_seconds:g} s",
                    hold,
                    context.SYSTEM_ACTOR,
                )
            return
        if q.next_recovery_at is not None:
            if not context.due(ctx, q.next_recovery_at):
                return
            at = max(at, q.next_recovery_at)
        q.recovery_attempts += 1
        first = (
            RecoveryStage.PROBE
            if ctx.policy.recovery_probe
            else RecoveryStage.CANARY
            if ctx.policy.recovery_canary
            else RecoveryStage.STABILITY
        )
        transitions.start_stage(ctx, device, first, at)
        return
    # Recovering and Healthy: time-outs and the end of the stability window.
    if q.recovery_stage is RecoveryStage.STABILITY:
        if context.due(ctx, q.stage_deadline):
            assert q.stage_deadline is not None
            release(ctx, device, q.stage_deadline, "recovered", context.SYSTEM_ACTOR)
    elif context.due(ctx, q.stage_deadline):
        assert q.stage_deadline is not None and q.recovery_stage is not None
        transitions.fail_recovery(
            ctx, device, q.stage_deadline, f"{q.recovery_stage.value} timed out"
        )


def release(ctx: context.Ctx, device: DeviceGov, at: datetime, reason: str, actor: str) -> None:
    q = device.quarantine
    assert q is not None
    quarantine_age.resolve(ctx, device, at, f"released: {reason}")
    q.status = QuarantineStatus.RELEASED
    q.released_at = at
    q.release_reason = reason
    q.released_by = actor
    q.recovery_stage = None
    q.stage_deadline = None
    q.lease_holder = None
    q.lease_expires_at = None
    ctx.touch(device)
    device.quarantine = None
    ctx.emit(
        DecisionKind.QUARANTINE_RELEASED,
        at,
        device=device,
        incident=f"quarantine/{q.quarantine_id}",
        alert=AlertAction.RESOLVED,
        severity=Severity.INFO,
        summary=f"{context.device_name(device)} released by {actor}: {reason}",
        quarantineID=q.quarantine_id,
        reason=reason,
        actor=actor,
        quarantineKind=q.kind.value,
        confirmedFault=q.confirmed_fault,
        recoveryAttempts=q.recovery_attempts,
        quarantinedSeconds=(at - q.created_at).total_seconds(),
    )
    device.unknown_since = None
    device.deadline = None
    transitions.set_state(ctx, device, GovState.AVAILABLE, at, f"released: {reason}")
    # A device released while still bad (break-glass, expiry) is judged afresh.
    evaluate(ctx, device, at)
