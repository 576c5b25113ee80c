"""Recovery leases and reports in the governor: one holder per device, fencing tokens that grow,
stale reports rejected."""

from __future__ import annotations

from datetime import datetime, timedelta

from services.domain.governance import context, quarantine_age, transitions
from services.domain.governance.decisions import DecisionKind
from services.domain.governance.device_state import GovState
from services.domain.governance.inputs import (
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
)

# --- recovery leases and reports ----------------------------------------------------------------


def lease_base(ctx: context.Ctx, fallback: datetime) -> datetime:
    return ctx.now if ctx.now is not None else fallback


def on_lease_request(ctx: context.Ctx, r: RecoveryLeaseRequested) -> None:
    device = ctx.state.devices.get((r.node, r.resource_id))
    q = None if device is None else device.quarantine
    at = lease_base(ctx, r.requested_at)

    def deny(reason: str, held_by: str | None = None) -> None:
        ctx.emit(
            DecisionKind.LEASE_DENIED,
            at,
            device=device,
            node=r.node,
            summary=f"lease on {r.node}/{r.resource_id} denied to {r.holder}: {reason}",
            holder=r.holder,
            heldBy=held_by,
            reason=reason,
        )

    if device is None or q is None or device.state is not GovState.RECOVERING:
        deny("the device is not in recovery")
        return
    if q.recovery_stage not in (RecoveryStage.PROBE, RecoveryStage.CANARY):
        deny("no probe or canary is running")
        return
    held = q.lease_holder is not None and not (
        q.lease_expires_at is not None and at >= q.lease_expires_at
    )
    if held and q.lease_holder != r.holder:
        deny("the lease is held", q.lease_holder)
        return
    if not held:
        device.fencing_token += 1
        q.fencing_token = device.fencing_token
        q.lease_holder = r.holder
    q.lease_expires_at = at + timedelta(seconds=ctx.policy.recovery_lease_seconds)
    ctx.touch(device)
    assert q.recovery_stage is not None
    ctx.emit(
        DecisionKind.LEASE_GRANTED,
        at,
        device=device,
        summary=f"lease on {context.device_name(device)} granted to {r.holder} (token {q.fencing_token})",
        holder=r.holder,
        fencingToken=q.fencing_token,
        stage=q.recovery_stage.value,
        expiresAt=q.lease_expires_at,
        quarantineID=q.quarantine_id,
    )


def on_report(ctx: context.Ctx, r: RecoveryReport) -> None:
    device = ctx.state.devices.get((r.node, r.resource_id))
    q = None if device is None else device.quarantine
    at = lease_base(ctx, r.reported_at)

    def reject(reason: str) -> None:
        ctx.emit(
            DecisionKind.REPORT_REJECTED,
            at,
            device=device,
            node=r.node,
            summary=f"{r.stage.value} report from {r.holder} rejected: {reason}",
            holder=r.holder,
            fencingToken=r.fencing_token,
            stage=r.stage.value,
            reason=reason,
        )

    if device is None or q is None or device.state is not GovState.RECOVERING:
        reject("the device is not in recovery")
        return
    if q.recovery_stage is not r.stage:
        reject(f"the running stage is {q.recovery_stage}")
        return
    if r.fencing_token != q.fencing_token or q.lease_holder != r.holder:
        reject(
            f"stale lease: token {r.fencing_token}, current {q.fencing_token} held by {q.lease_holder}"
        )
        return
    if not r.passed:
        q.confirmed_fault = True
        transitions.fail_recovery(ctx, device, at, f"{r.stage.value} failed: {r.detail}")
        return
    ctx.emit(
        DecisionKind.RECOVERY_STAGE_PASSED,
        at,
        device=device,
        summary=f"{context.device_name(device)}: {r.stage.value} passed",
        stage=r.stage.value,
        detail=r.detail,
        quarantineID=q.quarantine_id,
        holder=r.holder,
        fencingToken=r.fencing_token,
    )
    quarantine_age.start(ctx, device, at)  # a stage passed is recovery progress
    following = (
        RecoveryStage.CANARY
        if r.stage is RecoveryStage.PROBE and ctx.policy.recovery_canary
        else RecoveryStage.STABILITY
    )
    transitions.start_stage(ctx, device, following, at)
