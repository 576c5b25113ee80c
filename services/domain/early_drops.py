"""Observations the worker dropped before the database saw them, checked against the projection.

The health agent drops an observation early when its dedup table (a changelog-backed cache,
:mod:`streams.dedup_table`) says the projection already has the device at the same or a higher
statusVersion rank. The table is raised only after a batch commits, so it can never be ahead of
the projection; if it ever were (a restore from the changelog that is not what was committed),
the dropped records would be lost: their offsets are still recorded as consumed. So the store
checks each early drop after its partition's recorded offset (a record it has not applied yet)
against the device's committed rank, or an earlier observation of the same batch, and refuses
the batch (:class:`EarlyDropsUnjustified`) when one is not explained: the caller writes it again
without the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.domain.directory import DeviceKey, version_rank
from services.domain.events import DeviceHealthObserved
from services.domain.log import LoggedEvent, LogPosition


class EarlyDropsUnjustified(Exception):
    """The batch's dedup table dropped observations the projection does not have.

    ``positions`` are those observations' log positions, in log order. Nothing of the batch is
    written; the caller writes it again without dropping anything early.
    """

    def __init__(self, positions: Sequence[LogPosition]) -> None:
        self.positions = list(positions)
        shown = ", ".join(
            f"{p.topic}/{p.partition}/{p.offset}" + (f"#{p.index}" if p.index else "")
            for p in self.positions[:5]
        )
        more = f" and {len(self.positions) - 5} more" if len(self.positions) > 5 else ""
        super().__init__(
            f"{len(self.positions)} observation(s) dropped early by the dedup table are not in "
            f"the projection ({shown}{more}); not written"
        )


def unjustified_drops(
    dropped: Sequence[LoggedEvent],
    kept: Sequence[LoggedEvent],
    committed: Mapping[DeviceKey, int | None],
) -> list[LogPosition]:
    """The positions of ``dropped`` observations nothing explains, in log order.

    ``dropped``: observations dropped early, after their partition's recorded offset. ``kept``:
    the batch's records passed to the store. ``committed``: each device's committed
    statusVersion (``None``: unordered) as the projection holds it before the batch; a device
    absent has no row. A drop is explained when the device's committed rank, or the rank of an
    observation of the same device earlier in the log among ``kept`` or among the unexplained
    drops (or a kept copy at the same position), is at least its own (the rule of
    :func:`streams.dedup_table.select_new`). Pure.
    """
    # Only observations of the dropped devices can explain a drop (ranks are per device): the
    # kept observations of other devices are left out before sorting.
    devices = {r.event.device_key for r in dropped if isinstance(r.event, DeviceHealthObserved)}
    events = [(r, True) for r in dropped]
    events.extend(
        (r, False)
        for r in kept
        if isinstance(r.event, DeviceHealthObserved) and r.event.device_key in devices
    )
    # A batch can hold one record twice (a range fetched again after a rebalance): the copy kept
    # explains the copy dropped, so at one position the kept one comes first.
    events.sort(key=lambda item: (_order(item[0].position), item[1]))
    best: dict[DeviceKey, int] = {key: version_rank(version) for key, version in committed.items()}
    unexplained = []
    for record, was_dropped in events:
        event = record.event
        if not isinstance(event, DeviceHealthObserved):
            continue
        key = event.device_key
        rank = version_rank(event.status_version)
        known = best.get(key)
        if known is not None and rank <= known:
            continue
        if event.frozen and not was_dropped:
            continue  # kept but not applied: the device's rank stays (directory.apply_observation)
        best[key] = rank  # an unexplained drop counts too: its re-sends are explained by it
        if was_dropped:
            unexplained.append(record.position)
    return sorted(unexplained, key=_order)


def _order(position: LogPosition) -> tuple[str, int, int, int]:
    return (position.topic, position.partition, position.offset, position.index)
