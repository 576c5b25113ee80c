"""ResourceSlice, ResourceClaim and DeviceClass (resource.k8s.io/v1) as compact frozen records.

Only what devicestate uses is kept. Shapes follow the v1 API types (stable since Kubernetes 1.34;
``../shared/examples/dra-*.json``): ``ResourceSlice.spec{driver, pool{name, generation,
resourceSliceCount}, nodeName, devices[]{name, attributes, taints[]}}``, ``ResourceClaim.status
{allocation{devices{results[]{request, driver, pool, device}}, nodeSelector}, reservedFor[]}``,
``DeviceClass.spec{selectors[]{cel{expression}}, extendedResourceName}``. Admin access (KEP-5018):
``spec.devices.requests[].exactly.adminAccess`` and ``status.allocation.devices.results[].adminAccess``
(v1's ``firstAvailable[]`` subrequests have no ``adminAccess``: the result's is what counts there).

Each ``parse_*`` raises :class:`InventoryParseError` with the reason for an object it cannot read
(the watcher dead-letters it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from services.domain.codec import parse_resource_version, parse_time

UUID_ATTRIBUTE: Final = "uuid"
"""ResourceSlice device attribute holding the physical identity where the driver publishes one
(NVIDIA's and the example driver's ``uuid``)."""

_DRIVER_SELECTOR: Final = re.compile(r"""device\.driver\s*==\s*['"]([^'"]+)['"]""")


class InventoryParseError(ValueError):
    """A DRA object could not be read; the message says why."""


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A device taint in a ResourceSlice (KEP-5055, ``resource.k8s.io/v1`` DeviceTaint): key,
    value, effect (``None`` | ``NoSchedule`` | ``NoExecute``; consumers treat unknown effects as
    ``None``) and ``time_added`` (``timeAdded``, UTC; ``None`` when the object has none).
    ``rule``: the DeviceTaintRule that taints the device (:mod:`.taint_rules`; the watcher adds
    such taints to the slice it publishes), ``None`` for a taint of the slice itself."""

    key: str
    value: str | None
    effect: str
    time_added: datetime | None = None
    rule: str | None = None


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of a ResourceSlice. ``uuid`` is its ``uuid`` attribute (``None`` if absent)."""

    name: str
    uuid: str | None = None
    taints: tuple[DeviceTaint, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceSliceInfo:
    """A ResourceSlice. ``node`` is ``spec.nodeName`` (``None`` for a pool-scoped slice)."""

    name: str
    driver: str
    pool: str
    pool_generation: int
    resource_slice_count: int
    node: str | None
    devices: tuple[SliceDevice, ...]
    resource_version: int | None = None

    @property
    def partition_key(self) -> str:
        """Record key on the topic: the node, or ``pool:<driver>/<pool>`` for a pool-scoped slice."""
        return self.node if self.node else f"pool:{self.driver}/{self.pool}"


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """``status.allocation.devices.results[]``: which device a request got."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    """``adminAccess`` of the result: the device was allocated for administrative access."""

    @property
    def device_id(self) -> str:
        """``<driver>/<pool>/<device>``: the documented DRA device identity."""
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """``spec.devices.requests[]`` (``exactly`` form; ``firstAvailable`` keeps only the name).
    ``admin_access``: ``exactly.adminAccess`` (KEP-5018)."""

    name: str
    device_class: str | None
    count: int | None
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class ResourceClaimInfo:
    """A ResourceClaim: requests, allocation results, the node it is allocated on and its
    consumers (``status.reservedFor``, Pod name and UID).

    ``namespace_admin``: whether the claim's Namespace carries the label
    ``resource.kubernetes.io/admin-access: "true"`` as the watcher last saw it (KEP-5018); set
    by the watcher only on a claim with :attr:`admin_access` (``None`` otherwise, or while the
    watcher does not know the Namespace): not part of the ResourceClaim object."""

    namespace: str
    name: str
    uid: str
    requests: tuple[ClaimRequest, ...]
    results: tuple[AllocationResult, ...]
    reserved_for: tuple[tuple[str, str], ...]
    node: str | None
    created_at: datetime | None
    allocated_at: datetime | None
    resource_version: int | None = None
    namespace_admin: bool | None = None

    @property
    def admin_access(self) -> bool:
        """Whether the allocation gave a device for administrative access: a result with
        ``adminAccess``, or a result of an ``exactly`` request with ``adminAccess``."""
        admin = {r.name for r in self.requests if r.admin_access}
        return any(r.admin_access or r.request in admin for r in self.results)

    @property
    def tenant_boundary(self) -> bool:
        """An admin-access allocation in a Namespace known to be without the admin-access
        label (KEP-5018 checks the label only at create and allocation: it was removed since)."""
        return self.admin_access and self.namespace_admin is False

    def results_for(self, request: str | None) -> tuple[AllocationResult, ...]:
        """Results of one request (all results when ``request`` is ``None``). A subrequest result
        (``<request>/<subrequest>``) belongs to its request."""
        if request is None:
            return self.results
        return tuple(
            r for r in self.results if r.request == request or r.request.startswith(f"{request}/")
        )


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    """A DeviceClass: its ``extendedResourceName`` (KEP-5004) and the drivers its CEL selectors
    name with ``device.driver == '<driver>'`` (other selectors are not interpreted)."""

    name: str
    extended_resource_name: str | None
    drivers: tuple[str, ...]
    resource_version: int | None = None


def _dict(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InventoryParseError(f"{where} must be an object")
    return obj


def _name(obj: dict[str, Any], where: str) -> str:
    value = obj.get("name")
    if not isinstance(value, str) or not value:
        raise InventoryParseError(f"{where}.name must be a non-empty string")
    return value


def _int(value: Any, where: str, default: int) -> int:
    if value is None:
        return default
    if type(value) is not int or value < 0:
        raise InventoryParseError(f"{where} must be an integer >= 0")
    return value


def _time(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_time(str(value))
    except ValueError as exc:
        raise InventoryParseError(f"{where}: {exc}") from None


def _attribute_string(attributes: dict[str, Any], name: str) -> str | None:
    value = attributes.get(name)
    if isinstance(value, dict) and isinstance(value.get("string"), str):
        return str(value["string"])
    return None


def parse_resource_slice(obj: Any) -> ResourceSliceInfo:
    """Read a ResourceSlice object (a dict from the API's JSON)."""
    obj = _dict(obj, "ResourceSlice")
    metadata = _dict(obj.get("metadata"), "metadata")
    spec = _dict(obj.get("spec"), "spec")
    driver = spec.get("driver")
    if not isinstance(driver, str) or not driver:
        raise InventoryParseError("spec.driver must be a non-empty string")
    pool = _dict(spec.get("pool"), "spec.pool")
    node = spec.get("nodeName")
    if node is not None and (not isinstance(node, str) or not node):
        raise InventoryParseError("spec.nodeName must be a non-empty string when set")
    devices = []
    for index, raw in enumerate(_opt_list(spec.get("devices"), "spec.devices")):
        device = _dict(raw, f"spec.devices[{index}]")
        attributes = _opt_dict(device.get("attributes"), f"spec.devices[{index}].attributes")
        taints = tuple(
            DeviceTaint(
                key=str(_dict(t, "taint").get("key", "")),
                value=None if t.get("value") is None else str(t.get("value")),
                effect=str(t.get("effect", "")),
                time_added=_time(t.get("timeAdded"), f"spec.devices[{index}].taints.timeAdded"),
            )
            for t in _opt_list(device.get("taints"), f"spec.devices[{index}].taints")
        )
        devices.append(
            SliceDevice(
                name=_name(device, f"spec.devices[{index}]"),
                uuid=_attribute_string(attributes, UUID_ATTRIBUTE),
                taints=taints,
            )
        )
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise InventoryParseError("spec.devices has duplicate device names")
    return ResourceSliceInfo(
        name=_name(metadata, "metadata"),
        driver=driver,
        pool=_name(pool, "spec.pool"),
        pool_generation=_int(pool.get("generation"), "spec.pool.generation", 0),
        resource_slice_count=_int(
            pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", 1
        ),
        node=node,
        devices=tuple(devices),
        resource_version=parse_resource_version(metadata.get("resourceVersion")),
    )


def _opt_dict(value: Any, where: str) -> dict[str, Any]:
    return {} if value is None else _dict(value, where)


def _opt_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InventoryParseError(f"{where} must be a list")
    return value


def _allocated_node(allocation: dict[str, Any]) -> str | None:
    """The node of an allocation from its ``nodeSelector`` (``metadata.name In [node]``)."""
    selector = _opt_dict(allocation.get("nodeSelector"), "status.allocation.nodeSelector")
    for term in _opt_list(selector.get("nodeSelectorTerms"), "nodeSelectorTerms"):
        for field in _opt_list(_dict(term, "nodeSelectorTerm").get("matchFields"), "matchFields"):
            field = _dict(field, "matchFields[]")
            values = _opt_list(field.get("values"), "matchFields[].values")
            if (
                field.get("key") == "metadata.name"
                and field.get("operator") == "In"
                and len(values) == 1
            ):
                return str(values[0])
    return None


def parse_resource_claim(obj: Any) -> ResourceClaimInfo:
    """Read a ResourceClaim object."""
    obj = _dict(obj, "ResourceClaim")
    metadata = _dict(obj.get("metadata"), "metadata")
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise InventoryParseError("metadata.namespace must be a non-empty string")
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InventoryParseError("metadata.uid must be a non-empty string")
    spec = _opt_dict(obj.get("spec"), "spec")
    requests = []
    devices = _opt_dict(spec.get("devices"), "spec.devices")
    for index, raw in enumerate(_opt_list(devices.get("requests"), "spec.devices.requests")):
        request = _dict(raw, f"spec.devices.requests[{index}]")
        exactly = _opt_dict(request.get("exactly"), f"spec.devices.requests[{index}].exactly")
        requests.append(
            ClaimRequest(
                name=_name(request, f"spec.devices.requests[{index}]"),
                device_class=exactly.get("deviceClassName"),
                count=exactly.get("count") if type(exactly.get("count")) is int else None,
                admin_access=exactly.get("adminAccess") is True,
            )
        )
    status = _opt_dict(obj.get("status"), "status")
    allocation = _opt_dict(status.get("allocation"), "status.allocation")
    allocated = _opt_dict(allocation.get("devices"), "status.allocation.devices")
    results = []
    for index, raw in enumerate(
        _opt_list(allocated.get("results"), "status.allocation.devices.results")
    ):
        result = _dict(raw, f"status.allocation.devices.results[{index}]")
        fields = [result.get(k) for k in ("request", "driver", "pool", "device")]
        if not all(isinstance(f, str) and f for f in fields):
            raise InventoryParseError(
                f"status.allocation.devices.results[{index}] needs request, driver, pool, device"
            )
        name, driver, pool, device = (str(f) for f in fields)
        results.append(
            AllocationResult(name, driver, pool, device, result.get("adminAccess") is True)
        )
    reserved = tuple(
        (str(r.get("name", "")), str(r.get("uid", "")))
        for r in _opt_list(status.get("reservedFor"), "status.reservedFor")
        if isinstance(r, dict) and r.get("resource", "pods") == "pods"
    )
    return ResourceClaimInfo(
        namespace=namespace,
        name=_name(metadata, "metadata"),
        uid=uid,
        requests=tuple(requests),
        results=tuple(results),
        reserved_for=reserved,
        node=_allocated_node(allocation),
        created_at=_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp"),
        allocated_at=_time(
            allocation.get("allocationTimestamp"), "status.allocation.allocationTimestamp"
        ),
        resource_version=parse_resource_version(metadata.get("resourceVersion")),
    )


def parse_device_class(obj: Any) -> DeviceClassInfo:
    """Read a DeviceClass object."""
    obj = _dict(obj, "DeviceClass")
    metadata = _dict(obj.get("metadata"), "metadata")
    spec = _opt_dict(obj.get("spec"), "spec")
    drivers: list[str] = []
    for selector in _opt_list(spec.get("selectors"), "spec.selectors"):
        cel = _opt_dict(_dict(selector, "spec.selectors[]").get("cel"), "spec.selectors[].cel")
        expression = cel.get("expression")
        if isinstance(expression, str):
            drivers.extend(_DRIVER_SELECTOR.findall(expression))
    extended = spec.get("extendedResourceName")
    return DeviceClassInfo(
        name=_name(metadata, "metadata"),
        extended_resource_name=extended if isinstance(extended, str) and extended else None,
        drivers=tuple(sorted(set(drivers))),
        resource_version=parse_resource_version(metadata.get("resourceVersion")),
    )
