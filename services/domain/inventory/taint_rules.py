"""DeviceTaintRules (``resource.k8s.io/v1beta2``, KEP-5055) as compact records, and who owns one.

Shape (v1beta2 ``DeviceTaintRule``, cluster-scoped): ``spec.deviceSelector{driver, pool,
device}`` (each optional: an unset field matches every value) and ``spec.taint{key, value, effect,
timeAdded}``. Status is not read.

Ownership is by label: a rule carrying devicestate's labels (``app.kubernetes.io/managed-by=
devicestate``, ``app.kubernetes.io/component=quarantine-enforcement`` and a
``devicestate.io/quarantine-id``) is one ``devicestate enforce`` wrote for a quarantine; it is
never read back as a fault (the quarantine would hold itself). Every other rule is an
administrator's or another controller's, and its taint is a fact about the devices it selects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from services.domain.codec import parse_time
from services.domain.inventory.objects import DeviceTaint, InventoryParseError

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "devicestate"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
COMPONENT: Final = "quarantine-enforcement"
QUARANTINE_LABEL: Final = "devicestate.io/quarantine-id"


def is_devicestate_rule(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` carries the labels of a rule ``devicestate enforce`` made."""
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping):
        return False
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        and labels.get(COMPONENT_LABEL) == COMPONENT
        and bool(labels.get(QUARANTINE_LABEL))
    )


@dataclass(frozen=True, slots=True)
class DeviceTaintRuleInfo:
    """A DeviceTaintRule: its name, its selector (``None``: any) and its taint."""

    name: str
    driver: str | None
    pool: str | None
    device: str | None
    taint: DeviceTaint

    def selects(self, driver: str, pool: str, device: str) -> bool:
        """Whether the rule's selector matches the device ``driver/pool/device``."""
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


def _opt_str(obj: Mapping[str, Any], name: str, where: str) -> str | None:
    value = obj.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InventoryParseError(f"{where}.{name} must be a string")
    return value


def parse_device_taint_rule(obj: Any) -> DeviceTaintRuleInfo:
    """Read a DeviceTaintRule object (a dict from the API's JSON); raises
    :class:`InventoryParseError` with the reason."""
    if not isinstance(obj, Mapping):
        raise InventoryParseError("DeviceTaintRule must be an object")
    metadata = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise InventoryParseError("metadata and spec must be objects")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise InventoryParseError("metadata.name must be a non-empty string")
    selector = spec.get("deviceSelector") or {}
    taint = spec.get("taint")
    if not isinstance(selector, Mapping):
        raise InventoryParseError("spec.deviceSelector must be an object")
    if not isinstance(taint, Mapping):
        raise InventoryParseError("spec.taint must be an object")
    key = taint.get("key")
    if not isinstance(key, str) or not key:
        raise InventoryParseError("spec.taint.key must be a non-empty string")
    added = taint.get("timeAdded")
    try:
        time_added = None if added is None else parse_time(str(added))
    except ValueError as exc:
        raise InventoryParseError(f"spec.taint.timeAdded: {exc}") from None
    return DeviceTaintRuleInfo(
        name=name,
        driver=_opt_str(selector, "driver", "spec.deviceSelector"),
        pool=_opt_str(selector, "pool", "spec.deviceSelector"),
        device=_opt_str(selector, "device", "spec.deviceSelector"),
        taint=DeviceTaint(
            key=key,
            value=_opt_str(taint, "value", "spec.taint"),
            effect=str(taint.get("effect") or ""),
            time_added=time_added,
            rule=name,
        ),
    )
