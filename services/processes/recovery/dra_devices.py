"""Which DRA device a recovery check is about, and how to request exactly it (pure functions
over plain dicts of ``resource.k8s.io/v1`` objects).

- :func:`split_dra_resource_id`: a reported resourceID ``<driver>/<pool>/<device>`` into parts
  (``None`` for a CDI device ID);
- :func:`identify_dra_device`: in the node's ResourceSlices, the first of
  :data:`IDENTIFYING_ATTRIBUTES` that the device has and no other device of the driver shares,
  giving a :class:`DraDevice`; a str reason when there is none (the check then cannot pin the
  device, and fails rather than test another one);
- :func:`device_in_claim` / :func:`claim_device_class`: the allocation result and DeviceClass of
  the workload's ResourceClaim the device came from;
- :func:`cel_selector`: the CEL expression selecting exactly that device, used by
  :func:`~services.processes.recovery.manifests.resource_claim_manifest`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

IDENTIFYING_ATTRIBUTES: Final = ("uuid", "resource.kubernetes.io/pciBusID")
"""Device attributes that name one physical device, in order of preference (an unqualified name
is in the driver's own domain)."""


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One physical DRA device and how to select exactly it: ``attribute`` (fully qualified,
    ``<domain>/<name>``) has ``value`` on this device and on no other device of the driver on
    the node; ``device_class`` is the DeviceClass the request names."""

    driver: str
    pool: str
    device: str
    device_class: str
    attribute: str
    value: str | int


def split_dra_resource_id(resource_id: str) -> tuple[str, str, str] | None:
    """``<driver>/<pool>/<device>`` -> its parts (a pool name may itself contain ``/``); ``None``
    for any other form, e.g. a CDI device ID (``vendor.com/class=name``)."""
    if "=" in resource_id:
        return None
    parts = resource_id.split("/")
    if len(parts) < 3 or not all(parts):
        return None
    return parts[0], "/".join(parts[1:-1]), parts[-1]


def _qualified(attribute: str, driver: str) -> tuple[str, str]:
    domain, _, name = attribute.rpartition("/")
    return (domain or driver), name


def _attribute_value(device: Mapping[str, Any], attribute: str, driver: str) -> str | int | None:
    """A device's string or int attribute ``attribute`` (qualified or in the driver's domain)."""
    attributes = device.get("attributes") or {}
    domain, name = _qualified(attribute, driver)
    candidates = [f"{domain}/{name}"]
    if domain == driver:
        candidates.append(name)
    for key in candidates:
        raw = attributes.get(key)
        if isinstance(raw, dict):
            if isinstance(raw.get("string"), str):
                return str(raw["string"])
            if type(raw.get("int")) is int:
                return int(raw["int"])
    return None


def slice_devices(
    slices: Iterable[Mapping[str, Any]], driver: str
) -> list[tuple[str, Mapping[str, Any]]]:
    """``(pool, device)`` of every device the driver publishes in ``slices``."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = str((spec.get("pool") or {}).get("name") or "")
        found.extend((pool, device) for device in spec.get("devices") or ())
    return found


def identify_dra_device(
    slices: Iterable[Mapping[str, Any]], driver: str, pool: str, device: str
) -> tuple[str, str | int] | str:
    """The first of :data:`IDENTIFYING_ATTRIBUTES` that the device has and no other device of the
    driver in ``slices`` shares, as ``(qualified attribute, value)``; else the reason (a str)."""
    devices = slice_devices(slices, driver)
    target = [d for p, d in devices if p == pool and d.get("name") == device]
    if not target:
        return f"device {device!r} of pool {pool!r} is not in the node's ResourceSlices of {driver}"
    for attribute in IDENTIFYING_ATTRIBUTES:
        value = _attribute_value(target[0], attribute, driver)
        if value is None:
            continue
        same = [d for _, d in devices if _attribute_value(d, attribute, driver) == value]
        if len(same) == 1:
            domain, name = _qualified(attribute, driver)
            return f"{domain}/{name}", value
    return (
        f"device {driver}/{pool}/{device} publishes no unique identifying attribute "
        f"({', '.join(IDENTIFYING_ATTRIBUTES)})"
    )


def claim_allocation(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``status.allocation.devices.results`` of a ResourceClaim (``[]`` when unallocated)."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return [r for r in results if isinstance(r, dict)]


def device_in_claim(claim: Mapping[str, Any], resource_id: str) -> dict[str, Any] | None:
    """The allocation result of ``claim`` that is the device ``resource_id`` reports on: the one
    named ``<driver>/<pool>/<device>``; else the only result; else the one whose device name ends
    a CDI ID (``…/claim=<uid>-<device>``); ``None`` when that is not exactly one."""
    results = claim_allocation(claim)
    for result in results:
        if f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}" == resource_id:
            return result
    if len(results) == 1:
        return results[0]
    suffixed = [r for r in results if r.get("device") and resource_id.endswith(f"-{r['device']}")]
    return suffixed[0] if len(suffixed) == 1 else None


def claim_device_class(claim: Mapping[str, Any], request: str | None) -> str | None:
    """The DeviceClass a claim's ``request`` asked for (``<request>/<subrequest>`` for a
    prioritized list), or ``None``."""
    if not request:
        return None
    main, _, sub = request.partition("/")
    for item in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        if item.get("name") != main:
            continue
        if not sub:
            name = (item.get("exactly") or {}).get("deviceClassName")
            return str(name) if name else None
        for alternative in item.get("firstAvailable") or ():
            if alternative.get("name") == sub and alternative.get("deviceClassName"):
                return str(alternative["deviceClassName"])
    return None


def _cel_string(value: str) -> str:
    # A JSON string literal is a valid CEL string literal (same escapes for ", \ and controls).
    return json.dumps(value)


def cel_selector(device: DraDevice) -> str:
    """``device.driver == "<driver>" && device.attributes["<domain>"].<name> == <value>``."""
    domain, name = _qualified(device.attribute, device.driver)
    value = _cel_string(device.value) if isinstance(device.value, str) else str(device.value)
    return (
        f"device.driver == {_cel_string(device.driver)} && "
        f"device.attributes[{_cel_string(domain)}].{name} == {value}"
    )
