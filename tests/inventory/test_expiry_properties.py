"""Retention is a function of the log, not of the batch split (issue 11 item 9): the pure parts.

- claim aliases (:mod:`services.domain.inventory.expiry`): the identity rows the fold leaves, with
  :meth:`InventoryFold.expire` at every batch's end, are the same for every batching of the same
  per-partition logs, and none left is lapsed and unallocated;
- cleared conflicts (:func:`conflicts_kept` after every batch's writes) and history rows
  (:func:`history_kept` against the running watermark after every batch) end the same as when
  pruned once at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from services.domain.event_time import effective_times
from services.domain.events import DeviceHealthObserved
from services.domain.inventory.expiry import (
    CONFLICT_RETENTION,
    IDENTITY_RETENTION,
    conflicts_kept,
)
from services.domain.inventory.fold import InventoryFold
from services.domain.inventory.rows import ConflictRow
from services.domain.log import LogPosition
from services.domain.retention import history_kept
from tests.projection.inventory_examples import T0, pod_04

TOPIC = "health"
Alias = tuple[str, str]

# A step of one partition's log: (kind, alias index, hours since the previous step).
Step = tuple[str, int, int]
steps = st.tuples(
    st.sampled_from(["observed", "released", "tick"]),
    st.integers(0, 2),
    st.sampled_from([0, 1, 30, 24 * 3, 24 * 8]),
)


def cdi(partition: int, index: int) -> Alias:
    return (f"node-{partition}", f"k8s.gpu.example.com/claim=uid-{partition}{index}-gpu-0")


def observation(alias: Alias, at: datetime, version: int) -> DeviceHealthObserved:
    return dataclasses.replace(
        pod_04()[0], node=alias[0], resource_id=alias[1], observed_at=at, status_version=version
    )


def interleave(logs: Sequence[Sequence[Step]], order: Sequence[int]) -> list[tuple[int, Step]]:
    """The steps of ``logs`` (one per partition) in an interleaving that keeps each one's order
    (``order`` picks the partition of each next step, cycling over those left)."""
    cursors = [0] * len(logs)
    out: list[tuple[int, Step]] = []
    picks = iter(order)
    while any(c < len(log) for c, log in zip(cursors, logs, strict=True)):
        left = [p for p, log in enumerate(logs) if cursors[p] < len(log)]
        p = left[next(picks, 0) % len(left)]
        out.append((p, logs[p][cursors[p]]))
        cursors[p] += 1
    return out


Run = tuple[dict[Alias, dict[str, Any]], dict[Alias, bool], dict[tuple[str, int], datetime]]


def run(sequence: Sequence[tuple[int, Step]], cuts: set[int]) -> Run:
    """Fold ``sequence`` in batches ending after the indexes in ``cuts`` (and at the end), as the
    store does: event times as each partition's running maximum, :meth:`InventoryFold.expire`
    with each batch partition's watermark and the allocations after the batch. Returns the
    identity rows written, the allocations and the watermarks at the end."""
    fold = InventoryFold()
    rows: dict[Alias, dict[str, Any]] = {}
    clock: dict[int, datetime] = {}
    offsets: dict[int, int] = {}
    held: dict[Alias, bool] = {}
    watermarks: dict[tuple[str, int], datetime] = {}
    batch: list[tuple[int, LogPosition, Step, datetime]] = []

    def flush() -> None:
        pairs = [(position, at) for _, position, _, at in batch]
        times = effective_times(pairs, watermarks)
        items = []
        last: dict[int, LogPosition] = {}
        for partition, position, (kind, index, _), at in batch:
            alias = cdi(partition, index)
            last[partition] = position
            if kind == "observed":
                items.append((position, observation(alias, at, position.offset + 1)))
                held[alias] = True
            elif kind == "released":
                held[alias] = False
        plan = fold.fold(items, {p for p, _ in items}, times)
        for position in times:
            part = (position.topic, position.partition)
            if part not in watermarks or times[position] > watermarks[part]:
                watermarks[part] = times[position]
        batch_marks = {p.partition: watermarks[(TOPIC, p.partition)] for p in last.values()}
        fold.expire(plan, batch_marks, lambda lapsed: {a for a in lapsed if held.get(a)}, last)
        rows.update(plan.identities)
        for alias in plan.forgotten:
            rows.pop(alias, None)
        batch.clear()

    for i, (partition, step) in enumerate(sequence):
        clock[partition] = clock.get(partition, T0) + timedelta(hours=step[2])
        offsets[partition] = offsets.get(partition, -1) + 1
        position = LogPosition(TOPIC, partition, offsets[partition])
        batch.append((partition, position, step, clock[partition]))
        if i in cuts:
            flush()
    flush()
    return rows, held, watermarks


@settings(max_examples=150, deadline=None)
@given(
    logs=st.lists(st.lists(steps, max_size=12), min_size=2, max_size=2),
    order_a=st.lists(st.integers(0, 5), max_size=30),
    order_b=st.lists(st.integers(0, 5), max_size=30),
    cuts=st.sets(st.integers(0, 30)),
)
def test_claim_aliases_end_the_same_whatever_the_batching_and_none_lapsed_is_left(
    logs: list[list[Step]], order_a: list[int], order_b: list[int], cuts: set[int]
) -> None:
    one_by_one, held, watermarks = run(interleave(logs, order_a), set(range(30)))
    batched, _, _ = run(interleave(logs, order_b), cuts)
    assert batched == one_by_one
    for alias, row in one_by_one.items():
        partition = int(alias[0].rsplit("-", 1)[1])
        lapsed = row["last_observed_at"] < watermarks[(TOPIC, partition)] - IDENTITY_RETENTION
        assert not lapsed or held.get(alias), f"{alias} lapsed and unallocated but kept"


conflict_updates = st.lists(
    st.tuples(st.integers(0, 4), st.booleans(), st.integers(0, 24 * 30)), max_size=25
)


def upsert(table: dict[int, ConflictRow], key: int, active: bool, hours: int) -> None:
    """A conflict raised or cleared at ``hours``, as the fold does it: it knows only the active
    conflicts, so raising one that is not active starts a new row, clearing one that is not
    active writes nothing, and ``last_seen`` of an active one never moves back."""
    at = T0 + timedelta(hours=hours)
    old = table.get(key)
    if old is None or not old.active:
        if active:
            table[key] = ConflictRow("k", "n", str(key), "d", True, at, at)
        return
    table[key] = dataclasses.replace(old, active=active, last_seen=max(old.last_seen, at))


@settings(max_examples=200, deadline=None)
@given(updates=conflict_updates, cuts=st.sets(st.integers(0, 25)))
@example(
    updates=[(0, True, 0), (1, True, 169), (0, False, 0), (1, False, 0), (1, True, 0)], cuts={2}
)
def test_cleared_conflicts_pruned_after_every_batch_end_as_pruned_once(
    updates: list[tuple[int, bool, int]], cuts: set[int]
) -> None:
    newest: datetime | None = None  # the log's newest event time so far (a watermark)

    def prune(table: dict[int, ConflictRow]) -> dict[int, ConflictRow]:
        return {int(r.subject): r for r in conflicts_kept(table.values(), newest)}

    per_batch: dict[int, ConflictRow] = {}
    once: dict[int, ConflictRow] = {}
    for i, update in enumerate(updates):
        at = T0 + timedelta(hours=update[2])
        newest = at if newest is None else max(newest, at)
        upsert(per_batch, *update)
        upsert(once, *update)
        if i in cuts:
            per_batch = prune(per_batch)
    assert prune(per_batch) == prune(once)
    kept = prune(once)
    if newest is not None:
        assert all(r.active or r.last_seen >= newest - CONFLICT_RETENTION for r in kept.values())


@settings(max_examples=200, deadline=None)
@given(
    hours=st.lists(st.integers(0, 24 * 20), max_size=40),
    cuts=st.sets(st.integers(0, 40)),
    retention_hours=st.sampled_from([0, 1, 24, 24 * 7]),
)
def test_history_pruned_at_every_batch_end_as_pruned_once(
    hours: list[int], cuts: set[int], retention_hours: int
) -> None:
    retention = retention_hours * 3600.0
    times = [T0 + timedelta(hours=h) for h in hours]
    kept: list[tuple[int, datetime]] = []
    watermark = T0
    for i, at in enumerate(times):
        kept.append((i, at))
        watermark = max(watermark, at)
        if i in cuts:
            kept = [(j, t) for j, t in kept if history_kept(t, watermark, retention)]
    final = [(j, t) for j, t in kept if history_kept(t, watermark, retention)]
    once = [(j, t) for j, t in enumerate(times) if history_kept(t, watermark, retention)]
    assert final == once
