"""Decode one line of a Kubernetes watch stream (or a recorded one) into a typed item.

The API serves a watch as JSON objects, one a line: ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|
ERROR, "object": {...}}`` (``k8s.io/apimachinery/pkg/watch``, ``metav1.WatchEvent``). Recorded
streams in ``devtools/examples`` add harness directives whose ``type`` starts with ``_``, e.g.
``{"type": "_CLOCK", "now": "<RFC 3339>"}``. Pure: no I/O, no clock; never raises for bad input
(a line that cannot be read becomes :class:`BrokenLine`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeAlias

import orjson

from services.domain.codec import parse_time
from services.domain.watch.inventory_tracker import INVENTORY_KINDS
from services.domain.watch.pod_tracker import WatchKind


@dataclass(frozen=True, slots=True)
class ClockSet:
    """``_CLOCK`` directive: the watcher clock reads ``now`` (UTC) until the next one."""

    now: datetime


@dataclass(frozen=True, slots=True)
class Directive:
    """Any other harness directive (``type`` starting with ``_``): skipped."""

    name: str


@dataclass(frozen=True, slots=True)
class PodChange:
    """ADDED, MODIFIED or DELETED of a Pod; ``raw`` is the line's original bytes (for dead
    letters) and ``resource_version`` the object's ``metadata.resourceVersion`` as served."""

    kind: WatchKind
    pod: dict[str, Any]
    raw: bytes

    @property
    def resource_version(self) -> str | None:
        metadata = self.pod.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return version if isinstance(version, str) and version else None


@dataclass(frozen=True, slots=True)
class ObjectChange:
    """ADDED, MODIFIED or DELETED of a non-Pod object the watcher reads (``object_kind``: one of
    :data:`OBJECT_KINDS`: a Node or a node Lease, or a DRA ResourceSlice, ResourceClaim or
    DeviceClass); ``raw`` is the line's original bytes (for dead letters). Only decoded when asked
    for (``decode_watch_line(kinds=...)``); otherwise such an object is an :class:`OtherKind`."""

    kind: WatchKind
    object_kind: str
    obj: dict[str, Any]
    raw: bytes

    @property
    def resource_version(self) -> str | None:
        metadata = self.obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return version if isinstance(version, str) and version else None


@dataclass(frozen=True, slots=True)
class Bookmark:
    """BOOKMARK: only moves the resume point to ``resource_version`` (``None`` if it lacks one)."""

    resource_version: str | None


@dataclass(frozen=True, slots=True)
class WatchError:
    """ERROR event: a ``metav1.Status`` (``code`` 410 Gone means the resume point expired)."""

    code: int | None
    reason: str | None
    message: str
    raw: bytes

    @property
    def expired(self) -> bool:
        """410 Gone / ``Expired``: the watch cannot resume; LIST again."""
        return self.code == 410 or self.reason in ("Expired", "Gone")


@dataclass(frozen=True, slots=True)
class OtherKind:
    """A watch event about an object that is neither a Pod nor a kind asked for (e.g. the
    ResourceClaim of stream-05b when DRA objects are not read): ignored."""

    event_type: str
    kind: str


@dataclass(frozen=True, slots=True)
class UnknownType:
    """A watch event ``type`` this watcher does not know (e.g. ``SYNCED`` in stream-10)."""

    event_type: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class BrokenLine:
    """A line that is not a readable watch event (cut off, not JSON, wrong shape)."""

    raw: bytes
    reason: str


WatchItem: TypeAlias = (
    ClockSet
    | Directive
    | PodChange
    | ObjectChange
    | Bookmark
    | WatchError
    | OtherKind
    | UnknownType
    | BrokenLine
)

NODE_KINDS: Final = frozenset({"Node", "Lease"})
"""Node-level object kinds besides Pods that the watcher turns into events (``ObjectChange``)."""

OBJECT_KINDS: Final = NODE_KINDS | INVENTORY_KINDS
"""Every object kind besides Pods that ``decode_watch_line(kinds=...)`` can be asked for: the
node kinds and the DRA inventory kinds (:data:`INVENTORY_KINDS`)."""


def _directive(name: str, event: dict[str, Any], raw: bytes) -> WatchItem:
    if name != "_CLOCK":
        return Directive(name)
    now = event.get("now")
    try:
        if not isinstance(now, str):
            raise ValueError("'now' is not a string")
        return ClockSet(parse_time(now))
    except ValueError as exc:
        return BrokenLine(raw, f"bad _CLOCK directive: {exc}")


def decode_watch_line(
    raw: bytes, *, kinds: frozenset[str] = frozenset(), default_kind: str = "Pod"
) -> WatchItem:
    """Decode one line (without or with its trailing newline).

    Pods are :class:`PodChange`; objects of a kind in ``kinds`` (a subset of
    :data:`OBJECT_KINDS`) are :class:`ObjectChange`; others are :class:`OtherKind`. An object
    without ``kind`` (LIST items omit it; a watch serves it) is read as ``default_kind``, the kind
    being watched.
    """
    try:
        event = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return BrokenLine(raw, f"not JSON: {exc}")
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return BrokenLine(raw, "not a watch event: no 'type'")
    event_type: str = event["type"]
    if event_type.startswith("_"):
        return _directive(event_type, event, raw)
    obj = event.get("object")
    if not isinstance(obj, dict):
        return BrokenLine(raw, f"{event_type} event without an 'object'")
    if event_type == "ERROR":
        code = obj.get("code")
        reason = obj.get("reason")
        return WatchError(
            code=code if isinstance(code, int) else None,
            reason=reason if isinstance(reason, str) else None,
            message=str(obj.get("message") or ""),
            raw=raw,
        )
    if event_type == "BOOKMARK":
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return Bookmark(version if isinstance(version, str) and version else None)
    try:
        kind = WatchKind(event_type)
    except ValueError:
        return UnknownType(event_type, raw)
    # A watch serves the kind; list items omit it, so a missing kind is the watched one.
    object_kind = obj.get("kind", default_kind)
    if object_kind == "Pod":
        return PodChange(kind, obj, raw)
    if object_kind in kinds:
        return ObjectChange(kind, object_kind, obj, raw)
    return OtherKind(event_type, str(object_kind))
