"""The driver taint a governed DRA device carries (issue 15 item 1), with its snapshot form.

A device holds at most one counting taint (:mod:`.driver_taints` picks it): the reason of the
quarantine it causes is ``driver-taint:<key>=<value>``; the quarantine decision carries its effect
and its time (the taint's ``timeAdded``, else the event time of the record that showed it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from services.domain.codec import parse_time
from services.domain.events import format_time

REASON_PREFIX: Final = "driver-taint:"
"""Prefix of the effective reason (and quarantine reason) of a device its driver tainted."""
KEY_MAX: Final = 317
"""Longest taint key in a reason: a label key (a 253-character DNS prefix, ``/``, 63 more)."""
VALUE_MAX: Final = 63
"""Longest taint value in a reason: a label value (what the API server accepts)."""


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


@dataclass(frozen=True, slots=True)
class DriverTaint:
    """A ResourceSlice device taint that counts as a fault: ``key``, ``value`` (``None``: no
    value), ``effect`` (``NoSchedule`` or ``NoExecute``), ``since`` (UTC: ``timeAdded``, else the
    event time it was first seen), ``slice``, the ResourceSlice that publishes it, and ``rule``,
    the DeviceTaintRule of others that put it on the device (``None``: the driver's own taint)."""

    key: str
    value: str | None
    effect: str
    since: datetime
    slice: str
    rule: str | None = None

    @property
    def reason(self) -> str:
        """``driver-taint:<key>=<value>``, ``driver-taint:<key>`` when the taint has no value;
        key and value cut to what a label allows (:data:`KEY_MAX`, :data:`VALUE_MAX`, ending in
        ``…`` when cut), so a taint the API server would refuse gives no unbounded reason."""
        key = _cut(self.key, KEY_MAX)
        return (
            f"{REASON_PREFIX}{key}={_cut(self.value, VALUE_MAX)}"
            if self.value
            else REASON_PREFIX + key
        )

    def same_fault(self, other: DriverTaint | None) -> bool:
        """Same key, value, effect and rule (a new ``timeAdded`` or slice name is the same)."""
        return other is not None and (self.key, self.value, self.effect, self.rule) == (
            other.key,
            other.value,
            other.effect,
            other.rule,
        )

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "key": self.key,
            "value": self.value,
            "effect": self.effect,
            "since": format_time(self.since),
            "slice": self.slice,
        }
        if self.rule is not None:
            obj["rule"] = self.rule
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DriverTaint:
        return cls(
            key=obj["key"],
            value=obj.get("value"),
            effect=obj["effect"],
            since=parse_time(obj["since"]),
            slice=obj["slice"],
            rule=obj.get("rule"),
        )


def quarantine_details(taint: DriverTaint | None, reason: str) -> dict[str, Any]:
    """What a quarantine decision of ``reason`` adds when the taint caused it: ``taintKey``,
    ``taintValue``, ``taintEffect``, ``taintAddedAt`` (RFC 3339 ``Z``); empty otherwise."""
    if taint is None or reason != taint.reason:
        return {}
    return {
        "taintKey": taint.key,
        "taintValue": taint.value,
        "taintEffect": taint.effect,
        "taintAddedAt": format_time(taint.since),
        "taintSlice": taint.slice,
        "taintRule": taint.rule,
    }
