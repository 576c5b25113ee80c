"""The governor's state port (``streams.governor.GovernanceSink``):
:class:`~tests.fakes.governance_sink.FakeGovernanceSink` and
:class:`~services.adapters.projection.governance_store.GovernanceStore` on a fresh schema pass the
same tests.

``load``/``write`` are the port; what a write leaves in the tables that ``load`` does not return
(decisions, quarantines, commands) is read by each subclass's ``stored`` helper: the fake's dicts,
the real tables by SQL.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_store import (
    BatchRows,
    GovernanceStore,
    GovernorSnapshot,
    StaleGovernorState,
    batch_rows,
)
from services.domain.events import Health
from services.domain.governance.inputs import HealthTransition, MergeKey, PartitionWatermark
from services.domain.governance.intake import take
from services.domain.governance.machine import step
from services.domain.governance.state import GovernorState
from streams.governor import GovernanceSink
from tests.conftest import T0
from tests.fakes.governance_sink import FakeGovernanceSink
from tests.projection.test_governance_store import POLICY, fold, records, transition

TOPIC = "contract.governance"


@dataclasses.dataclass
class Stored:
    """What a sink holds beside what ``load`` returns."""

    decisions: dict[tuple[int, int], dict[str, Any]]
    quarantines: dict[str, str]
    """quarantine_id -> status"""
    commands: dict[str, bool]
    """command_id -> accepted"""


class Harness(ABC):
    """A governance sink under test and a way to read what it stored."""

    sink: GovernanceSink

    @abstractmethod
    async def stored(self) -> Stored: ...

    async def empty(self) -> Any:
        """What ``load`` returns before any write."""
        return GovernorSnapshot(devices=[], nodes=[], fleet=None, offset=None)


def snapshot_json(state: GovernorState) -> bytes:
    return orjson.dumps(state.snapshot())


def first_batch() -> tuple[GovernorState, BatchRows]:
    """A folded batch of records (devices, a node, commands, decisions), not yet cleared."""
    state = GovernorState()
    items = records()
    decisions = fold(state, items)
    return state, batch_rows(
        state, decisions, topic=TOPIC, offset=len(items) - 1, expected_offset=None
    )


def merging_state() -> tuple[GovernorState, Callable[[list[Any]], None]]:
    """A state whose event-time merge has two partitions at ``T0``, and a way to take records
    (``(record, key)`` pairs, or progress marks) into it."""
    state = GovernorState()

    def take_all(items: list[Any]) -> None:
        for item in items:
            record, key = item if isinstance(item, tuple) else (item, None)
            take(state, record, key, POLICY, step)

    take_all([PartitionWatermark(0, 2, T0), PartitionWatermark(1, 2, T0)])
    return state, take_all


def held(partition: int, seconds: float, offset: int) -> tuple[HealthTransition, MergeKey]:
    """A transition of ``partition`` at ``T0 + seconds`` with its merge key."""
    record = transition(f"GPU-{offset}", Health.HEALTHY, offset, seconds)
    return record, MergeKey(T0 + timedelta(seconds=seconds), partition, offset, 0)


class GovernanceSinkContract:
    """What the governor relies on from where its state lives. Subclasses provide ``harness``."""

    async def test_load_of_nothing_is_empty_at_offset_none(self, harness: Harness) -> None:
        empty = await harness.sink.load(TOPIC)
        assert (empty.devices, empty.nodes, empty.fleet, empty.offset) == ([], [], None, None)

    async def test_a_written_batch_loads_back_as_the_same_state(self, harness: Harness) -> None:
        state, rows = first_batch()
        await harness.sink.write(rows)
        loaded = await harness.sink.load(TOPIC)
        assert loaded.offset == rows.offset
        restored = GovernorState.restore(
            loaded.devices, loaded.nodes, loaded.fleet, POLICY.heartbeat_grace_seconds
        )
        assert snapshot_json(restored) == snapshot_json(state)
        # Ordered by (node, resource_id) and node: what the governor restores in order.
        keys = [(d["node"], d["resourceID"]) for d in loaded.devices]
        assert keys == sorted(keys) and len(keys) == 3
        assert [n["node"] for n in loaded.nodes] == ["gpu-node-a"]

    async def test_the_offset_is_per_topic(self, harness: Harness) -> None:
        _, rows = first_batch()
        await harness.sink.write(rows)
        other = await harness.sink.load(f"{TOPIC}.other")
        assert other.offset is None
        assert len(other.devices) == 3  # the snapshots are the tables', whatever the topic

    async def test_a_write_at_a_stale_offset_raises_and_writes_nothing(
        self, harness: Harness
    ) -> None:
        _, rows = first_batch()
        with pytest.raises(StaleGovernorState):
            await harness.sink.write(dataclasses.replace(rows, expected_offset=0))
        assert (await harness.sink.load(TOPIC)).offset is None

        state, rows = first_batch()
        await harness.sink.write(rows)
        state.clear_dirty()
        before = await harness.sink.load(TOPIC)
        stored_before = await harness.stored()
        later = fold(state, [transition("GPU-9", Health.UNHEALTHY, 9, 9)], start=rows.offset + 1)
        stale = batch_rows(state, later, topic=TOPIC, offset=rows.offset + 1, expected_offset=None)
        with pytest.raises(StaleGovernorState):
            await harness.sink.write(stale)
        assert await harness.sink.load(TOPIC) == before
        assert await harness.stored() == stored_before

        await harness.sink.write(dataclasses.replace(stale, expected_offset=rows.offset))
        after = await harness.sink.load(TOPIC)
        assert after.offset == rows.offset + 1 and len(after.devices) == 4

    async def test_decisions_and_commands_are_kept_once_per_key(self, harness: Harness) -> None:
        _, rows = first_batch()
        await harness.sink.write(rows)
        first = await harness.stored()
        assert len(first.decisions) == len(orjson.loads(rows.decisions or "[]"))
        assert first.commands == {"cmd-1": True, "cmd-2": False}
        # A re-fold after a crash writes the same (seq, idx) and command ids again: the first
        # rows stay, whatever the second ones hold.
        changed = [
            {**row, "payload": {**row["payload"], "changed": True}}
            for row in orjson.loads(rows.decisions or "[]")
        ]
        flipped = [
            {**row, "accepted": not row["accepted"]} for row in orjson.loads(rows.commands or "[]")
        ]
        await harness.sink.write(
            dataclasses.replace(
                rows,
                expected_offset=rows.offset,
                decisions=orjson.dumps(changed).decode(),
                commands=orjson.dumps(flipped).decode(),
            )
        )
        assert await harness.stored() == first

    async def test_quarantines_are_upserted_by_id(self, harness: Harness) -> None:
        _, rows = first_batch()
        await harness.sink.write(rows)
        (quarantine_id,) = (await harness.stored()).quarantines
        row = orjson.loads(rows.quarantines or "[]")[0]
        released = [{**row, "status": "released", "released_at": row["created_at"]}]
        await harness.sink.write(
            dataclasses.replace(
                rows, expected_offset=rows.offset, quarantines=orjson.dumps(released).decode()
            )
        )
        assert (await harness.stored()).quarantines == {quarantine_id: "released"}

    async def test_deleted_devices_and_nodes_are_gone_after_the_write(
        self, harness: Harness
    ) -> None:
        _, rows = first_batch()
        await harness.sink.write(rows)
        gone = dataclasses.replace(
            rows,
            expected_offset=rows.offset,
            offset=rows.offset + 1,
            devices=None,
            nodes=None,
            quarantines=None,
            decisions=None,
            commands=None,
            deleted_devices=[("gpu-node-a", "GPU-0")],
            deleted_nodes=["gpu-node-a"],
        )
        await harness.sink.write(gone)
        loaded = await harness.sink.load(TOPIC)
        assert sorted(d["resourceID"] for d in loaded.devices) == ["GPU-1", "GPU-2"]
        assert loaded.nodes == [] and loaded.offset == rows.offset + 1

    async def test_workload_facts_are_rows_written_when_they_change(self, harness: Harness) -> None:
        from services.domain.governance.machine import step
        from tests.governance.migration_builders import workload

        state, rows = first_batch()
        await harness.sink.write(rows)
        state.clear_dirty()
        facts = [
            workload("gpu-node-a", f"GPU-{i}", "W", f"train-{i}", "checkpointed", 5, 1, max_age=60)
            for i in range(3)
        ]
        for seq, fact in enumerate(facts, start=rows.offset + 1):
            step(state, fact, seq, POLICY)
        gone = workload("gpu-node-a", "GPU-1", "W", "train-1", "checkpointed", 6, 2, present=False)
        step(state, gone, rows.offset + 4, POLICY)
        second = batch_rows(
            state, [], topic=TOPIC, offset=rows.offset + 4, expected_offset=rows.offset
        )
        assert second.deleted_workloads == [("gpu-node-a", "GPU-1", "uid-train-1")]
        await harness.sink.write(second)
        loaded = await harness.sink.load(TOPIC)
        assert [(w["resourceID"], w["podUID"]) for w in loaded.workloads] == [
            ("GPU-0", "uid-train-0"),
            ("GPU-2", "uid-train-2"),
        ]
        restored = GovernorState.restore(
            loaded.devices,
            loaded.nodes,
            loaded.fleet,
            POLICY.heartbeat_grace_seconds,
            loaded.workloads,
        )
        assert snapshot_json(restored) == snapshot_json(state)
        # The facts are rows of their own, not in the fleet snapshot written with every batch.
        assert "workloads" not in (loaded.fleet or {}).get("migrations", {})

    async def test_pending_merge_records_are_rows_written_once_and_deleted_when_released(
        self, harness: Harness
    ) -> None:
        state, take_all = merging_state()
        take_all([held(0, 10.0, 1), held(0, 20.0, 2)])  # partition 1 is behind: both wait
        first = batch_rows(state, [], topic=TOPIC, offset=0, expected_offset=None)
        assert [
            (r["source_offset"], r["source_index"]) for r in orjson.loads(first.pending or "[]")
        ] == [
            (1, 0),
            (2, 0),
        ]
        fleet_row = orjson.loads(first.fleet)[0]["snapshot"]
        assert "pending" not in fleet_row["order"]  # not rewritten with every batch
        await harness.sink.write(first)
        state.clear_dirty()
        assert await self._restored(harness) == snapshot_json(state)

        take_all([PartitionWatermark(1, 2, T0 + timedelta(seconds=15))])  # releases the first
        second = batch_rows(state, [], topic=TOPIC, offset=1, expected_offset=0)
        assert second.pending is None  # the one still pending is written already
        assert second.deleted_pending == [(0, 1, 0)]
        await harness.sink.write(second)
        state.clear_dirty()
        loaded = await harness.sink.load(TOPIC)
        assert [p["order"]["offset"] for p in loaded.pending] == [2]
        assert await self._restored(harness) == snapshot_json(state)

    async def _restored(self, harness: Harness) -> bytes:
        loaded = await harness.sink.load(TOPIC)
        restored = GovernorState.restore(
            loaded.devices,
            loaded.nodes,
            loaded.fleet,
            POLICY.heartbeat_grace_seconds,
            loaded.workloads,
            loaded.labels,
            loaded.pending,
        )
        return snapshot_json(restored)

    async def test_the_recorded_offset_never_moves_back(self, harness: Harness) -> None:
        _, rows = first_batch()
        await harness.sink.write(rows)
        await harness.sink.write(
            dataclasses.replace(rows, expected_offset=rows.offset, offset=rows.offset - 3)
        )
        assert (await harness.sink.load(TOPIC)).offset == rows.offset

    async def test_before_commit_is_awaited_once_the_rows_are_written(
        self, harness: Harness
    ) -> None:
        _, rows = first_batch()
        seen: list[int | None] = []

        async def hook() -> None:  # the batch is not committed yet: nothing loads back
            seen.append((await harness.sink.load(TOPIC)).offset)

        await harness.sink.write(rows, hook)
        assert seen == [None]
        assert (await harness.sink.load(TOPIC)).offset == rows.offset

    async def test_an_error_from_before_commit_writes_nothing(self, harness: Harness) -> None:
        _, rows = first_batch()

        async def hook() -> None:
            raise RuntimeError("delivery failed")

        with pytest.raises(RuntimeError, match="delivery failed"):
            await harness.sink.write(rows, hook)
        assert await harness.sink.load(TOPIC) == await harness.empty()
        assert await harness.stored() == Stored({}, {}, {})

    async def test_a_stale_write_never_calls_before_commit(self, harness: Harness) -> None:
        _, rows = first_batch()
        called: list[bool] = []

        async def hook() -> None:
            called.append(True)

        with pytest.raises(StaleGovernorState):
            await harness.sink.write(dataclasses.replace(rows, expected_offset=0), hook)
        assert called == []


class FakeHarness(Harness):
    def __init__(self) -> None:
        self.fake = FakeGovernanceSink()
        self.sink = self.fake

    async def stored(self) -> Stored:
        return Stored(
            decisions=dict(self.fake.decisions),
            quarantines={k: v["status"] for k, v in self.fake.quarantines.items()},
            commands={k: v["accepted"] for k, v in self.fake.commands.items()},
        )


class StoreHarness(Harness):
    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.engine, self.schema = engine, schema
        self.sink = GovernanceStore(engine, schema)

    async def _rows(self, query: str) -> list[Any]:
        async with self.engine.connect() as conn:
            return list(await conn.execute(text(query.format(s=f'"{self.schema}"'))))

    async def stored(self) -> Stored:
        decisions = await self._rows("SELECT seq, idx, payload FROM {s}.governance_decisions")
        quarantines = await self._rows("SELECT quarantine_id, status FROM {s}.quarantines")
        commands = await self._rows("SELECT command_id, accepted FROM {s}.governance_commands")
        return Stored(
            decisions={(r.seq, r.idx): r.payload for r in decisions},
            quarantines={r.quarantine_id: r.status for r in quarantines},
            commands={r.command_id: r.accepted for r in commands},
        )


class TestFakeGovernanceSink(GovernanceSinkContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return FakeHarness()


@pytest.mark.integration
class TestGovernanceStore(GovernanceSinkContract):
    @pytest.fixture
    def harness(self, engine: AsyncEngine, fresh_schema: str) -> Harness:
        return StoreHarness(engine, fresh_schema)
