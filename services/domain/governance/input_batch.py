"""``ForwardedBatch``: the forwarded records of one health-agent batch in one governance record
(issue 12, the forwarding lever).

The health agent forwards, per batch of the device-health topic, a list of records in order
(:mod:`streams.forward`): transitions, node facts, ticks, conflicts, ... each with its
:class:`~.inputs.MergeKey`, then the partitions' :class:`~.inputs.PartitionWatermark`\\ s. Sent one
Kafka record each, every one costs an encode, a send and the governor's per-record consume. A
``ForwardedBatch`` carries several of them, in order, as one record of the governance topic.

Wire form (UTF-8 JSON, keys sorted, type header ``ForwardedBatch``)::

    {"entries": [<entry>, ...], "schema": 1, "type": "ForwardedBatch", "version": 1}

Each entry is exactly the JSON object the entry would be on its own
(:func:`~.input_codec.encode_input`: ``schema``, ``type``, its fields and its ``order``, the merge
key); an entry without ``order`` must be a ``PartitionWatermark`` (nothing else the worker forwards
is outside the merge, and a fold of the batch is identified by its merge key,
:mod:`.fold_filter`). ``version`` is this envelope's version (1); a reader refuses any other.

:func:`unpack` reads a governance record of either form into its entries in order: a single record
is one entry, as before issue 12. The governor and ``replay --governance`` take the entries one at
a time (:func:`~.intake.take`), exactly as if they had been separate records at the same offset,
so the event-time merge, its dedup and the decisions do not depend on how the worker packed them.
An entry that does not decode is returned in :attr:`Unpacked.bad` with its bytes and reason (the
governor dead-letters it alone, like a single record that does not decode); the others are taken.
A record whose envelope does not decode raises :class:`~services.domain.codec.EventDecodeError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from services.domain.codec import EventDecodeError, json_fault, type_mismatch
from services.domain.events import SCHEMA_VERSION
from services.domain.governance.input_checks import may_hold_nul
from services.domain.governance.input_codec import (
    decode_keyed,
    input_from_dict,
    merge_key_from_dict,
)
from services.domain.governance.inputs import GovernanceInput, MergeKey

RECORD_TYPE: Final = "ForwardedBatch"
"""``type`` of the record (and its ``devicestate-type`` header)."""
BATCH_VERSION: Final = 1
"""Version of the envelope (``version``)."""

Entry = tuple[GovernanceInput, MergeKey | None]
"""One forwarded record with its merge key (``None``: a progress mark)."""

_OPEN: Final = b'{"entries":['
_CLOSE: Final = b'],"schema":%d,"type":"%s","version":%d}' % (
    SCHEMA_VERSION,
    RECORD_TYPE.encode(),
    BATCH_VERSION,
)
ENVELOPE_BYTES: Final = len(_OPEN) + len(_CLOSE)
"""Bytes of the envelope around the entries (a batch of ``n`` entries of sizes ``s_i`` is
``ENVELOPE_BYTES + sum(s_i) + n - 1`` bytes: one comma between entries)."""


def batch_size(entry_sizes: Sequence[int]) -> int:
    """Encoded size in bytes of a batch whose entries encode to ``entry_sizes`` bytes."""
    return ENVELOPE_BYTES + sum(entry_sizes) + max(0, len(entry_sizes) - 1)


def encode_batch(entries: Sequence[bytes]) -> bytes:
    """The record of ``entries``, each the bytes :func:`~.input_codec.encode_input` made of one
    forwarded record (a JSON object), in order. The bytes equal ``orjson.dumps`` of the object
    with sorted keys, so the entries are not parsed again."""
    return _OPEN + b",".join(entries) + _CLOSE


@dataclass(frozen=True, slots=True)
class BadEntry:
    """An entry of a batch that does not decode: its index in the batch, its bytes (the entry's
    JSON object, keys sorted: the bytes it would have had as a record of its own) and why."""

    index: int
    value: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class Unpacked:
    """A governance record's entries in order, and those of its entries that did not decode."""

    entries: list[Entry]
    bad: list[BadEntry] = field(default_factory=list)
    batch: bool = False
    """The record was a ``ForwardedBatch`` (not a single record)."""


def unpack(payload: bytes, record_type: str | None = None) -> Unpacked:
    """The entries of a governance record (a ``ForwardedBatch`` or any single record, which is
    one entry). ``record_type`` is what the record's type header names (``None``: none). Raises
    :class:`EventDecodeError` when the record itself (a single record, or a batch's envelope)
    does not decode."""
    if record_type is not None and record_type != RECORD_TYPE:
        return Unpacked([decode_keyed(payload, record_type)])
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    if obj.get("type") != RECORD_TYPE:
        if record_type is not None:
            raise type_mismatch(record_type, obj.get("type"))
        return Unpacked([decode_keyed(payload, None)])
    if obj.get("schema") != SCHEMA_VERSION:
        raise EventDecodeError(f"unsupported schema {obj.get('schema')!r}")
    if obj.get("version") != BATCH_VERSION:
        raise EventDecodeError(f"unsupported {RECORD_TYPE} version {obj.get('version')!r}")
    raw = obj.get("entries")
    if not isinstance(raw, list) or not raw:
        raise EventDecodeError("field 'entries' must be a non-empty list")
    out = Unpacked([], [], batch=True)
    storable = not may_hold_nul(payload)  # once for the whole batch, not per entry
    for index, item in enumerate(raw):
        try:
            out.entries.append(_entry(item, storable))
        except EventDecodeError as exc:
            value = orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
            out.bad.append(BadEntry(index, value, f"entry {index} of {RECORD_TYPE}: {exc}"))
    return out


def _entry(item: Any, storable: bool) -> Entry:
    if not isinstance(item, dict):
        raise EventDecodeError("not a JSON object")
    order = item.pop("order", None)  # the item is ours (parsed for this call): put back on error
    try:
        record = input_from_dict(item, storable=storable)
        if order is None:
            if record.type != "PartitionWatermark":
                raise EventDecodeError(f"a {record.type} without its merge key ('order')")
            return record, None
        return record, merge_key_from_dict(order)
    except EventDecodeError:
        if order is not None:
            item["order"] = order  # the dead letter holds the entry as it came
        raise


def decode_records(payload: bytes, record_type: str | None = None) -> list[Entry]:
    """:func:`unpack`, strict: raises :class:`EventDecodeError` if any entry does not decode
    (for readers that want every record or none: tools, benchmarks, tests)."""
    unpacked = unpack(payload, record_type)
    if unpacked.bad:
        raise EventDecodeError(unpacked.bad[0].reason)
    return unpacked.entries
