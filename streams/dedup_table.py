"""The dedup table of the health agent (:mod:`streams.dedup`): which observations the
projection already has.

The changelog-backed Faust table :data:`TABLE_NAME` maps a **node** to the highest statusVersion
rank committed to the projection for each of its devices (:func:`encode_node_ranks`: a JSON
object ``{resourceID: rank}``, ranks as decimal strings: resourceVersions may exceed 64 bits).
One entry per node, not per device (issue 12): a Pod status change is one observation per
device of the Pod, all of one node, so a batch reads and writes a node's entry once (one
changelog record) for all its devices. :func:`select_new` (pure) drops the observations of a
batch that rank no higher than what the table (or an earlier record of the batch) has, keyed by
:func:`table_key` per device; :func:`known_ranks` reads the table for a batch and
:func:`remember` raises it after the commit, each node's entry in the partition of the record
it came from (:func:`current_event`; records are keyed by node, so a node's records share
one partition).

An entry that does not decode counts as empty (nothing dropped early: the projection's version
guard still refuses what it has). An entry that would exceed :data:`NODE_ENTRY_MAX_BYTES` (a
node with thousands of devices of long IDs) keeps only the devices of the batch that wrote it,
or is removed: a smaller table only means fewer early drops.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from services.domain.directory import DeviceKey, version_rank
from services.domain.events import DeviceHealthObserved
from services.domain.log import LoggedEvent

TABLE_NAME: Final = "last_applied_versions_by_node"
"""Faust table: node -> ``{resourceID: highest statusVersion rank committed}`` (JSON, decimal
strings). Its predecessor ``last_applied_version`` (one entry per device) is no longer read."""

KEY_SEPARATOR: Final = "\x1f"
"""ASCII unit separator: cannot occur in a node name or a resourceID the watcher emits."""

NODE_ENTRY_MAX_BYTES: Final = 512 * 1024
"""Largest encoded node entry: half the default ``max.message.bytes`` of its changelog record."""


def table_key(node: str, resource_id: str) -> str:
    """Key of a device in :func:`select_new`'s ``known`` map (not a table key: the table is by node)."""
    return f"{node}{KEY_SEPARATOR}{resource_id}"


def decode_node_ranks(value: bytes | str | None) -> dict[str, str]:
    """A node entry as ``{resourceID: rank}``; ``{}`` for none or one that does not decode."""
    if value is None:
        return {}
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(decoded, dict):
        return {}
    return {k: v for k, v in decoded.items() if isinstance(v, str) and v.isdigit()}


def encode_node_ranks(ranks: Mapping[str, str]) -> bytes:
    """The stored form of a node entry (keys sorted: the same ranks give the same bytes)."""
    return orjson.dumps(ranks, option=orjson.OPT_SORT_KEYS)


@dataclass(slots=True)
class Selection:
    """Result of :func:`select_new` on one batch."""

    records: list[LoggedEvent] = field(default_factory=list)
    """Events to write, in input order."""
    kept: list[int] = field(default_factory=list)
    """Index in the input of each entry of ``records``."""
    duplicates: int = 0
    """Observations dropped with the same rank as the table's (or an earlier one in the batch)."""
    stale: int = 0
    """Observations dropped with a lower rank."""
    ranks: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per table key: (highest rank kept in this batch, input index of the event that carried it)."""


def select_new(items: Sequence[LoggedEvent], known: Mapping[str, int]) -> Selection:
    """Drop observations whose device already has the same or a higher rank.

    ``known`` maps table keys to the rank the projection has committed. The rule is the fold's
    (:func:`services.domain.directory.apply_observation`): an observation can only change a device
    whose rank is lower, or a device not known yet; anything else would be a DUPLICATE or STALE
    no-op there too. Earlier observations of the same batch count as known. Releases always pass.
    A frozen observation (a Healthy of a terminated Pod) passes on the same rule but raises no rank:
    the fold records it without changing the device's statusVersion.
    """
    selection = Selection()
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        event = item.event
        if isinstance(event, DeviceHealthObserved):
            key = table_key(event.node, event.resource_id)
            rank = version_rank(event.status_version)
            best = seen.get(key, known.get(key))
            if best is not None and rank <= best:
                if rank == best:
                    selection.duplicates += 1
                else:
                    selection.stale += 1
                continue
            if not event.frozen:  # the fold keeps a frozen Healthy out of the device's rank
                seen[key] = rank
                selection.ranks[key] = (rank, index)
        selection.records.append(item)
        selection.kept.append(index)
    return selection


def known_ranks(
    table: Any,
    stream: Any,
    records: Sequence[LoggedEvent],
    sources: Sequence[Any],
    entries: dict[str, dict[str, str]] | None = None,
) -> dict[str, int]:
    """The committed rank of each device of the nodes the observations in ``records`` concern,
    keyed by :func:`table_key` (devices the table does not know are left out). ``sources``: the
    faust event of each record. Reads each node's entry once; ``entries``, when given, gets
    each entry read (decoded, by node), for :func:`remember` after the batch's commit."""
    known: dict[str, int] = {}
    looked_up: set[str] = set()
    for record, source in zip(records, sources, strict=True):
        event = record.event
        if not isinstance(event, DeviceHealthObserved) or event.node in looked_up:
            continue
        node = event.node
        looked_up.add(node)
        with current_event(stream, source):
            value = table.get(node)
        entry = decode_node_ranks(value)
        if entries is not None:
            entries[node] = entry
        for resource_id, rank in entry.items():
            known[table_key(node, resource_id)] = int(rank)
    return known


def remember(
    table: Any,
    stream: Any,
    selection: Selection,
    sources: Sequence[Any],
    refused: Collection[DeviceKey] = (),
    entries: Mapping[str, dict[str, str]] | None = None,
) -> None:
    """After the commit: set the batch's ranks in their nodes' entries (one write per node; the
    changelog goes to the source's partition), except those of ``refused`` devices (over the
    device ceiling: not in the projection). The batch's rank replaces the entry's (after a
    batch written without the table, the entry may have been ahead of the projection).

    ``entries``: the entries :func:`known_ranks` read for this batch (by node), used instead of
    reading them again: only this function writes the table, after the batch they were read
    for (the agent's batches follow each other), so they are what the table holds; an entry
    read earlier can only be behind the projection, never ahead (ranks only rise), which
    costs early drops at most."""
    skipped = {table_key(node, resource_id) for node, resource_id in refused}
    by_node: dict[str, tuple[dict[str, str], int]] = {}
    for key, (rank, index) in selection.ranks.items():
        if key in skipped:
            continue
        node, _, resource_id = key.partition(KEY_SEPARATOR)
        ranks, _ = by_node.setdefault(node, ({}, index))
        ranks[resource_id] = str(rank)
    for node, (ranks, index) in by_node.items():
        with current_event(stream, sources[index]):
            read = None if entries is None else entries.get(node)
            entry = decode_node_ranks(table.get(node)) if read is None else dict(read)
            entry.update(ranks)
            encoded = encode_node_ranks(entry)
            if len(encoded) > NODE_ENTRY_MAX_BYTES:
                encoded = encode_node_ranks(ranks)
            if len(encoded) <= NODE_ENTRY_MAX_BYTES:
                table[node] = encoded
            elif node in table:
                del table[node]


@contextmanager
def current_event(stream: Any, event: Any) -> Iterator[None]:
    """Make ``event`` faust's current event while reading or writing its table key.

    The table picks the RocksDB partition and the changelog partition from the current event, so
    each key lives in (and its changelog entry goes to) the partition of the record it came from.
    ``take_events`` reads ``stream.current_event`` in its background drainer, so the previous
    value is restored before anything else runs (this block has no ``await``).
    """
    previous = stream.current_event
    stream._set_current_event(event)
    try:
        yield
    finally:
        stream._set_current_event(previous)


def device_ranks(
    entries: Iterator[tuple[Any, Any]] | Collection[tuple[Any, Any]],
) -> dict[str, str]:
    """The table's ``(node, entry)`` items as ``{table_key(node, resourceID): rank}`` (for
    inspection and tests)."""
    ranks: dict[str, str] = {}
    for node, value in entries:
        name = node.decode() if isinstance(node, bytes) else str(node)
        for resource_id, rank in decode_node_ranks(value).items():
            ranks[table_key(name, resource_id)] = rank
    return ranks
