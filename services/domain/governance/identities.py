"""One governance record per physical device, even when its identity came late (issue 10).

The worker forwards each health transition as soon as the directory fold makes it, with the
identity its inventory knew at that point (``HealthTransition.device_id``). A DRA device whose
ResourceClaim had not been read yet is forwarded under its reported (CDI-form) resourceID, and
the governor keys it so: a *ghost* of the device. When the claim (or slice) arrives, the worker
forwards :class:`~.inputs.DeviceIdentified` and :func:`on_identified` merges the ghost onto the
physical key ``(node, device_id)``:

- no record under the physical key: the ghost is re-keyed (its state, timers, quarantine and
  history of episodes move with it);
- both exist: the record in the more restrictive governance state survives
  (Quarantined/Recovering > Restricted > Deferred > UnknownTolerated > Available; a tie keeps
  the physical one), so a merge never lifts a restriction or a quarantine. It takes the newer
  observation of the two (by statusVersion, then event time) and the union of their Unknown
  episodes and Unhealthy transitions (flap detection). The other record leaves the governor (its
  row is deleted); its open alert is resolved and an active quarantine of its own is closed as
  ``merged`` (the survivor's quarantine holds the device);
- then the rules run on the survivor, as after an observation, and one
  ``DeviceIdentityMerged`` decision records what was merged.

The reported resourceID is remembered on the survivor (``DeviceGov.merged_ids``): a transition
still keyed on it later (:func:`follow`) is governed on the physical key. Everything is a
function of the governance topic's records in order, so a replay of the topic merges the same
way. Why merge rather than hold unresolved transitions back until their claim arrives: a device
must be governed from its first observation (an Unhealthy GPU is quarantined even if its claim
is never seen, e.g. without RBAC on resourceclaims), and holding would need a bound of its own.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Final

from services.domain.directory import version_rank
from services.domain.governance import context, quarantine_age, rules, transitions
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.device_state import (
    DeviceGov,
    DeviceKey,
    GovState,
    QuarantineStatus,
)
from services.domain.governance.inputs import DeviceIdentified, HealthTransition
from services.domain.governance.state import GovernorState, TimerKind, device_deadlines

SEVERITY: Final = {
    GovState.AVAILABLE: 0,
    GovState.UNKNOWN_TOLERATED: 1,
    GovState.DEFERRED: 2,
    GovState.RESTRICTED: 3,
    GovState.QUARANTINED: 4,
    GovState.RECOVERING: 4,
}
"""How restrictive a governance state is: the more restrictive record survives a merge."""
MERGED: Final = "merged"
"""``release_reason`` of a quarantine closed because its record was merged into another."""


def follow(state: GovernorState, t: HealthTransition) -> HealthTransition:
    """``t`` keyed on the device its reported resourceID was merged into, if it was."""
    if t.device_id is not None:
        return t
    merged = state.aliases.get((t.node, t.resource_id))
    return t if merged is None else replace(t, device_id=merged[1])


def on_identified(ctx: context.Ctx, r: DeviceIdentified) -> None:
    """Merge the record held under ``(node, resource_id)`` onto ``(node, device_id)`` (see the
    module docstring); nothing to do when there is no such record."""
    state = ctx.state
    ghost_key, target = (r.node, r.resource_id), (r.node, r.device_id)
    ghost = state.devices.get(ghost_key)
    if ghost is None or ghost_key == target:
        return
    physical = state.devices.get(target)
    ghost_wins = physical is None or SEVERITY[ghost.state] > SEVERITY[physical.state]
    state.remove_device(ghost_key)
    if physical is not None:
        state.remove_device(target)
    survivor, loser = (ghost, physical) if ghost_wins else (physical, ghost)
    assert survivor is not None
    before = survivor.state
    if loser is not None:
        _absorb(ctx, survivor, loser, r.observed_at)
    _rekey(state, survivor, r.device_id, ghost_key, target)
    survivor.merged_ids = tuple(sorted({*survivor.merged_ids, r.resource_id}))
    survivor.uuid = r.uuid or survivor.uuid
    state.add_device(survivor)
    state.refresh(survivor)
    for due in device_deadlines(survivor):
        state.schedule(due, TimerKind.DEVICE, survivor.node, survivor.resource_id)
    ctx.touch(survivor)
    ctx.emit(
        DecisionKind.IDENTITY_MERGED,
        r.observed_at,
        device=survivor,
        summary=f"{r.node}/{r.resource_id} is {r.device_id}: one governance record",
        reportedID=r.resource_id,
        uuid=survivor.uuid,
        state=before.value,
        mergedState=None if loser is None else loser.state.value,
    )
    rules.evaluate(ctx, survivor, r.observed_at)
    transitions.sync_unknown_incident(ctx, r.node, r.observed_at)  # the loser may have counted


def _absorb(ctx: context.Ctx, survivor: DeviceGov, loser: DeviceGov, at: datetime) -> None:
    """Give ``survivor`` the newer observation and both histories; close what ``loser`` had
    open (its alert, an active quarantine of its own)."""
    if _newer(loser, survivor):
        survivor.observed_health = loser.observed_health
        survivor.observed_at = loser.observed_at
        survivor.status_version = loser.status_version
        survivor.raw_health = loser.raw_health
        survivor.message = loser.message
        survivor.resource_claim = loser.resource_claim or survivor.resource_claim
        survivor.pods = loser.pods
        survivor.reported_id = loser.reported_id
        survivor.resource_name = loser.resource_name
    survivor.unknown_episodes = tuple(sorted({*survivor.unknown_episodes, *loser.unknown_episodes}))
    survivor.unhealthy_transitions = tuple(
        sorted({*survivor.unhealthy_transitions, *loser.unhealthy_transitions})
    )
    survivor.merged_ids = tuple(sorted({*survivor.merged_ids, *loser.merged_ids}))
    survivor.uuid = survivor.uuid or loser.uuid
    survivor.driver_taint = survivor.driver_taint or loser.driver_taint
    transitions.resolve_device_alert(ctx, loser, at, None)
    q = loser.quarantine
    if q is not None and q.status is not QuarantineStatus.RELEASED:
        quarantine_age.resolve(ctx, loser, at, f"released: {MERGED}", touch=False)
        q.status = QuarantineStatus.RELEASED
        q.released_at = at
        q.release_reason = MERGED
        q.released_by = context.SYSTEM_ACTOR
        q.recovery_stage = q.stage_deadline = q.lease_holder = q.lease_expires_at = None
        ctx.state.touched_quarantines[q.quarantine_id] = q
        ctx.emit(
            DecisionKind.QUARANTINE_RELEASED,
            at,
            device=loser,
            incident=f"quarantine/{q.quarantine_id}",
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"{context.device_name(loser)}: quarantine merged into {survivor.key[1]}'s",
            quarantineID=q.quarantine_id,
            reason=MERGED,
            actor=context.SYSTEM_ACTOR,
            quarantineKind=q.kind.value,
            confirmedFault=q.confirmed_fault,
            recoveryAttempts=q.recovery_attempts,
            quarantinedSeconds=(at - q.created_at).total_seconds(),
        )


def _rekey(
    state: GovernorState, device: DeviceGov, device_id: str, old: DeviceKey, new: DeviceKey
) -> None:
    """Name ``device`` (and its quarantine, deferral and breaker signals) ``new``."""
    device.resource_id = device_id
    q = device.quarantine
    if q is not None:
        q.resource_id = device_id
    fleet = state.fleet
    if old in fleet.deferred:  # keep the order (first deferred, first retried), once each
        renamed = [new if k == old else k for k in fleet.deferred]
        fleet.deferred = [k for i, k in enumerate(renamed) if k not in renamed[:i]]
    if fleet.signal_devices.get(old):
        fleet.signals = sorted(
            (t, n, new[1] if (n, rid) == old else rid) for t, n, rid in fleet.signals
        )
        fleet.recount_signals()
    for merged in device.merged_ids:
        state.aliases[(device.node, merged)] = new


def _newer(a: DeviceGov, b: DeviceGov) -> bool:
    """Whether ``a``'s observation is newer than ``b``'s (statusVersion, then event time)."""
    return (version_rank(a.status_version), a.observed_at) > (
        version_rank(b.status_version),
        b.observed_at,
    )
