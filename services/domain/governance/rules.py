"""The per-device rules of the governor: effective health, tolerance windows, restrictions under
the blast-radius limits, quarantine, staged recovery, release (``docs/governance.md``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from services.domain.events import DeviceSource, Health, format_time
from services.domain.governance import context, limits
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.inputs import (
    RecoveryStage,
)
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import (
    DeviceGov,
    GovernorState,
    GovState,
    PendingAction,
    QuarantineKind,
    QuarantineRecord,
    QuarantineStatus,
    TimerKind,
)


def effective(state: GovernorState, device: DeviceGov) -> tuple[Health, str | None]:
    """Effective health and its reason: Pod status plus node facts (heartbeat, plugin loss)."""
    if device.observed_health is Health.UNHEALTHY:
        return Health.UNHEALTHY, context.REASON_UNHEALTHY
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


def set_state(
    ctx: context.Ctx, device: DeviceGov, new: GovState, at: datetime, reason: str
) -> None:
    if device.state is new:
        return
    old = device.state
    device.state = new
    device.state_since = at
    ctx.touch(device)
    leaving_unknown = (
        old in (GovState.UNKNOWN_TOLERATED, GovState.RESTRICTED, GovState.DEFERRED)
        and new not in (GovState.UNKNOWN_TOLERATED, GovState.RESTRICTED, GovState.DEFERRED)
        and device.unknown_since is not None
    )
    unknown_seconds = (
        (at - device.unknown_since).total_seconds()
        if leaving_unknown and device.unknown_since is not None
        else None
    )
    if leaving_unknown:
        device.unknown_since = None
    ctx.emit(
        DecisionKind.STATE_CHANGED,
        at,
        device=device,
        summary=f"{context.device_name(device)}: {old.value} -> {new.value} ({reason})",
        previous=old.value,
        state=new.value,
        reason=reason,
        observedHealth=device.observed_health.value,
        statusVersion=None if device.status_version is None else str(device.status_version),
        unknownSeconds=unknown_seconds,
    )
    sync_unknown_incident(ctx, device.node, at)


# --- the per-device rules -----------------------------------------------------------------------


def evaluate(ctx: context.Ctx, device: DeviceGov, at: datetime) -> None:
    """Bring the device's governance state in line with its effective health and due timers."""
    health, reason = effective(ctx.state, device)
    if device.effective_reason != reason:
        device.effective_reason = reason
        ctx.touch(device)
        sync_unknown_incident(ctx, device.node, at)
    if device.state in (GovState.QUARANTINED, GovState.RECOVERING):
        evaluate_quarantined(ctx, device, at, health)
        return
    if health is Health.UNHEALTHY:
        if device.cleared and device.cleared_version == device.status_version:
            # An admin's break-glass released this very observation: wait for a new one.
            if device.state is not GovState.AVAILABLE:
                back_to_available(ctx, device, at)
            return
        want(ctx, device, PendingAction.QUARANTINE, at, reason or context.REASON_UNHEALTHY)
        return
    if health is Health.UNKNOWN:
        assert reason is not None
        if device.state is GovState.AVAILABLE:
            start_tolerance(ctx, device, at, reason)
        elif device.state is GovState.UNKNOWN_TOLERATED and context.due(ctx, device.deadline):
            assert device.deadline is not None
            want(ctx, device, PendingAction.RESTRICT, device.deadline, reason)
        elif device.state is GovState.DEFERRED and device.pending is not None:
            want(ctx, device, device.pending, at, device.pending_reason or reason)
        return
    if device.state is not GovState.AVAILABLE:
        back_to_available(ctx, device, at)


def start_tolerance(ctx: context.Ctx, device: DeviceGov, at: datetime, reason: str) -> None:
    policy = ctx.policy
    horizon = at - timedelta(seconds=policy.unknown_backoff_reset_seconds)
    device.unknown_episodes = [t for t in device.unknown_episodes if t > horizon] + [at]
    window = policy.tolerance_for(len(device.unknown_episodes))
    device.unknown_since = at
    device.deadline = at + timedelta(seconds=window)
    ctx.state.schedule(device.deadline, TimerKind.DEVICE, device.node, device.resource_id)
    ctx.emit(
        DecisionKind.UNKNOWN_TOLERANCE_STARTED,
        at,
        device=device,
        summary=f"{context.device_name(device)} reads Unknown ({reason}); tolerated for {window:g} s",
        reason=reason,
        toleranceSeconds=window,
        deadline=device.deadline,
        episode=len(device.unknown_episodes),
    )
    set_state(ctx, device, GovState.UNKNOWN_TOLERATED, at, reason)


def unknown_family(device: DeviceGov) -> bool:
    """Device counts toward its node's Unknown incident: Unknown for a device-level reason."""
    if device.effective_reason not in (context.REASON_UNKNOWN, context.REASON_UNRECOGNISED):
        return False
    return device.state in (GovState.UNKNOWN_TOLERATED, GovState.RESTRICTED) or (
        device.state is GovState.DEFERRED and device.pending is PendingAction.RESTRICT
    )


def sync_unknown_incident(ctx: context.Ctx, name: str, at: datetime) -> None:
    """One alert per node, not one per device: the node's Unknown incident is open while any of
    its devices reads Unknown for a device-level reason (Pod status). Heartbeat and plugin loss
    have their own node incidents, so devices Unknown for those reasons do not count."""
    node = ctx.state.nodes.get(name)
    open_now = node is not None and node.unknown_incident is not None
    wanted = any(unknown_family(d) for d in ctx.state.devices_on(name))
    if wanted == open_now:
        return
    node = context.node_of(ctx, name)
    if wanted:
        members = [d for d in ctx.state.devices_on(name) if unknown_family(d)]
        node.unknown_incident = f"node-unknown/{name}/{format_time(at)}"
        ctx.emit(
            DecisionKind.INCIDENT_OPENED,
            at,
            node=name,
            incident=node.unknown_incident,
            alert=AlertAction.FIRING,
            severity=Severity.WARNING,
            summary=f"node {name}: devices read Unknown ({members[0].effective_reason})",
            devices=[d.resource_id for d in members],
        )
        return
    ctx.emit(
        DecisionKind.INCIDENT_RESOLVED,
        at,
        node=name,
        incident=node.unknown_incident,
        alert=AlertAction.RESOLVED,
        severity=Severity.INFO,
        summary=f"node {name}: no device reads Unknown any more",
    )
    node.unknown_incident = None


def back_to_available(ctx: context.Ctx, device: DeviceGov, at: datetime) -> None:
    unknown_seconds = (
        None if device.unknown_since is None else (at - device.unknown_since).total_seconds()
    )
    if device.state is GovState.RESTRICTED:
        ctx.emit(
            DecisionKind.RESTRICTION_LIFTED,
            at,
            device=device,
            summary=f"{context.device_name(device)} is Healthy again; restriction lifted",
            unknownSeconds=unknown_seconds,
        )
    resolve_device_alert(ctx, device, at, unknown_seconds)
    if (device.node, device.resource_id) in ctx.state.fleet.deferred:
        ctx.state.fleet.deferred.remove((device.node, device.resource_id))
    device.pending = None
    device.pending_reason = None
    device.deadline = None
    set_state(ctx, device, GovState.AVAILABLE, at, "healthy")


def resolve_device_alert(
    ctx: context.Ctx, device: DeviceGov, at: datetime, unknown_seconds: float | None
) -> None:
    if device.alert_incident is None:
        return
    ctx.emit(
        DecisionKind.INCIDENT_RESOLVED,
        at,
        device=device,
        incident=device.alert_incident,
        alert=AlertAction.RESOLVED,
        severity=Severity.INFO,
        summary=f"{context.device_name(device)}: incident over",
        unknownSeconds=unknown_seconds,
    )
    device.alert_incident = None


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
        set_state(ctx, device, GovState.DEFERRED, at, blocked)
        return
    if device.key in fleet.deferred:
        fleet.deferred.remove(device.key)
    device.pending = None
    device.pending_reason = None
    if action is PendingAction.QUARANTINE:
        quarantine(
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
    set_state(ctx, device, GovState.RESTRICTED, at, reason)


def system_quarantine_id(ctx: context.Ctx, device: DeviceGov) -> str:
    # (deviceID, statusVersion): a duplicate or replayed observation finds the same id.
    version = device.status_version if device.status_version is not None else f"seq{ctx.seq}"
    return f"{device.node}/{device.resource_id}@{version}"


def quarantine(
    ctx: context.Ctx,
    device: DeviceGov,
    at: datetime,
    *,
    kind: QuarantineKind,
    reason: str,
    actor: str,
    quarantine_id: str,
    expires_at: datetime | None = None,
) -> QuarantineRecord:
    record = QuarantineRecord(
        quarantine_id=quarantine_id,
        node=device.node,
        resource_id=device.resource_id,
        kind=kind,
        reason=reason,
        actor=actor,
        created_at=at,
        resource_claim=device.resource_claim,
        expires_at=expires_at,
        confirmed_fault=device.observed_health is Health.UNHEALTHY,
        fencing_token=device.fencing_token,
    )
    if device.alert_incident is not None:
        resolve_device_alert(ctx, device, at, None)
    device.quarantine = record
    device.deadline = None
    ctx.touch(device)
    if expires_at is not None:
        ctx.state.schedule(expires_at, TimerKind.DEVICE, device.node, device.resource_id)
    ctx.emit(
        DecisionKind.QUARANTINED,
        at,
        device=device,
        incident=f"quarantine/{quarantine_id}",
        alert=AlertAction.FIRING,
        severity=Severity.CRITICAL if kind is QuarantineKind.SYSTEM else Severity.WARNING,
        summary=f"{context.device_name(device)} quarantined by {actor}: {reason}",
        quarantineID=quarantine_id,
        quarantineKind=kind.value,
        reason=reason,
        actor=actor,
        expiresAt=expires_at,
        resourceName=device.resource_name,
        resourceClaim=device.resource_claim,
        source=device.source.value,
        pods=device.pods,
        statusVersion=None if device.status_version is None else str(device.status_version),
    )
    set_state(ctx, device, GovState.QUARANTINED, at, reason)
    return record


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
            fail_recovery(ctx, device, at, f"device read {health.value} during {stage}")
        return
    if device.state is GovState.QUARANTINED:
        now = ctx.now if ctx.now is not None else at
        if is_flapping(device, now, ctx.policy):
            hold = device.unhealthy_transitions[-1] + timedelta(
                seconds=ctx.policy.flap_window_seconds
            )
            if q.next_recovery_at is None or q.next_recovery_at < hold:
                extend(
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
        start_stage(ctx, device, first, at)
        return
    # Recovering and Healthy: time-outs and the end of the stability window.
    if q.recovery_stage is RecoveryStage.STABILITY:
        if context.due(ctx, q.stage_deadline):
            assert q.stage_deadline is not None
            release(ctx, device, q.stage_deadline, "recovered", context.SYSTEM_ACTOR)
    elif context.due(ctx, q.stage_deadline):
        assert q.stage_deadline is not None and q.recovery_stage is not None
        fail_recovery(ctx, device, q.stage_deadline, f"{q.recovery_stage.value} timed out")


def start_stage(ctx: context.Ctx, device: DeviceGov, stage: RecoveryStage, at: datetime) -> None:
    q = device.quarantine
    assert q is not None
    seconds = (
        ctx.policy.recovery_stability_seconds
        if stage is RecoveryStage.STABILITY
        else ctx.policy.recovery_stage_timeout_seconds
    )
    # A stage started by a watermark that jumped (the watcher was down) starts now, so the
    # executor gets its whole timeout.
    if ctx.now is not None and ctx.now > at:
        at = ctx.now
    q.recovery_stage = stage
    q.status = QuarantineStatus.RECOVERING
    q.stage_deadline = at + timedelta(seconds=seconds)
    q.lease_holder = None
    q.lease_expires_at = None
    ctx.state.schedule(q.stage_deadline, TimerKind.DEVICE, device.node, device.resource_id)
    ctx.touch(device)
    ctx.emit(
        DecisionKind.RECOVERY_STAGE_STARTED,
        at,
        device=device,
        summary=f"{context.device_name(device)}: recovery {stage.value} started (attempt "
        f"{q.recovery_attempts})",
        stage=stage.value,
        quarantineID=q.quarantine_id,
        attempt=q.recovery_attempts,
        resourceName=device.resource_name,
        source=device.source.value,
        resourceClaim=device.resource_claim,
        deadline=q.stage_deadline,
    )
    set_state(ctx, device, GovState.RECOVERING, at, f"recovery {stage.value}")


def fail_recovery(ctx: context.Ctx, device: DeviceGov, at: datetime, reason: str) -> None:
    q = device.quarantine
    assert q is not None
    stage = q.recovery_stage
    q.status = QuarantineStatus.ACTIVE
    q.recovery_stage = None
    q.stage_deadline = None
    q.lease_holder = None
    q.lease_expires_at = None
    ctx.emit(
        DecisionKind.RECOVERY_FAILED,
        at,
        device=device,
        summary=f"{context.device_name(device)}: recovery failed: {reason}",
        stage=None if stage is None else stage.value,
        reason=reason,
        quarantineID=q.quarantine_id,
        attempt=q.recovery_attempts,
    )
    extend(
        ctx,
        device,
        at,
        reason,
        at + timedelta(seconds=ctx.policy.recovery_holddown_seconds),
        context.SYSTEM_ACTOR,
    )
    set_state(ctx, device, GovState.QUARANTINED, at, reason)


def extend(
    ctx: context.Ctx, device: DeviceGov, at: datetime, reason: str, until: datetime, actor: str
) -> None:
    """Hold a system quarantine (no recovery before ``until``), or push a manual one's expiry."""
    q = device.quarantine
    assert q is not None
    if q.kind is QuarantineKind.MANUAL:
        q.expires_at = until
    else:
        q.next_recovery_at = until
    ctx.state.schedule(until, TimerKind.DEVICE, device.node, device.resource_id)
    ctx.touch(device)
    ctx.emit(
        DecisionKind.QUARANTINE_EXTENDED,
        at,
        device=device,
        summary=f"{context.device_name(device)}: quarantine extended until {format_time(until)}: {reason}",
        quarantineID=q.quarantine_id,
        reason=reason,
        actor=actor,
        until=until,
    )


def release(ctx: context.Ctx, device: DeviceGov, at: datetime, reason: str, actor: str) -> None:
    q = device.quarantine
    assert q is not None
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
    set_state(ctx, device, GovState.AVAILABLE, at, f"released: {reason}")
    # A device released while still bad (break-glass, expiry) is judged afresh.
    evaluate(ctx, device, at)
