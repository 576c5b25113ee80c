"""The governance record of a ResourceSlice's device taints (issue 15 item 1), and its wire form.

The stream worker forwards one :class:`DeviceTaintsObserved` per ``InventoryObserved`` of a
node-local ResourceSlice (``resource.k8s.io/v1``, ``spec.devices[].taints[]``, KEP-5055): the
names of every device the slice lists and every taint on them, whatever their key or effect. The
watcher publishes a slice again only when its compact form changed, so a taint set that changed
is a new record; the governor (:mod:`.driver_taints`) decides which taints count (its policy's
keys, effect ``NoSchedule``/``NoExecute``) and diffs against what it holds. ``deleted``: the slice
is gone, its devices' taints with it.

A pool-scoped slice (no ``spec.nodeName``) is not forwarded: a governed device is keyed by node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.domain.codec import (
    EventDecodeError,
    bool_field,
    event_time_field,
    optional_str_field,
    optional_time_field,
    str_field,
)
from services.domain.events import SCHEMA_VERSION, format_time

RECORD_TYPE = "DeviceTaintsObserved"


@dataclass(frozen=True, slots=True)
class SliceTaint:
    """One taint of one device of the slice (``device``: the device's name in the slice);
    ``time_added`` is the taint's ``timeAdded`` (UTC), ``None`` when the API had none; ``rule``
    the DeviceTaintRule (of others: never devicestate's own) that put it there, ``None`` for the
    slice's own taint."""

    device: str
    key: str
    value: str | None
    effect: str
    time_added: datetime | None = None
    rule: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceTaintsObserved:
    """The taints ResourceSlice ``slice`` (driver ``driver``, pool ``pool``, on ``node``) publishes
    now on its devices ``devices`` (names, sorted); ``observed_at`` is the record's event time
    (UTC). A DRA device's governance key is ``(node, "<driver>/<pool>/<device>")``."""

    node: str
    driver: str
    pool: str
    slice: str
    devices: tuple[str, ...]
    taints: tuple[SliceTaint, ...]
    deleted: bool
    observed_at: datetime
    type: str = field(default=RECORD_TYPE, init=False)

    def device_id(self, device: str) -> str:
        """``<driver>/<pool>/<device>``: the documented DRA device identity."""
        return f"{self.driver}/{self.pool}/{device}"


def taints_to_dict(record: DeviceTaintsObserved) -> dict[str, Any]:
    """The JSON object of the record (schema 1, camelCase, times RFC 3339 ``Z``)."""
    return {
        "schema": SCHEMA_VERSION,
        "type": RECORD_TYPE,
        "node": record.node,
        "driver": record.driver,
        "pool": record.pool,
        "slice": record.slice,
        "devices": list(record.devices),
        "taints": [
            {
                "device": t.device,
                "key": t.key,
                "value": t.value,
                "effect": t.effect,
                "timeAdded": None if t.time_added is None else format_time(t.time_added),
                **({} if t.rule is None else {"rule": t.rule}),
            }
            for t in record.taints
        ],
        "deleted": record.deleted,
        "observedAt": format_time(record.observed_at),
    }


def taints_from_dict(obj: dict[str, Any]) -> DeviceTaintsObserved:
    """Inverse of :func:`taints_to_dict`; raises :class:`EventDecodeError` with the reason."""
    devices = obj.get("devices")
    if not isinstance(devices, list) or not all(isinstance(d, str) and d for d in devices):
        raise EventDecodeError("field 'devices' must be a list of non-empty strings")
    raw = obj.get("taints")
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise EventDecodeError("field 'taints' must be a list of objects")
    return DeviceTaintsObserved(
        node=str_field(obj, "node"),
        driver=str_field(obj, "driver"),
        pool=str_field(obj, "pool"),
        slice=str_field(obj, "slice"),
        devices=tuple(devices),
        taints=tuple(
            SliceTaint(
                device=str_field(t, "device"),
                key=str_field(t, "key"),
                value=optional_str_field(t, "value"),
                effect=str_field(t, "effect", empty=True),
                time_added=optional_time_field(t, "timeAdded"),
                rule=optional_str_field(t, "rule"),
            )
            for t in raw
        ),
        deleted=bool_field(obj, "deleted"),
        observed_at=event_time_field(obj, "observedAt"),
    )
