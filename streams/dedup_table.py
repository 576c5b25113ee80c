"""The dedup table of the health agent (:mod:`streams.dedup`): which observations the
projection already has.

The changelog-backed Faust table :data:`TABLE_NAME` maps :func:`table_key` (``node`` and
``resourceID`` joined by :data:`KEY_SEPARATOR`) to the highest statusVersion rank committed to
the projection for the device (a decimal string: resourceVersions may exceed 64 bits).
:func:`select_new` (pure) drops the observations of a batch that rank no higher than what the
table (or an earlier record of the batch) has; :func:`known_ranks` reads the table for a batch
and :func:`remember` raises it after the commit, each key in the partition of the record it came
from (:func:`current_event`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from services.domain.directory import DeviceKey, version_rank
from services.domain.events import DeviceHealthObserved
from services.domain.log import LoggedEvent

TABLE_NAME: Final = "last_applied_version"
"""Faust table: ``f"{node}\\x1f{resourceID}"`` -> highest statusVersion rank committed (decimal)."""

KEY_SEPARATOR: Final = "\x1f"
"""ASCII unit separator: cannot occur in a node name or a resourceID the watcher emits."""


def table_key(node: str, resource_id: str) -> str:
    """Key of a device in the dedup table."""
    return f"{node}{KEY_SEPARATOR}{resource_id}"


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
    table: Any, stream: Any, records: Sequence[LoggedEvent], sources: Sequence[Any]
) -> dict[str, int]:
    """The committed rank of each device the observations in ``records`` concern (devices the
    table does not know are left out). ``sources``: the faust event of each record."""
    known: dict[str, int] = {}
    looked_up: set[str] = set()
    for record, source in zip(records, sources, strict=True):
        event = record.event
        if not isinstance(event, DeviceHealthObserved):
            continue
        key = table_key(event.node, event.resource_id)
        if key in looked_up:
            continue
        looked_up.add(key)
        with current_event(stream, source):
            value = table.get(key)
        if value is not None:
            known[key] = int(value)
    return known


def remember(
    table: Any,
    stream: Any,
    selection: Selection,
    sources: Sequence[Any],
    refused: Collection[DeviceKey] = (),
) -> None:
    """After the commit: raise the table's ranks (the changelog goes to the source's partition),
    except those of ``refused`` devices (over the device ceiling: not in the projection)."""
    skipped = {table_key(node, resource_id) for node, resource_id in refused}
    for key, (rank, index) in selection.ranks.items():
        if key in skipped:
            continue
        with current_event(stream, sources[index]):
            table[key] = str(rank)


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
