"""The governor: ``step(state, record, seq, policy) -> decisions`` (issue 3).

One record of the governance topic at a time, in topic order. Time is *event time*: the
fleet watermark (the minimum over the device-health topic's partitions of the forwarded
``WatermarkAdvanced`` times) fires every timer -- Unknown tolerance, heartbeat loss, recovery stage
timeouts, stability windows, quarantine expiry, hold-downs -- so a replay makes the same decisions,
and when the watcher stops, event time stops and no device changes state because of our outage.

Rules (the design is in ``docs/governance.md``):

- Unhealthy -> a quarantine at once (subject to the blast-radius limits), alert.
- Unknown (Pod status ``Unknown``, an unrecognised value, a node whose heartbeat is lost, a device
  plugin that lost devices) -> ``UnknownTolerated`` for a window that grows for a device that keeps
  going Unknown; ``Restricted`` only when it expires. Node-level reasons raise ONE node incident.
- Automatic restrictions take a token from the node's and the fleet's bucket; a tripped breaker or
  paused automation defers them until an operator acts.
- A quarantined device reporting Healthy goes probe -> canary -> stability before release; any
  failure extends the quarantine. Flapping devices stay quarantined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from services.domain.directory import version_rank
from services.domain.events import DeviceSource, Health, format_time
from services.domain.governance import limits
from services.domain.governance.decisions import AlertAction, Decision, DecisionKind, Severity
from services.domain.governance.inputs import (
    CommandAction,
    GovernanceInput,
    HealthTransition,
    InventoryConflict,
    OperatorCommand,
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
    Role,
    WatermarkAdvanced,
)
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import (
    DeviceGov,
    GovernorState,
    GovState,
    NodeGov,
    PendingAction,
    QuarantineKind,
    QuarantineRecord,
    QuarantineStatus,
    TimerKind,
    device_deadlines,
)
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged

SYSTEM_ACTOR: Final = "system"
COMMANDS_REMEMBERED: Final = 10_000
"""How many recent command IDs are kept to drop repeated commands (client retries)."""

REASON_UNHEALTHY: Final = "pod-status-unhealthy"
REASON_UNKNOWN: Final = "pod-status-unknown"
REASON_UNRECOGNISED: Final = "unrecognised-health"
REASON_HEARTBEAT: Final = "node-heartbeat-lost"
REASON_PLUGIN: Final = "device-plugin-lost"
NODE_LEVEL_REASONS: Final = frozenset({REASON_HEARTBEAT, REASON_PLUGIN})

_ROLE_RANK: Final = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(slots=True)
class _Ctx:
    """One step's context: the state, the record's offset, the policy and the decisions so far."""

    state: GovernorState
    seq: int
    policy: GovernancePolicy
    decisions: list[Decision] = field(default_factory=list)

    @property
    def now(self) -> datetime | None:
        """The fleet watermark (event time), ``None`` until every partition reported one."""
        return self.state.fleet.watermark

    def emit(
        self,
        kind: DecisionKind,
        at: datetime,
        *,
        device: DeviceGov | None = None,
        node: str | None = None,
        incident: str | None = None,
        alert: AlertAction | None = None,
        severity: Severity | None = None,
        summary: str = "",
        **details: Any,
    ) -> None:
        self.decisions.append(
            Decision(
                kind=kind,
                seq=self.seq,
                index=len(self.decisions),
                at=at,
                node=device.node if device is not None else node,
                resource_id=device.resource_id if device is not None else None,
                incident=incident,
                alert=alert,
                severity=severity,
                summary=summary,
                details={k: _json(v) for k, v in sorted(details.items())},
            )
        )

    def touch(self, device: DeviceGov) -> None:
        self.state.dirty_devices.add(device.key)
        if device.quarantine is not None:
            self.state.touched_quarantines[device.quarantine.quarantine_id] = device.quarantine


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


def _due(ctx: _Ctx, deadline: datetime | None) -> bool:
    return deadline is not None and ctx.now is not None and ctx.now >= deadline


def _device_name(device: DeviceGov) -> str:
    return f"{device.node}/{device.resource_id}"


# --- entry point ------------------------------------------------------------------------------


def step(
    state: GovernorState, record: GovernanceInput, seq: int, policy: GovernancePolicy
) -> list[Decision]:
    """Apply one governance-topic record at offset ``seq`` to ``state`` (mutated in place).

    Returns the decisions it caused, in order; ids are ``f"{seq}.{index}"``. Deterministic: the same
    records from the same state give the same decisions and state, whatever the wall clock says.
    Touched rows are added to ``state.dirty_devices``/``dirty_nodes``/``touched_quarantines``.
    """
    ctx = _Ctx(state, seq, policy)
    if isinstance(record, HealthTransition):
        _on_transition(ctx, record)
    elif isinstance(record, WatermarkAdvanced):
        _on_watermark(ctx, record)
    elif isinstance(record, NodeHeartbeat):
        _on_heartbeat(ctx, record)
    elif isinstance(record, NodeResourcesChanged):
        _on_resources(ctx, record)
    elif isinstance(record, OperatorCommand):
        _on_command(ctx, record)
    elif isinstance(record, RecoveryLeaseRequested):
        _on_lease_request(ctx, record)
    elif isinstance(record, InventoryConflict):
        _on_conflict(ctx, record)
    else:
        _on_report(ctx, record)
    _fire_due(ctx)
    return ctx.decisions


def _fire_due(ctx: _Ctx) -> None:
    """Fire every live timer due at the watermark, earliest first (ties in key order).

    A heap entry whose deadline is no longer one of the device's (or the node's) current
    deadlines is dropped unfired, so what fires depends on the state only -- the same after a
    restore, which rebuilds the heap from the state.
    """
    state = ctx.state
    watermark = state.fleet.watermark
    if watermark is None:
        return
    while (entry := state.pop_due(watermark)) is not None:
        due, kind, node, resource_id = entry
        if kind == TimerKind.HEARTBEAT.value:
            _check_heartbeat(ctx, node, due)
            continue
        device = state.devices.get((node, resource_id))
        if device is not None and due in device_deadlines(device):
            _evaluate(ctx, device, due)


# --- observations -----------------------------------------------------------------------------


def _on_transition(ctx: _Ctx, t: HealthTransition) -> None:
    state = ctx.state
    device = state.devices.get(t.device_key)
    if device is not None:
        if device.status_version is not None and version_rank(t.status_version) <= version_rank(
            device.status_version
        ):
            return  # duplicate or stale (the idempotency key is (node, resourceID, statusVersion))
        if (
            device.status_version is None
            and t.status_version is None
            and (device.observed_health is t.health)
        ):
            return
    if device is None:
        device = DeviceGov(
            node=t.node,
            resource_id=t.device_key[1],
            resource_name=t.resource_name,
            source=t.source,
            observed_health=t.health,
            observed_at=t.observed_at,
            state_since=t.observed_at,
        )
        state.add_device(device)
        previous: Health | None = None
    else:
        previous = device.observed_health
    was_bad = previous is not None and _effective(state, device)[0] is not Health.HEALTHY
    device.observed_health = t.health
    device.observed_at = t.observed_at
    device.status_version = t.status_version
    device.raw_health = t.raw_health
    device.message = t.message
    device.resource_name = t.resource_name
    device.source = t.source
    device.resource_claim = t.resource_claim or device.resource_claim
    device.pods = t.pods
    device.reported_id = t.resource_id
    device.uuid = t.uuid or device.uuid
    if t.health is Health.UNHEALTHY and previous is not Health.UNHEALTHY:
        horizon = t.observed_at - timedelta(seconds=ctx.policy.flap_window_seconds)
        device.unhealthy_transitions = [x for x in device.unhealthy_transitions if x > horizon] + [
            t.observed_at
        ]
    if not was_bad and _effective(state, device)[0] is not Health.HEALTHY:
        _signal(ctx, t.observed_at, device.node, device.resource_id)
    ctx.touch(device)
    _evaluate(ctx, device, t.observed_at)
    _check_escalation(ctx, device.node, t.observed_at)


def _effective(state: GovernorState, device: DeviceGov) -> tuple[Health, str | None]:
    """Effective health and its reason: Pod status plus node facts (heartbeat, plugin loss)."""
    if device.observed_health is Health.UNHEALTHY:
        return Health.UNHEALTHY, REASON_UNHEALTHY
    node = state.nodes.get(device.node)
    if node is not None and node.heartbeat_lost_since is not None:
        return Health.UNKNOWN, REASON_HEARTBEAT
    if (
        node is not None
        and device.source is DeviceSource.DEVICE_PLUGIN
        and device.resource_name in node.plugin_lost
    ):
        return Health.UNKNOWN, REASON_PLUGIN
    if device.observed_health is Health.UNKNOWN:
        return Health.UNKNOWN, REASON_UNRECOGNISED if device.raw_health else REASON_UNKNOWN
    return Health.HEALTHY, None


def _set_state(ctx: _Ctx, device: DeviceGov, new: GovState, at: datetime, reason: str) -> None:
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
        summary=f"{_device_name(device)}: {old.value} -> {new.value} ({reason})",
        previous=old.value,
        state=new.value,
        reason=reason,
        observedHealth=device.observed_health.value,
        statusVersion=None if device.status_version is None else str(device.status_version),
        unknownSeconds=unknown_seconds,
    )
    _sync_unknown_incident(ctx, device.node, at)


# --- the per-device rules -----------------------------------------------------------------------


def _evaluate(ctx: _Ctx, device: DeviceGov, at: datetime) -> None:
    """Bring the device's governance state in line with its effective health and due timers."""
    health, reason = _effective(ctx.state, device)
    if device.effective_reason != reason:
        device.effective_reason = reason
        ctx.touch(device)
        _sync_unknown_incident(ctx, device.node, at)
    if device.state in (GovState.QUARANTINED, GovState.RECOVERING):
        _evaluate_quarantined(ctx, device, at, health)
        return
    if health is Health.UNHEALTHY:
        if device.cleared and device.cleared_version == device.status_version:
            # An admin's break-glass released this very observation: wait for a new one.
            if device.state is not GovState.AVAILABLE:
                _back_to_available(ctx, device, at)
            return
        _want(ctx, device, PendingAction.QUARANTINE, at, reason or REASON_UNHEALTHY)
        return
    if health is Health.UNKNOWN:
        assert reason is not None
        if device.state is GovState.AVAILABLE:
            _start_tolerance(ctx, device, at, reason)
        elif device.state is GovState.UNKNOWN_TOLERATED and _due(ctx, device.deadline):
            assert device.deadline is not None
            _want(ctx, device, PendingAction.RESTRICT, device.deadline, reason)
        elif device.state is GovState.DEFERRED and device.pending is not None:
            _want(ctx, device, device.pending, at, device.pending_reason or reason)
        return
    if device.state is not GovState.AVAILABLE:
        _back_to_available(ctx, device, at)


def _start_tolerance(ctx: _Ctx, device: DeviceGov, at: datetime, reason: str) -> None:
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
        summary=f"{_device_name(device)} reads Unknown ({reason}); tolerated for {window:g} s",
        reason=reason,
        toleranceSeconds=window,
        deadline=device.deadline,
        episode=len(device.unknown_episodes),
    )
    _set_state(ctx, device, GovState.UNKNOWN_TOLERATED, at, reason)


def _unknown_family(device: DeviceGov) -> bool:
    """Device counts toward its node's Unknown incident: Unknown for a device-level reason."""
    if device.effective_reason not in (REASON_UNKNOWN, REASON_UNRECOGNISED):
        return False
    return device.state in (GovState.UNKNOWN_TOLERATED, GovState.RESTRICTED) or (
        device.state is GovState.DEFERRED and device.pending is PendingAction.RESTRICT
    )


def _sync_unknown_incident(ctx: _Ctx, name: str, at: datetime) -> None:
    """One alert per node, not one per device: the node's Unknown incident is open while any of
    its devices reads Unknown for a device-level reason (Pod status). Heartbeat and plugin loss
    have their own node incidents, so devices Unknown for those reasons do not count."""
    node = ctx.state.nodes.get(name)
    open_now = node is not None and node.unknown_incident is not None
    wanted = any(_unknown_family(d) for d in ctx.state.devices_on(name))
    if wanted == open_now:
        return
    node = _node(ctx, name)
    if wanted:
        members = [d for d in ctx.state.devices_on(name) if _unknown_family(d)]
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


def _back_to_available(ctx: _Ctx, device: DeviceGov, at: datetime) -> None:
    unknown_seconds = (
        None if device.unknown_since is None else (at - device.unknown_since).total_seconds()
    )
    if device.state is GovState.RESTRICTED:
        ctx.emit(
            DecisionKind.RESTRICTION_LIFTED,
            at,
            device=device,
            summary=f"{_device_name(device)} is Healthy again; restriction lifted",
            unknownSeconds=unknown_seconds,
        )
    _resolve_device_alert(ctx, device, at, unknown_seconds)
    if (device.node, device.resource_id) in ctx.state.fleet.deferred:
        ctx.state.fleet.deferred.remove((device.node, device.resource_id))
    device.pending = None
    device.pending_reason = None
    device.deadline = None
    _set_state(ctx, device, GovState.AVAILABLE, at, "healthy")


def _resolve_device_alert(
    ctx: _Ctx, device: DeviceGov, at: datetime, unknown_seconds: float | None
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
        summary=f"{_device_name(device)}: incident over",
        unknownSeconds=unknown_seconds,
    )
    device.alert_incident = None


def _want(ctx: _Ctx, device: DeviceGov, action: PendingAction, at: datetime, reason: str) -> None:
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
            device.alert_incident = f"deferred/{_device_name(device)}/{format_time(at)}"
        ctx.emit(
            DecisionKind.RESTRICTION_DEFERRED,
            at,
            device=device,
            incident=device.alert_incident,
            alert=AlertAction.FIRING if device.alert_incident else None,
            severity=Severity.WARNING,
            summary=f"{action.value} of {_device_name(device)} deferred: {blocked}",
            action=action.value,
            reason=reason,
            blockedBy=blocked,
        )
        _set_state(ctx, device, GovState.DEFERRED, at, blocked)
        return
    if device.key in fleet.deferred:
        fleet.deferred.remove(device.key)
    device.pending = None
    device.pending_reason = None
    if action is PendingAction.QUARANTINE:
        _quarantine(
            ctx,
            device,
            at,
            kind=QuarantineKind.SYSTEM,
            reason=reason,
            actor=SYSTEM_ACTOR,
            quarantine_id=_system_quarantine_id(ctx, device),
        )
        return
    ctx.emit(
        DecisionKind.RESTRICTED,
        at,
        device=device,
        severity=Severity.WARNING,
        summary=f"{_device_name(device)} restricted: Unknown ({reason}) past its tolerance window",
        reason=reason,
        unknownSince=device.unknown_since,
    )
    _set_state(ctx, device, GovState.RESTRICTED, at, reason)


def _system_quarantine_id(ctx: _Ctx, device: DeviceGov) -> str:
    # (deviceID, statusVersion): a duplicate or replayed observation finds the same id.
    version = device.status_version if device.status_version is not None else f"seq{ctx.seq}"
    return f"{device.node}/{device.resource_id}@{version}"


def _quarantine(
    ctx: _Ctx,
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
        _resolve_device_alert(ctx, device, at, None)
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
        summary=f"{_device_name(device)} quarantined by {actor}: {reason}",
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
    _set_state(ctx, device, GovState.QUARANTINED, at, reason)
    return record


def _is_flapping(device: DeviceGov, at: datetime, policy: GovernancePolicy) -> bool:
    horizon = at - timedelta(seconds=policy.flap_window_seconds)
    return sum(1 for t in device.unhealthy_transitions if t > horizon) >= policy.flap_threshold


def _evaluate_quarantined(ctx: _Ctx, device: DeviceGov, at: datetime, health: Health) -> None:
    q = device.quarantine
    assert q is not None
    if q.kind is QuarantineKind.MANUAL:
        if _due(ctx, q.expires_at):
            assert q.expires_at is not None
            _release(ctx, device, q.expires_at, "expired", SYSTEM_ACTOR)
        return
    if health is not Health.HEALTHY:
        if health is Health.UNHEALTHY and not q.confirmed_fault:
            q.confirmed_fault = True
            ctx.touch(device)
        if device.state is GovState.RECOVERING:
            stage = q.recovery_stage.value if q.recovery_stage else "recovery"
            _fail_recovery(ctx, device, at, f"device read {health.value} during {stage}")
        return
    if device.state is GovState.QUARANTINED:
        now = ctx.now if ctx.now is not None else at
        if _is_flapping(device, now, ctx.policy):
            hold = device.unhealthy_transitions[-1] + timedelta(
                seconds=ctx.policy.flap_window_seconds
            )
            if q.next_recovery_at is None or q.next_recovery_at < hold:
                _extend(
                    ctx,
                    device,
                    at,
                    f"flapping: {len(device.unhealthy_transitions)} Unhealthy transitions "
                    f"within {ctx.policy.flap_window_seconds:g} s",
                    hold,
                    SYSTEM_ACTOR,
                )
            return
        if q.next_recovery_at is not None:
            if not _due(ctx, q.next_recovery_at):
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
        _start_stage(ctx, device, first, at)
        return
    # Recovering and Healthy: time-outs and the end of the stability window.
    if q.recovery_stage is RecoveryStage.STABILITY:
        if _due(ctx, q.stage_deadline):
            assert q.stage_deadline is not None
            _release(ctx, device, q.stage_deadline, "recovered", SYSTEM_ACTOR)
    elif _due(ctx, q.stage_deadline):
        assert q.stage_deadline is not None and q.recovery_stage is not None
        _fail_recovery(ctx, device, q.stage_deadline, f"{q.recovery_stage.value} timed out")


def _start_stage(ctx: _Ctx, device: DeviceGov, stage: RecoveryStage, at: datetime) -> None:
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
        summary=f"{_device_name(device)}: recovery {stage.value} started (attempt "
        f"{q.recovery_attempts})",
        stage=stage.value,
        quarantineID=q.quarantine_id,
        attempt=q.recovery_attempts,
        resourceName=device.resource_name,
        source=device.source.value,
        resourceClaim=device.resource_claim,
        deadline=q.stage_deadline,
    )
    _set_state(ctx, device, GovState.RECOVERING, at, f"recovery {stage.value}")


def _fail_recovery(ctx: _Ctx, device: DeviceGov, at: datetime, reason: str) -> None:
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
        summary=f"{_device_name(device)}: recovery failed: {reason}",
        stage=None if stage is None else stage.value,
        reason=reason,
        quarantineID=q.quarantine_id,
        attempt=q.recovery_attempts,
    )
    _extend(
        ctx,
        device,
        at,
        reason,
        at + timedelta(seconds=ctx.policy.recovery_holddown_seconds),
        SYSTEM_ACTOR,
    )
    _set_state(ctx, device, GovState.QUARANTINED, at, reason)


def _extend(
    ctx: _Ctx, device: DeviceGov, at: datetime, reason: str, until: datetime, actor: str
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
        summary=f"{_device_name(device)}: quarantine extended until {format_time(until)}: {reason}",
        quarantineID=q.quarantine_id,
        reason=reason,
        actor=actor,
        until=until,
    )


def _release(ctx: _Ctx, device: DeviceGov, at: datetime, reason: str, actor: str) -> None:
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
        summary=f"{_device_name(device)} released by {actor}: {reason}",
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
    _set_state(ctx, device, GovState.AVAILABLE, at, f"released: {reason}")
    # A device released while still bad (break-glass, expiry) is judged afresh.
    _evaluate(ctx, device, at)


# --- time ---------------------------------------------------------------------------------------


def _on_watermark(ctx: _Ctx, w: WatermarkAdvanced) -> None:
    fleet = ctx.state.fleet
    fleet.partitions = w.partitions
    previous = fleet.watermarks.get(w.partition)
    if previous is None or w.event_time > previous:
        fleet.watermarks[w.partition] = w.event_time
    if any(p not in fleet.watermarks for p in range(fleet.partitions)):
        return
    low = min(fleet.watermarks[p] for p in range(fleet.partitions))
    if fleet.watermark is not None and low <= fleet.watermark:
        return
    fleet.watermark = low
    _fire_due(ctx)
    # A bucket full at the restriction clock is the same as no bucket (every later restriction
    # is dated at or after that clock): drop them so the fleet snapshot stays small.
    clock = None if fleet.fleet_bucket is None else fleet.fleet_bucket.updated_at
    for name, bucket in sorted(fleet.node_buckets.items()):
        if clock is None:
            break
        limits.refill(
            bucket, clock, ctx.policy.restrict_node_burst, ctx.policy.restrict_node_refill_seconds
        )
        if bucket.tokens >= ctx.policy.restrict_node_burst:
            del fleet.node_buckets[name]
    for key in list(fleet.deferred):
        device = ctx.state.devices.get(key)
        if device is not None and device.state is GovState.DEFERRED:
            _evaluate(ctx, device, low)


# --- nodes --------------------------------------------------------------------------------------


def _node(ctx: _Ctx, name: str) -> NodeGov:
    node = ctx.state.nodes.get(name)
    if node is None:
        node = ctx.state.nodes[name] = NodeGov(name)
    ctx.state.dirty_nodes.add(name)
    return node


def _on_heartbeat(ctx: _Ctx, h: NodeHeartbeat) -> None:
    node = _node(ctx, h.node)
    if node.last_renewed_at is not None and h.renewed_at <= node.last_renewed_at:
        return
    node.last_renewed_at = h.renewed_at
    ctx.state.schedule(
        h.renewed_at + timedelta(seconds=ctx.policy.heartbeat_grace_seconds),
        TimerKind.HEARTBEAT,
        h.node,
    )
    if node.heartbeat_lost_since is not None:
        ctx.emit(
            DecisionKind.NODE_INCIDENT_CLOSED,
            h.renewed_at,
            node=h.node,
            incident=node.incident,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"node {h.node}: heartbeat back",
            reason=REASON_HEARTBEAT,
            lostSince=node.heartbeat_lost_since,
        )
        node.heartbeat_lost_since = None
        node.incident = None
        for device in ctx.state.devices_on(h.node):
            _evaluate(ctx, device, h.renewed_at)


def _check_heartbeat(ctx: _Ctx, name: str, due: datetime) -> None:
    node = ctx.state.nodes.get(name)
    grace = timedelta(seconds=ctx.policy.heartbeat_grace_seconds)
    if node is None or node.heartbeat_lost_since is not None or node.last_renewed_at is None:
        return
    if node.last_renewed_at + grace > due:
        return  # renewed since this timer was set
    ctx.state.dirty_nodes.add(name)
    node.heartbeat_lost_since = node.last_renewed_at
    node.incident = f"node-heartbeat/{name}/{format_time(node.last_renewed_at)}"
    devices = ctx.state.devices_on(name)
    ctx.emit(
        DecisionKind.NODE_INCIDENT_OPENED,
        due,
        node=name,
        incident=node.incident,
        alert=AlertAction.FIRING,
        severity=Severity.CRITICAL,
        summary=f"node {name}: heartbeat lost since {format_time(node.last_renewed_at)}; "
        f"its {len(devices)} devices read Unknown",
        reason=REASON_HEARTBEAT,
        lastRenewedAt=node.last_renewed_at,
        devices=len(devices),
    )
    _signal(ctx, due, name, "")
    for device in devices:
        _evaluate(ctx, device, due)


def _on_resources(ctx: _Ctx, r: NodeResourcesChanged) -> None:
    node = _node(ctx, r.node)
    node.capacity = dict(r.capacity)
    node.allocatable = dict(r.allocatable)
    missing = r.missing()
    changed: set[str] = set()
    for name, count in sorted(missing.items()):
        if name in node.plugin_lost:
            continue
        node.plugin_lost[name] = r.observed_at
        node.plugin_incidents[name] = f"device-plugin/{r.node}/{name}/{format_time(r.observed_at)}"
        changed.add(name)
        ctx.emit(
            DecisionKind.NODE_INCIDENT_OPENED,
            r.observed_at,
            node=r.node,
            incident=node.plugin_incidents[name],
            alert=AlertAction.FIRING,
            severity=Severity.WARNING,
            summary=f"node {r.node}: {count} of {dict(r.capacity)[name]} {name} not allocatable "
            "(device plugin lost devices)",
            reason=REASON_PLUGIN,
            resourceName=name,
            missing=count,
            capacity=dict(r.capacity)[name],
        )
        _signal(ctx, r.observed_at, r.node, "")
    for name in sorted(set(node.plugin_lost) - set(missing)):
        since = node.plugin_lost.pop(name)
        ctx.emit(
            DecisionKind.NODE_INCIDENT_CLOSED,
            r.observed_at,
            node=r.node,
            incident=node.plugin_incidents.pop(name, None),
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"node {r.node}: {name} allocatable again",
            reason=REASON_PLUGIN,
            resourceName=name,
            lostSince=since,
            lostSeconds=(r.observed_at - since).total_seconds(),
        )
        changed.add(name)
    for device in ctx.state.devices_on(r.node):
        if device.resource_name in changed and device.source is DeviceSource.DEVICE_PLUGIN:
            _evaluate(ctx, device, r.observed_at)


def _check_escalation(ctx: _Ctx, name: str, at: datetime) -> None:
    devices = ctx.state.devices_on(name)
    if not devices:
        return
    bad = sum(1 for d in devices if d.observed_health is Health.UNHEALTHY)
    node = _node(ctx, name)
    policy = ctx.policy
    over = bad >= policy.node_escalation_min_devices and bad >= policy.node_escalation_share * len(
        devices
    )
    if over and node.escalation_incident is None:
        node.escalation_incident = f"escalation/{name}/{format_time(at)}"
        ctx.emit(
            DecisionKind.NODE_ESCALATION_RECOMMENDED,
            at,
            node=name,
            incident=node.escalation_incident,
            alert=AlertAction.FIRING,
            severity=Severity.CRITICAL,
            summary=f"node {name}: {bad} of {len(devices)} devices Unhealthy; node-level action "
            "recommended (devicestate edits no Node or Pod)",
            unhealthy=bad,
            devices=len(devices),
        )
    elif not over and node.escalation_incident is not None:
        ctx.emit(
            DecisionKind.NODE_ESCALATION_RECOMMENDED,
            at,
            node=name,
            incident=node.escalation_incident,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"node {name}: {bad} of {len(devices)} devices Unhealthy; recommendation over",
            unhealthy=bad,
            devices=len(devices),
        )
        node.escalation_incident = None


# --- breaker ------------------------------------------------------------------------------------


def _signal(ctx: _Ctx, at: datetime, node: str, resource_id: str) -> None:
    state = ctx.state
    fleet = state.fleet
    known_nodes = len(set(state.by_node) | set(state.nodes))
    reading = limits.record_signal(
        fleet, at, node, resource_id, ctx.policy, len(state.devices), known_nodes
    )
    if fleet.breaker_open or not reading.tripped(ctx.policy):
        return
    fleet.breaker_open = True
    fleet.breaker_opened_at = at
    fleet.breaker_incident = f"breaker/{format_time(at)}"
    ctx.emit(
        DecisionKind.BREAKER_OPENED,
        at,
        incident=fleet.breaker_incident,
        alert=AlertAction.FIRING,
        severity=Severity.CRITICAL,
        summary=f"mass signal: {reading.devices} devices on {reading.nodes} nodes turned "
        f"Unknown/Unhealthy within {ctx.policy.breaker_window_seconds:g} s; automatic "
        "restriction stopped until an operator resets the breaker",
        devices=reading.devices,
        nodes=reading.nodes,
        knownDevices=reading.known_devices,
        knownNodes=reading.known_nodes,
    )


# --- operator commands --------------------------------------------------------------------------


def _reject(ctx: _Ctx, c: OperatorCommand, reason: str) -> None:
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
    )


def _accept(ctx: _Ctx, c: OperatorCommand, **extra: Any) -> None:
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
        **extra,
    )


def _on_command(ctx: _Ctx, c: OperatorCommand) -> None:
    fleet = ctx.state.fleet
    if c.command_id in fleet.commands_seen:
        return  # a client retry of a command already decided
    fleet.commands_seen.append(c.command_id)
    del fleet.commands_seen[:-COMMANDS_REMEMBERED]
    needed = Role.ADMIN if c.action is CommandAction.RESET_BREAKER else Role.OPERATOR
    if c.break_glass:
        needed = Role.ADMIN
    if _ROLE_RANK[c.role] < _ROLE_RANK[needed]:
        _reject(ctx, c, f"role {c.role.value} may not {c.action.value}; {needed.value} needed")
        return
    at = c.requested_at
    if c.action is CommandAction.PAUSE:
        fleet.automation_paused, fleet.paused_by, fleet.pause_reason = True, c.actor, c.reason
        _accept(ctx, c)
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
        _accept(ctx, c)
        ctx.emit(
            DecisionKind.AUTOMATION_RESUMED,
            at,
            incident="automation-paused",
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"automatic restriction resumed by {c.actor}",
            actor=c.actor,
        )
        _retry_deferred(ctx, at)
        return
    if c.action is CommandAction.RESET_BREAKER:
        if not fleet.breaker_open:
            _reject(ctx, c, "the breaker is not open")
            return
        incident = fleet.breaker_incident
        fleet.breaker_open, fleet.breaker_opened_at, fleet.breaker_incident = False, None, None
        fleet.signals = []
        _accept(ctx, c)
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
        _retry_deferred(ctx, at)
        return
    device = ctx.state.devices.get((c.node or "", c.resource_id or ""))
    if device is None:
        _reject(ctx, c, f"device {c.node}/{c.resource_id} is not in the directory")
        return
    if (
        c.quarantine_id is not None
        and c.action is not CommandAction.QUARANTINE
        and (device.quarantine is None or device.quarantine.quarantine_id != c.quarantine_id)
    ):
        _reject(ctx, c, f"quarantine {c.quarantine_id} is not the device's active quarantine")
        return
    if c.action is CommandAction.QUARANTINE:
        _command_quarantine(ctx, c, device)
    elif c.action is CommandAction.EXTEND:
        _command_extend(ctx, c, device)
    else:
        _command_release(ctx, c, device)


def _retry_deferred(ctx: _Ctx, at: datetime) -> None:
    for key in list(ctx.state.fleet.deferred):
        device = ctx.state.devices.get(key)
        if device is not None and device.state is GovState.DEFERRED:
            _evaluate(ctx, device, at)


def _command_quarantine(ctx: _Ctx, c: OperatorCommand, device: DeviceGov) -> None:
    if device.quarantine is not None:
        _reject(ctx, c, f"already quarantined ({device.quarantine.quarantine_id}); extend it")
        return
    if c.expires_at is not None and c.expires_at <= c.requested_at:
        _reject(ctx, c, "expiresAt must be later than the request")
        return
    if not c.reason:
        _reject(ctx, c, "a reason is required")
        return
    quarantine_id = f"manual/{c.command_id}"
    _accept(ctx, c, quarantineID=quarantine_id)
    if device.key in ctx.state.fleet.deferred:
        ctx.state.fleet.deferred.remove(device.key)
    device.pending = None
    device.pending_reason = None
    _quarantine(
        ctx,
        device,
        c.requested_at,
        kind=QuarantineKind.MANUAL,
        reason=c.reason,
        actor=c.actor,
        quarantine_id=quarantine_id,
        expires_at=c.expires_at,
    )


def _command_extend(ctx: _Ctx, c: OperatorCommand, device: DeviceGov) -> None:
    q = device.quarantine
    if q is None:
        _reject(ctx, c, "the device has no active quarantine")
        return
    if c.expires_at is None or c.expires_at <= c.requested_at:
        _reject(ctx, c, "extend needs an expiresAt later than the request")
        return
    if q.kind is QuarantineKind.MANUAL and q.expires_at is None:
        _reject(ctx, c, "the quarantine has no expiry: it holds until released")
        return
    current = q.expires_at if q.kind is QuarantineKind.MANUAL else q.next_recovery_at
    if current is not None and c.expires_at <= current:
        _reject(ctx, c, f"the quarantine already holds until {format_time(current)}")
        return
    _accept(ctx, c, quarantineID=q.quarantine_id)
    if device.state is GovState.RECOVERING:
        _fail_recovery(ctx, device, c.requested_at, f"extended by {c.actor}: {c.reason}")
    held = q.expires_at if q.kind is QuarantineKind.MANUAL else q.next_recovery_at
    if held is None or c.expires_at > held:
        _extend(ctx, device, c.requested_at, c.reason or "extended", c.expires_at, c.actor)


def _command_release(ctx: _Ctx, c: OperatorCommand, device: DeviceGov) -> None:
    q = device.quarantine
    if q is None:
        _reject(ctx, c, "the device has no active quarantine")
        return
    passed = device.state is GovState.RECOVERING and q.recovery_stage is RecoveryStage.STABILITY
    if c.break_glass:
        if not c.reason:
            _reject(ctx, c, "a break-glass release needs a reason")
            return
        reason = f"break-glass: {c.reason}"
        device.cleared, device.cleared_version = True, device.status_version
    elif q.kind is QuarantineKind.MANUAL or passed:
        reason = c.reason or "released by operator"
    else:
        _reject(
            ctx,
            c,
            "a system quarantine is released only after a passed recovery (probe and canary), "
            "or by an admin's break-glass with a reason",
        )
        return
    _accept(ctx, c, quarantineID=q.quarantine_id)
    _release(ctx, device, c.requested_at, reason, c.actor)


# --- recovery leases and reports ----------------------------------------------------------------


def _lease_base(ctx: _Ctx, fallback: datetime) -> datetime:
    return ctx.now if ctx.now is not None else fallback


def _on_lease_request(ctx: _Ctx, r: RecoveryLeaseRequested) -> None:
    device = ctx.state.devices.get((r.node, r.resource_id))
    q = None if device is None else device.quarantine
    at = _lease_base(ctx, r.requested_at)

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
        summary=f"lease on {_device_name(device)} granted to {r.holder} (token {q.fencing_token})",
        holder=r.holder,
        fencingToken=q.fencing_token,
        stage=q.recovery_stage.value,
        expiresAt=q.lease_expires_at,
        quarantineID=q.quarantine_id,
    )


def _on_report(ctx: _Ctx, r: RecoveryReport) -> None:
    device = ctx.state.devices.get((r.node, r.resource_id))
    q = None if device is None else device.quarantine
    at = _lease_base(ctx, r.reported_at)

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
        _fail_recovery(ctx, device, at, f"{r.stage.value} failed: {r.detail}")
        return
    ctx.emit(
        DecisionKind.RECOVERY_STAGE_PASSED,
        at,
        device=device,
        summary=f"{_device_name(device)}: {r.stage.value} passed",
        stage=r.stage.value,
        detail=r.detail,
        quarantineID=q.quarantine_id,
        holder=r.holder,
        fencingToken=r.fencing_token,
    )
    following = (
        RecoveryStage.CANARY
        if r.stage is RecoveryStage.PROBE and ctx.policy.recovery_canary
        else RecoveryStage.STABILITY
    )
    _start_stage(ctx, device, following, at)


# --- data quality -------------------------------------------------------------------------------


def _on_conflict(ctx: _Ctx, c: InventoryConflict) -> None:
    """An inventory conflict is an alert of its own (issue 4: flagged, never merged silently)."""
    ctx.emit(
        DecisionKind.DATA_QUALITY,
        c.observed_at,
        node=c.node,
        incident=f"data-quality/{c.kind}/{c.node}/{c.subject}",
        alert=AlertAction.FIRING if c.active else AlertAction.RESOLVED,
        severity=Severity.WARNING if c.active else Severity.INFO,
        summary=f"{c.kind} on {c.node}: {c.subject}: {c.detail}",
        conflict=c.kind,
        subject=c.subject,
        detail=c.detail,
        active=c.active,
    )
