"""ResourceSlice device taints forwarded to the governance topic (issue 15 item 1).

:func:`slice_taints` turns one ``InventoryObserved`` of a node-local ResourceSlice into the
:class:`~services.domain.governance.taint_inputs.DeviceTaintsObserved` the forwarder sends (in
batch order, with the record's :class:`~services.domain.governance.inputs.MergeKey`): every
device the slice lists and every taint on them, so the governor sees a taint appear and go away.
The watcher publishes a slice only when its compact form changed (a taint set that changed is a
new record), so this adds one governance record per slice change. Pool-scoped slices (no node),
ResourceClaims and DeviceClasses forward nothing. A taint without a key (the API server would
refuse it) is left out, not the record: one bad taint must not hide the others of its slice. The taints of DeviceTaintRules of others are in
the slice's devices already (the watcher adds them, ``DeviceTaint.rule``) and go along.
"""

from __future__ import annotations

from services.domain.governance.taint_inputs import DeviceTaintsObserved, SliceTaint
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import ResourceSliceInfo


def slice_taints(event: InventoryObserved) -> DeviceTaintsObserved | None:
    """The governance record of a slice's taints, or ``None`` when there is none to send."""
    obj = event.obj
    if not isinstance(obj, ResourceSliceInfo) or obj.node is None:
        return None
    return DeviceTaintsObserved(
        node=obj.node,
        driver=obj.driver,
        pool=obj.pool,
        slice=obj.name,
        devices=tuple(sorted(d.name for d in obj.devices)),
        taints=tuple(
            SliceTaint(d.name, t.key, t.value, t.effect, t.time_added, t.rule)
            for d in sorted(obj.devices, key=lambda d: d.name)
            for t in d.taints
            if t.key  # a taint without a key counts as nothing; the others must still be sent
        ),
        deleted=event.deleted,
        observed_at=event.observed_at,
    )
