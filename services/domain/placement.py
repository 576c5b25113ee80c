"""The scheduler-extender ``filter`` decision (issue 4, item 5b; device-plugin path), pure.

kube-scheduler's HTTP extender (``k8s.io/kube-scheduler/extender/v1``) POSTs ``ExtenderArgs``
``{Pod, Nodes, NodeNames}`` and reads ``ExtenderFilterResult`` ``{Nodes, NodeNames, FailedNodes,
FailedAndUnresolvableNodes, Error}``. The Go structs have no JSON tags, so the field names are
the Go names, capitalised (Go decodes them case-insensitively; this module reads either case).

For each extended resource the Pod requests (:func:`pod_extended_requests`), a node passes when
its *free healthy* devices of that resource cover the request:

- ``free`` = allocatable (what the scheduler itself counts; capacity when the Node reports no
  allocatable) - the resourceIDs of that resource the directory shows allocated on the node;
- ``blocked`` = free devices whose governance state is Quarantined, Recovering or Restricted
  (matched by physical identity, replicas ``<id>::<n>`` included), plus blocked devices the
  directory has no row for (counted as free);
- a node with ``free - blocked < request <= free`` fails: its only free devices of the resource
  that would fit the Pod are quarantined. Preempting Pods there could free healthy devices, so the
  node goes to ``FailedNodes`` (resolvable), not ``FailedAndUnresolvableNodes``.

Everything else passes: nodes or resources the API knows nothing about (**fail open**: the
extender never blocks scheduling on missing data), and nodes without enough free devices even
counting blocked ones (the scheduler's own resource fit rejects those, with its own message).
Deferred devices pass: a blast-radius limit (rate limit, open breaker, paused automation) is
holding their restriction back on purpose. DRA devices are kept away by DeviceTaintRules, not
here. The extender reads the projection; it never edits Pod or Node objects.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from services.domain.governance.device_state import GovState
from services.domain.inventory.identity import plugin_identity

BLOCKED_STATES: Final = frozenset(
    {GovState.QUARANTINED.value, GovState.RECOVERING.value, GovState.RESTRICTED.value}
)
"""Governance states that keep new Pods away from a device-plugin device."""
_NATIVE_PREFIXES: Final = ("kubernetes.io/", "requests.")
MAX_QUANTITY: Final = 2**63 - 1
"""Largest device count taken (Kubernetes quantities are int64)."""


class ExtenderArgsError(ValueError):
    """The request is not an ``ExtenderArgs`` object; the message says why."""


def field_of(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]``, or the field spelled with a lower-case first letter (``Pod``/``pod``)."""
    if name in obj:
        return obj[name]
    return obj.get(name[0].lower() + name[1:])


def is_extended_resource(name: str) -> bool:
    """Extended resources have a domain prefix outside ``kubernetes.io`` (``nvidia.com/gpu``)."""
    return "/" in name and not name.startswith(_NATIVE_PREFIXES)


def _quantity(name: str, value: Any) -> int | None:
    """A whole-device quantity of the resource ``name`` (``2``, ``"2"``); ``None`` for anything
    else. Raises :class:`ExtenderArgsError` for a number no Pod can request: not finite
    (``"NaN"``, ``"Infinity"``) or beyond int64 (``"1e999999"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        try:
            number = Decimal(value.strip())
        except InvalidOperation:
            return None
    else:
        return None
    if not number.is_finite() or number.copy_abs() > MAX_QUANTITY:
        shown = value if len(str(value)) <= 40 else f"{str(value)[:40]}..."
        raise ExtenderArgsError(f"the quantity {shown!r} of {name!r} is not a device count")
    if number >= 0 and number == number.to_integral_value():
        return int(number)
    return None


def _container_requests(container: Any) -> dict[str, int]:
    if not isinstance(container, dict):
        return {}
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}
    # Extended resources cannot be overcommitted: requests equal limits, and a limit alone
    # implies the request. Limits first, requests where no limit is given.
    found: dict[str, int] = {}
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, dict):
            for name, raw in values.items():
                if not (isinstance(name, str) and is_extended_resource(name)):
                    continue
                count = _quantity(name, raw)
                if count is not None:
                    found[name] = count
    return found


def pod_extended_requests(pod: Any) -> dict[str, int]:
    """The extended resources a Pod needs on its node, as the scheduler computes a Pod's request:
    the sum over app containers plus restartable init containers (native sidecars, which keep
    running), or, if larger, what an init container needs while it runs (its own request plus
    the sidecars started before it). Zero counts are dropped."""
    if not isinstance(pod, dict):
        raise ExtenderArgsError("Pod must be an object")
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise ExtenderArgsError("Pod.spec must be an object")
    total: dict[str, int] = defaultdict(int)
    for container in spec.get("containers") or []:
        for name, count in _container_requests(container).items():
            total[name] += count
    sidecars: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)
    for container in spec.get("initContainers") or []:
        requests = _container_requests(container)
        if isinstance(container, dict) and container.get("restartPolicy") == "Always":
            for name, count in requests.items():
                sidecars[name] += count
        else:
            for name, count in requests.items():
                peak[name] = max(peak[name], count + sidecars[name])
    names = set(total) | set(sidecars) | set(peak)
    needed = {name: max(total[name] + sidecars[name], peak[name]) for name in names}
    return {name: count for name, count in sorted(needed.items()) if count > 0}


def candidate_nodes(args: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
    """The candidate node names and, when the scheduler sent full Node objects (``Nodes``, a
    NodeList; extenders that are not ``nodeCacheCapable``), those objects in order."""
    names = field_of(args, "NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ExtenderArgsError("NodeNames must be a list of strings")
        return list(names), None
    nodes = field_of(args, "Nodes")
    if nodes is None:
        return [], None
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if items is None and isinstance(nodes, dict):
        items = []
    if not isinstance(items, list):
        raise ExtenderArgsError("Nodes must be a NodeList with items")
    found = []
    for item in items:
        metadata = item.get("metadata") if isinstance(item, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            raise ExtenderArgsError("every Node of Nodes.items needs metadata.name")
        found.append(name)
    return found, items


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """A device-plugin resourceID the directory knows on a node (``device_id``: its physical
    identity), allocated or not."""

    resource_id: str
    resource_name: str
    device_id: str
    allocated: bool


@dataclass(frozen=True, slots=True)
class BlockedDevice:
    """A device-plugin device in a blocking governance state (``device_governance``)."""

    resource_id: str
    resource_name: str
    state: str


@dataclass(slots=True)
class NodeFacts:
    """What the projection knows about one node: its extended-resource counts (``None`` when the
    Node was never reported), its device-plugin resourceIDs and its blocked devices."""

    capacity: dict[str, int] | None = None
    allocatable: dict[str, int] | None = None
    devices: list[PluginDevice] = field(default_factory=list)
    blocked: list[BlockedDevice] = field(default_factory=list)


def physical_id(resource_id: str, identities: Mapping[str, str]) -> str:
    """The physical device of a device-plugin resourceID (``device_identities``, else the same
    rule: ``<id>::<n>`` -> ``<id>``)."""
    return identities.get(resource_id) or plugin_identity(resource_id).device_id


def node_verdict(facts: NodeFacts | None, requests: Mapping[str, int]) -> str | None:
    """``None`` when the node passes, else the reason it fails (see the module docstring)."""
    if facts is None or facts.capacity is None:
        return None
    allocatable = facts.allocatable if facts.allocatable is not None else facts.capacity
    problems = []
    for name, needed in sorted(requests.items()):
        if name not in facts.capacity:
            continue
        have = allocatable.get(name, facts.capacity[name])
        devices = [d for d in facts.devices if d.resource_name == name]
        blocked = {b.resource_id: b.state for b in facts.blocked if b.resource_name == name}
        free = max(0, have - sum(1 for d in devices if d.allocated))
        matched: set[str] = set()
        blocked_free: list[str] = []
        for device in devices:
            state = blocked.get(device.device_id) or blocked.get(device.resource_id)
            if state is not None:
                matched.update((device.device_id, device.resource_id))
                if not device.allocated:
                    blocked_free.append(f"{device.resource_id} {state}")
        blocked_free += [
            f"{rid} {state}" for rid, state in sorted(blocked.items()) if rid not in matched
        ]
        healthy = max(0, free - len(blocked_free))
        if healthy < needed <= free:
            shown = ", ".join(sorted(blocked_free)[:8]) + (", ..." if len(blocked_free) > 8 else "")
            problems.append(
                f"{name}: Pod needs {needed}, {free} free of which {len(blocked_free)} "
                f"quarantined or restricted ({shown})"
            )
    if not problems:
        return None
    return "only quarantined devices free: " + "; ".join(problems)


def filter_nodes(
    names: Iterable[str], requests: Mapping[str, int], facts: Mapping[str, NodeFacts]
) -> tuple[list[str], dict[str, str]]:
    """Passing node names (input order kept) and failing nodes with their reasons."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        reason = node_verdict(facts.get(name), requests) if requests else None
        if reason is None:
            passed.append(name)
        else:
            failed[name] = reason
    return passed, failed


def filter_result(
    args: Mapping[str, Any], passed: list[str], failed: Mapping[str, str]
) -> dict[str, Any]:
    """The ``ExtenderFilterResult``: ``NodeNames`` when the scheduler sent names, else ``Nodes``
    (the Node objects it sent, of the passing nodes)."""
    result: dict[str, Any] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    if field_of(args, "NodeNames") is not None:
        result["NodeNames"] = passed
        return result
    nodes = field_of(args, "Nodes")
    if isinstance(nodes, dict):
        keep = set(passed)
        node_list = {k: v for k, v in nodes.items() if k != "items"}
        node_list["items"] = [n for n in nodes.get("items") or [] if n["metadata"]["name"] in keep]
        result["Nodes"] = node_list
    return result


def error_result(message: str) -> dict[str, Any]:
    """An ``ExtenderFilterResult`` carrying ``Error``: the scheduler then ignores the extender
    (``ignorable: true``) or fails the Pod's scheduling attempt and retries it."""
    return {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": message,
    }
