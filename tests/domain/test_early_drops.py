"""The check of the observations the dedup table dropped early
(:func:`services.domain.early_drops.unjustified_drops`), against the table's own selection
(:func:`streams.dedup_table.select_new`) on random batches: an honest table (the committed
ranks) has every drop explained; a table ahead of the projection has exactly the drops an honest
one would have kept flagged."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.domain.directory import DeviceKey, version_rank
from services.domain.early_drops import unjustified_drops
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.log import LoggedEvent, LogPosition
from streams.dedup_table import select_new, table_key
from tests.conftest import T0

DEVICES = [("gpu-node-a", f"GPU-{i}") for i in range(3)]


def observed(device: DeviceKey, version: int, offset: int) -> LoggedEvent:
    node, resource_id = device
    event = DeviceHealthObserved(
        node=node,
        namespace="ml",
        pod_name="train-0",
        pod_uid="uid-1",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=resource_id,
        source=DeviceSource.DEVICE_PLUGIN,
        health=Health.HEALTHY,
        status_version=version,
        observed_at=T0,
    )
    return LoggedEvent(LogPosition("t", 0, offset), event)


batches = st.lists(st.tuples(st.sampled_from(range(len(DEVICES))), st.integers(1, 12)), max_size=30)
committed_ranks = st.dictionaries(st.sampled_from(range(len(DEVICES))), st.integers(1, 8))


def setup(
    items: list[tuple[int, int]], committed: dict[int, int]
) -> tuple[list[LoggedEvent], dict[DeviceKey, int | None]]:
    records = [observed(DEVICES[d], v, offset) for offset, (d, v) in enumerate(items)]
    return records, {DEVICES[d]: v for d, v in committed.items()}


def split(
    records: list[LoggedEvent], known: dict[str, int]
) -> tuple[list[LoggedEvent], list[LoggedEvent]]:
    selection = select_new(records, known)
    kept = set(selection.kept)
    return selection.records, [r for i, r in enumerate(records) if i not in kept]


@given(batches, committed_ranks)
def test_an_honest_table_has_every_drop_explained(
    items: list[tuple[int, int]], committed: dict[int, int]
) -> None:
    records, projection = setup(items, committed)
    known = {table_key(*key): version_rank(v) for key, v in projection.items()}
    kept, dropped = split(records, known)
    assert unjustified_drops(dropped, kept, projection) == []


@given(batches, committed_ranks, st.dictionaries(st.sampled_from(range(3)), st.integers(1, 6)))
def test_a_table_ahead_has_exactly_the_lost_drops_flagged(
    items: list[tuple[int, int]], committed: dict[int, int], ahead: dict[int, int]
) -> None:
    records, projection = setup(items, committed)
    honest = {table_key(*key): version_rank(v) for key, v in projection.items()}
    inflated = dict(honest)
    for d, extra in ahead.items():
        key = table_key(*DEVICES[d])
        inflated[key] = inflated.get(key, 0) + extra
    kept, dropped = split(records, inflated)
    flagged = unjustified_drops(dropped, kept, projection)
    should_keep, _ = split(records, honest)
    # What the honest table keeps is what the inflated one kept plus what the check flags.
    assert sorted(r.position.offset for r in should_keep) == sorted(
        [r.position.offset for r in kept] + [p.offset for p in flagged]
    )


@given(batches, committed_ranks, st.data())
def test_a_record_fetched_twice_in_one_batch_is_explained_by_its_kept_copy(
    items: list[tuple[int, int]], committed: dict[int, int], data: st.DataObject
) -> None:
    """A range of the log read again within one batch (after a rebalance): each copy dropped at
    the position of a kept one is no drop the projection lacks."""
    records, projection = setup(items, committed)
    start = data.draw(st.integers(0, len(records)))
    batch = records + records[start:]
    known = {table_key(*key): version_rank(v) for key, v in projection.items()}
    kept, dropped = split(batch, known)
    assert unjustified_drops(dropped, kept, projection) == []
