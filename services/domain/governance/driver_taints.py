"""Driver-published device taints as a fault signal (issue 15 item 1).

The NVIDIA DRA driver taints a device in its ResourceSlice when NVML reports a fatal XID
(``gpu.nvidia.com/xid=<code>``, ``NoSchedule``) or a lost GPU (``gpu.nvidia.com/gpu-lost``), and
never removes the taint by itself (kubernetes-sigs/dra-driver-nvidia-gpu#1455). For a batch Pod
that failed on that GPU the taint is the only fault signal: kubelet stops updating a terminated
Pod's status (kubernetes/kubernetes#132978).

Rules, applied per :class:`~.taint_inputs.DeviceTaintsObserved` (one ResourceSlice's taints):

- a taint *counts* when its key is in ``policy.driver_taint_keys`` and its effect is
  ``NoSchedule`` or ``NoExecute`` (``None`` is informational: the driver's non-fatal XIDs; an
  unknown effect is ``None``, as KEP-5055 asks consumers to read it); of several counting taints
  on a device the first by (``NoExecute`` first, the slice's own before a DeviceTaintRule's,
  key, value) is held. A DeviceTaintRule of others (never ``devicestate enforce``'s own: the
  watcher leaves those out) reaches the governor as a taint of the devices it selects;
- a device gaining a counting taint reads Unhealthy with the reason ``driver-taint:<key>=<value>`` (``driver-taint:<key>`` for a taint without a value)
  (:func:`.rules.effective`): the usual rules quarantine it at once (blast-radius limits apply),
  and the quarantine decision carries the taint's effect and time (``timeAdded``, else the
  record's event time). A device the governor never saw is governed from the taint (source DRA);
- the taint going away (the slice no longer lists it, no longer lists the device, or is deleted)
  is evidence for recovery, not a release: the device reads as its Pod status says again, and a
  quarantined device that reads Healthy goes through the staged recovery (probe, canary,
  stability window) before it is released;
- a change of ``timeAdded`` or slice name alone is the same fault: nothing is decided.

Deterministic: a function of the records in order; devices are visited in name order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from services.domain.events import DeviceSource, Health
from services.domain.governance import context, nodes, rules
from services.domain.governance.device_state import DeviceGov
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.taint_inputs import DeviceTaintsObserved, SliceTaint
from services.domain.governance.taint_state import DriverTaint

COUNTING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
"""Effects that make a taint in the key set a fault (``None`` and unknown effects do not)."""


def counting(
    taints: list[SliceTaint], slice_name: str, at: datetime, policy: GovernancePolicy
) -> DriverTaint | None:
    """The taint of one device that counts (see the module docstring), or ``None``."""
    chosen = [
        t for t in taints if t.key in policy.driver_taint_keys and t.effect in COUNTING_EFFECTS
    ]
    if not chosen:
        return None
    t = min(
        chosen, key=lambda t: (t.effect != "NoExecute", t.rule is not None, t.key, t.value or "")
    )
    return DriverTaint(t.key, t.value, t.effect, t.time_added or at, slice_name, t.rule)


def on_taints(ctx: context.Ctx, r: DeviceTaintsObserved) -> None:
    """Apply one slice's taints to the devices it lists, and clear the taints this slice held on
    devices it no longer lists (all of them when it was deleted)."""
    listed = () if r.deleted else r.devices
    per_device: dict[str, list[SliceTaint]] = {}
    for t in r.taints:
        per_device.setdefault(t.device, []).append(t)
    ids = {r.device_id(name): name for name in listed}
    for held_by in ctx.state.devices_on(r.node):
        held = held_by.driver_taint
        if held is not None and held.slice == r.slice and held_by.resource_id not in ids:
            _set(ctx, held_by, None, r.observed_at)
    for name in sorted(listed):
        want = counting(per_device.get(name, []), r.slice, r.observed_at, ctx.policy)
        key = (r.node, r.device_id(name))
        device = ctx.state.devices.get(key)
        if device is None:
            if want is None or ctx.state.device_count(r.node) >= ctx.policy.max_devices_per_node:
                continue  # nothing to govern, or the node is at its ceiling (issue 11)
            device = DeviceGov(
                node=r.node,
                resource_id=key[1],
                resource_name=r.driver,
                source=DeviceSource.DRA,
                observed_health=Health.HEALTHY,
                observed_at=r.observed_at,
                state_since=r.observed_at,
            )
            ctx.state.add_device(device)
        elif (
            want is None
            and device.driver_taint is not None
            and device.driver_taint.slice != r.slice
        ):
            continue  # another slice published the taint: only that slice can clear it
        _set(ctx, device, want, r.observed_at)


def _set(ctx: context.Ctx, device: DeviceGov, want: DriverTaint | None, at: datetime) -> None:
    held = device.driver_taint
    if want is None and held is None:
        return
    if want is not None and want.same_fault(held):
        return
    was_bad = rules.effective(ctx.state, device)[0] is not Health.HEALTHY
    device.driver_taint = want
    ctx.touch(device)
    if not was_bad and want is not None:
        nodes.signal(ctx, at, device.node, device.resource_id)
    rules.evaluate(ctx, device, at)
    nodes.check_escalation(ctx, device.node, at)
