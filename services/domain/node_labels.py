"""The ``NodeLabelsChanged`` record (issue 16, node-label pool selectors): a Node's
``metadata.labels`` at event time, so that pools selected by labels
(:class:`services.domain.labels.LabelSelector`) follow relabelled nodes on event time.

Bounded: at most :data:`MAX_LABELS` labels per Node; a label whose key or value is not a valid
Kubernetes label (:func:`services.domain.labels.key_error`, :func:`~.labels.value_error`) is
dropped by :func:`clean_labels`, which says why, for the caller to count and log. Wire form:
JSON, schema 1 (``{"schema", "type", "node", "labels", "observedAt"}``, and ``"removed": true``
on a removal), keys sorted.

A removal (``removed``: the Node was deleted, or a complete re-LIST no longer has it) carries no
labels and takes the node out of every label pool; an empty label set is *not* a removal (it
matches ``!k`` selectors). ``removed`` is written only when true, so a record without it (every
record before removals existed) is not a removal and its bytes are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

from services.domain.codec import EventDecodeError, event_time_field, json_fault, str_field
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.labels import key_error, value_error

MAX_LABELS: Final = 256
"""Most labels a record carries for one Node (the first ones in key order are kept)."""


@dataclass(frozen=True, slots=True)
class DroppedLabel:
    """A label left out of a record: its ``key`` and why (``invalid-key``, ``invalid-value``,
    ``too-many``) with a sentence."""

    key: str
    reason: str
    detail: str


def clean_labels(raw: Any) -> tuple[tuple[tuple[str, str], ...], list[DroppedLabel]]:
    """A Node's ``metadata.labels`` (any JSON; not an object: no labels) as sorted valid
    ``(key, value)`` pairs, at most :data:`MAX_LABELS`, and the labels dropped with reasons."""
    if not isinstance(raw, Mapping):
        return (), []
    kept: list[tuple[str, str]] = []
    dropped: list[DroppedLabel] = []
    for key, value in sorted((str(k), v) for k, v in raw.items()):
        if (err := key_error(key)) is not None:
            dropped.append(DroppedLabel(key, "invalid-key", err))
        elif not isinstance(value, str) or (err := value_error(value)) is not None:
            detail = err if isinstance(value, str) and err else f"label {key!r}: not a string"
            dropped.append(DroppedLabel(key, "invalid-value", detail))
        elif len(kept) >= MAX_LABELS:
            dropped.append(
                DroppedLabel(key, "too-many", f"label {key!r}: over {MAX_LABELS} labels")
            )
        else:
            kept.append((key, value))
    return tuple(kept), dropped


@dataclass(frozen=True, slots=True)
class NodeLabelsChanged:
    """Node ``node``'s labels (sorted ``(key, value)``, all valid, at most :data:`MAX_LABELS`)
    as the watcher saw them at ``observed_at`` (UTC). The newest in event time replaces the
    node's earlier labels. ``removed``: the Node is gone (deleted, or absent from a complete
    re-LIST): it has no labels any more, not an empty set. ``ValueError`` on an invalid or excess
    label, or on a removal with labels."""

    node: str
    labels: tuple[tuple[str, str], ...]
    observed_at: datetime
    removed: bool = False
    type: str = field(default="NodeLabelsChanged", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(sorted(dict(self.labels).items())))
        if not self.node:
            raise ValueError("node labels need the node's name")
        if len(self.labels) > MAX_LABELS:
            raise ValueError(f"at most {MAX_LABELS} labels per node ({len(self.labels)} given)")
        if self.removed and self.labels:
            raise ValueError("a removal of a node's labels carries no labels")
        for k, v in self.labels:
            if (err := key_error(k) or value_error(v)) is not None:
                raise ValueError(err)

    @property
    def as_dict(self) -> dict[str, str]:
        return dict(self.labels)


def node_labels_to_dict(record: NodeLabelsChanged) -> dict[str, Any]:
    """The record's JSON object (camelCase, schema 1; ``"removed": true`` only on a removal)."""
    return {
        "schema": SCHEMA_VERSION,
        "type": record.type,
        "node": record.node,
        "labels": dict(record.labels),
        "observedAt": format_time(record.observed_at),
        **({"removed": True} if record.removed else {}),
    }


def node_labels_from_dict(obj: Any) -> NodeLabelsChanged:
    """Parse the record; :class:`EventDecodeError` naming the bad field."""
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    if obj.get("schema") != SCHEMA_VERSION:
        raise EventDecodeError(f"unsupported schema {obj.get('schema')!r}")
    if obj.get("type") != "NodeLabelsChanged":
        raise EventDecodeError(f"not a NodeLabelsChanged record: type {obj.get('type')!r}")
    labels = obj.get("labels")
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise EventDecodeError("field 'labels' must be an object of string values")
    removed = obj.get("removed", False)
    if not isinstance(removed, bool):
        raise EventDecodeError("field 'removed' must be a boolean")
    try:
        return NodeLabelsChanged(
            node=str_field(obj, "node"),
            labels=tuple(labels.items()),
            observed_at=event_time_field(obj, "observedAt"),
            removed=removed,
        )
    except EventDecodeError:
        raise
    except ValueError as exc:
        raise EventDecodeError(str(exc)) from exc


def encode_node_labels(record: NodeLabelsChanged) -> bytes:
    """UTF-8 JSON, keys sorted."""
    return orjson.dumps(node_labels_to_dict(record), option=orjson.OPT_SORT_KEYS)


def decode_node_labels(payload: bytes) -> NodeLabelsChanged:
    """Parse the wire form; :class:`EventDecodeError` with the reason."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    return node_labels_from_dict(obj)
