"""State changes of one governed device and the decisions that record them: the governance state
itself (with the node's Unknown incident kept in step), tolerance windows, quarantine records,
recovery stages, extensions, and a return to ``Available``.

:mod:`.rules` decides *which* change is due; these functions carry it out (state, timers,
decisions) and never decide on their own, so none calls back into the rules.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from services.domain.events import Health, format_time
from services.domain.governance import context, quarantine_age
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.device_state import (
    DeviceGov,
    GovState,
    QuarantineKind,
    QuarantineRecord,
    QuarantineStatus,
)
from services.domain.governance.inputs import (
    RecoveryStage,
)
from services.domain.governance.state import TimerKind
from services.domain.governance.taint_state import quarantine_details


def set_state(
    ctx: context.Ctx, device: DeviceGov, new: GovState, at: datetime, reason: str
) -> None:
    if device.state is new:
        return
    old = device.state
    device.state = new
    ctx.state.refresh(device)
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


def start_tolerance(ctx: context.Ctx, device: DeviceGov, at: datetime, reason: str) -> None:
    policy = ctx.policy
    horizon = at - timedelta(seconds=policy.unknown_backoff_reset_seconds)
    device.unknown_episodes = (*(t for t in device.unknown_episodes if t > horizon), at)
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


def sync_unknown_incident(ctx: context.Ctx, name: str, at: datetime) -> None:
    """One alert per node, not one per device: the node's Unknown incident is open while any of
    its devices reads Unknown for a device-level reason (Pod status). Heartbeat and plugin loss
    have their own node incidents, so devices Unknown for those reasons do not count."""
    node = ctx.state.nodes.get(name)
    open_now = node is not None and node.unknown_incident is not None
    wanted = ctx.state.index.any_unknown(name)
    if wanted == open_now:
        return
    node = context.node_of(ctx, name)
    if wanted:
        members = [ctx.state.devices[k] for k in ctx.state.index.unknown_members(name)]
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
    ctx.state.refresh(device)
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
        confirmed_fault=device.observed_health is Health.UNHEALTHY
        or device.driver_taint is not None,
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
        **quarantine_details(device.driver_taint, reason),
    )
    set_state(ctx, device, GovState.QUARANTINED, at, reason)
    quarantine_age.start(ctx, device, at)
    return record


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
