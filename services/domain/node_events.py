"""Node-level events on the device-health topic: heartbeats, extended-resource counts, ticks.

They carry *time* and *node facts* into the log, so that every governance timer fires on event time
(issue 3, item 1) and a replay makes the same decisions:

- :class:`NodeHeartbeat`: the node's kubelet renewed its ``Lease`` in ``kube-node-lease``
  (coordination.k8s.io/v1 ``spec.renewTime``); coarsened by the watcher to at most one per node per
  ``heartbeat_interval_seconds``.
- :class:`NodeResourcesChanged`: the Node's ``status.capacity`` / ``status.allocatable`` of
  extended resources changed. ``allocatable < capacity`` means a device plugin lost devices:
  kubelet writes no ``Unknown`` in Pod status on that path (``../shared/notes``,
  stream-03b).
- :class:`~services.domain.node_labels.NodeLabelsChanged`: the Node's labels changed (issue 16:
  pools selected by node labels).
- :class:`WatcherTick`: the watcher is alive and its clock reads ``observed_at``; published to
  *every* partition so that each partition's event-time watermark advances even when it is idle.

All three are keyed by node on the topic (a tick by its ``node`` field, which names the partition it
was sent to, ``"~tick/<partition>"``). Wire form: JSON, schema 1, like :mod:`services.domain.events`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeAlias

import orjson

from services.domain.codec import (
    EventDecodeError,
    event_time_field,
    json_fault,
    str_field,
    time_field,
    version_field,
)
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.node_labels import NodeLabelsChanged as NodeLabelsChanged
from services.domain.node_labels import node_labels_from_dict, node_labels_to_dict

TICK_KEY_PREFIX: Final = "~tick/"
"""Ticks are keyed ``~tick/<partition>``; ``~`` cannot start a Node name (RFC 1123 subdomain)."""


@dataclass(frozen=True, slots=True)
class NodeHeartbeat:
    """The node's Lease was renewed at ``renewed_at`` (UTC); ``observed_at`` is when the watcher saw
    it. ``lease_version`` is the Lease's resourceVersion (``None`` if not comparable)."""

    node: str
    renewed_at: datetime
    observed_at: datetime
    lease_version: int | None = None
    type: str = field(default="NodeHeartbeat", init=False)


@dataclass(frozen=True, slots=True)
class NodeResourcesChanged:
    """Extended-resource counts of a Node (``status.capacity`` and ``status.allocatable``).

    Only extended resources (names with a ``/``, e.g. ``nvidia.com/gpu``) are kept; counts are
    integers (Kubernetes quantities of whole devices). ``status_version`` is the Node's
    resourceVersion.
    """

    node: str
    capacity: tuple[tuple[str, int], ...]
    allocatable: tuple[tuple[str, int], ...]
    status_version: int | None
    observed_at: datetime
    type: str = field(default="NodeResourcesChanged", init=False)

    def missing(self) -> dict[str, int]:
        """Per resource name, how many devices are in capacity but not allocatable (> 0 only)."""
        allocatable = dict(self.allocatable)
        return {
            name: count - allocatable.get(name, 0)
            for name, count in self.capacity
            if count > allocatable.get(name, 0)
        }


@dataclass(frozen=True, slots=True)
class WatcherTick:
    """The watcher's clock read ``observed_at`` (UTC); sent to partition ``partition``.

    ``watch_seen_at`` (UTC, issue 15): the watcher's clock when its quietest watch last delivered
    anything (an event, a BOOKMARK, a LIST), or when the watcher started; the governor marks the
    watch stale on event time from it (:mod:`services.domain.governance.watch_freshness`).
    ``None``: a tick of an older watcher, which is evidence of nothing but its own time.
    """

    partition: int
    observed_at: datetime
    watch_seen_at: datetime | None = None
    type: str = field(default="WatcherTick", init=False)

    @property
    def node(self) -> str:
        """Record key of the tick (not a Node): ``~tick/<partition>``."""
        return f"{TICK_KEY_PREFIX}{self.partition}"


NodeEvent: TypeAlias = NodeHeartbeat | NodeResourcesChanged | WatcherTick | NodeLabelsChanged

NODE_EVENT_TYPES: Final = frozenset(
    {"NodeHeartbeat", "NodeResourcesChanged", "WatcherTick", "NodeLabelsChanged"}
)


def _pairs(items: tuple[tuple[str, int], ...]) -> dict[str, int]:
    return dict(items)


def node_event_to_dict(event: NodeEvent) -> dict[str, Any]:
    """The JSON object of a node event (camelCase keys, times as RFC 3339 ``Z``)."""
    if isinstance(event, NodeLabelsChanged):
        return node_labels_to_dict(event)
    base: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "type": event.type,
        "observedAt": format_time(event.observed_at),
    }
    if isinstance(event, NodeHeartbeat):
        base.update(
            node=event.node,
            renewedAt=format_time(event.renewed_at),
            leaseVersion=None if event.lease_version is None else str(event.lease_version),
        )
    elif isinstance(event, NodeResourcesChanged):
        base.update(
            node=event.node,
            capacity=_pairs(event.capacity),
            allocatable=_pairs(event.allocatable),
            statusVersion=None if event.status_version is None else str(event.status_version),
        )
    else:
        base.update(partition=event.partition)
        if event.watch_seen_at is not None:  # absent otherwise: older ticks keep their bytes
            base.update(watchSeenAt=format_time(event.watch_seen_at))
    return base


def encode_node_event(event: NodeEvent) -> bytes:
    """Serialise a node event (UTF-8 JSON, keys sorted)."""
    return orjson.dumps(node_event_to_dict(event), option=orjson.OPT_SORT_KEYS)


def _counts(obj: dict[str, Any], name: str) -> tuple[tuple[str, int], ...]:
    raw = obj.get(name)
    if not isinstance(raw, dict):
        raise EventDecodeError(f"field {name!r} must be an object of resource name -> count")
    for key, value in raw.items():
        if type(value) is not int or value < 0:
            raise EventDecodeError(f"field {name!r}: count of {key!r} must be an integer >= 0")
    return tuple(sorted(raw.items()))


def node_event_from_dict(obj: dict[str, Any]) -> NodeEvent:
    """Build a node event from its JSON object; raises :class:`EventDecodeError` with the reason."""
    if obj.get("schema") != SCHEMA_VERSION:
        raise EventDecodeError(f"unsupported schema {obj.get('schema')!r}")
    kind = obj.get("type")
    if kind == "NodeLabelsChanged":
        return node_labels_from_dict(obj)
    observed_at = event_time_field(obj, "observedAt")
    if kind == "NodeHeartbeat":
        return NodeHeartbeat(
            node=str_field(obj, "node"),
            renewed_at=time_field(obj, "renewedAt"),
            observed_at=observed_at,
            lease_version=version_field(obj, "leaseVersion"),
        )
    if kind == "NodeResourcesChanged":
        return NodeResourcesChanged(
            node=str_field(obj, "node"),
            capacity=_counts(obj, "capacity"),
            allocatable=_counts(obj, "allocatable"),
            status_version=version_field(obj, "statusVersion"),
            observed_at=observed_at,
        )
    if kind == "WatcherTick":
        partition = obj.get("partition")
        if type(partition) is not int or partition < 0:
            raise EventDecodeError("field 'partition' must be an integer >= 0")
        seen = None if obj.get("watchSeenAt") is None else event_time_field(obj, "watchSeenAt")
        return WatcherTick(partition=partition, observed_at=observed_at, watch_seen_at=seen)
    raise EventDecodeError(f"unknown event type {kind!r}")


def decode_node_event(payload: bytes) -> NodeEvent:
    """Parse the JSON wire form of a node event; raises :class:`EventDecodeError`."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    return node_event_from_dict(obj)
