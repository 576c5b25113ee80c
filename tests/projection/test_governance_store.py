"""The governance projection: rows of a folded batch, the restore round trip, the stale check."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_store import (
    GovernanceStore,
    StaleGovernorState,
    batch_rows,
    effective_health,
)
from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import Decision
from services.domain.governance.inputs import (
    CommandAction,
    GovernanceInput,
    HealthTransition,
    OperatorCommand,
    Role,
    WatermarkAdvanced,
)
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.node_events import NodeHeartbeat
from services.domain.node_labels import NodeLabelsChanged
from tests.conftest import T0

pytestmark = pytest.mark.integration

TOPIC = "t.governance"
POLICY = GovernancePolicy(unknown_tolerance_seconds=60)


def transition(
    resource_id: str, health: Health, version: int, seconds: float, node: str = "gpu-node-a"
) -> HealthTransition:
    return HealthTransition(
        node=node,
        resource_id=resource_id,
        resource_name="nvidia.com/gpu",
        source=DeviceSource.DEVICE_PLUGIN,
        health=health,
        status_version=version,
        observed_at=T0 + timedelta(seconds=seconds),
        partition=0,
        offset=version,
        pods=("ml/train-0",),
    )


def records() -> list[GovernanceInput]:
    return [
        WatermarkAdvanced(0, 1, T0),
        transition("GPU-0", Health.HEALTHY, 1, 0),
        transition("GPU-1", Health.UNHEALTHY, 2, 1),
        transition("GPU-2", Health.UNKNOWN, 3, 2),
        NodeHeartbeat("gpu-node-a", renewed_at=T0, observed_at=T0),
        OperatorCommand(
            command_id="cmd-1",
            action=CommandAction.PAUSE,
            actor="alice",
            role=Role.OPERATOR,
            requested_at=T0 + timedelta(seconds=3),
            reason="maintenance",
            request_fingerprint="f" * 64,
        ),
        OperatorCommand(
            command_id="cmd-2",
            action=CommandAction.RESET_BREAKER,
            actor="bob",
            role=Role.VIEWER,
            requested_at=T0 + timedelta(seconds=4),
        ),
    ]


def fold(state: GovernorState, items: list[GovernanceInput], start: int = 0) -> list[Decision]:
    decisions: list[Decision] = []
    for offset, record in enumerate(items, start):
        decisions.extend(step(state, record, offset, POLICY))
    return decisions


async def rows_of(engine: AsyncEngine, schema: str, table: str, order: str) -> list[Any]:
    async with engine.connect() as conn:
        return list(await conn.execute(text(f'SELECT * FROM "{schema}".{table} ORDER BY {order}')))


async def test_a_written_batch_restores_the_same_state(
    engine: AsyncEngine, fresh_schema: str
) -> None:
    store = GovernanceStore(engine, fresh_schema)
    empty = await store.load(TOPIC)
    assert (empty.devices, empty.nodes, empty.fleet, empty.offset) == ([], [], None, None)

    state = GovernorState()
    items = records()
    decisions = fold(state, items)
    await store.write(
        batch_rows(state, decisions, topic=TOPIC, offset=len(items) - 1, expected_offset=None)
    )
    state.clear_dirty()

    loaded = await store.load(TOPIC)
    assert loaded.offset == len(items) - 1
    restored = GovernorState.restore(
        loaded.devices, loaded.nodes, loaded.fleet, POLICY.heartbeat_grace_seconds
    )
    assert orjson.dumps(restored.snapshot()) == orjson.dumps(state.snapshot())

    devices = {
        r.resource_id: r
        for r in await rows_of(engine, fresh_schema, "device_governance", "resource_id")
    }
    assert {k: (r.observed_health, r.effective_health, r.state) for k, r in devices.items()} == {
        "GPU-0": ("Healthy", "Healthy", "Available"),
        "GPU-1": ("Unhealthy", "Unhealthy", "Quarantined"),
        "GPU-2": ("Unknown", "Unknown", "UnknownTolerated"),
    }
    assert devices["GPU-1"].quarantine_id == "gpu-node-a/GPU-1@2"
    assert devices["GPU-2"].deadline == T0 + timedelta(seconds=62)
    for key, device in state.devices.items():
        assert effective_health(device).value == devices[key[1]].effective_health

    [quarantine] = await rows_of(engine, fresh_schema, "quarantines", "quarantine_id")
    assert (quarantine.quarantine_id, quarantine.status, quarantine.confirmed_fault) == (
        "gpu-node-a/GPU-1@2",
        "active",
        True,
    )
    stored = await rows_of(engine, fresh_schema, "governance_decisions", "seq, idx")
    assert [(r.seq, r.idx, r.kind) for r in stored] == [
        (d.seq, d.index, d.kind.value) for d in decisions
    ]
    assert stored[0].payload["id"] == decisions[0].decision_id
    commands = await rows_of(engine, fresh_schema, "governance_commands", "command_id")
    assert [(c.command_id, c.action, c.actor, c.accepted, c.seq) for c in commands] == [
        ("cmd-1", "pause-automation", "alice", True, 5),
        ("cmd-2", "reset-breaker", "bob", False, 6),
    ]
    assert "admin needed" in commands[1].reason
    # The request's fingerprint of an Idempotency-Key, for every API process (issue 11, item 4).
    assert [c.request_fingerprint for c in commands] == ["f" * 64, None]
    [fleet] = await rows_of(engine, fresh_schema, "governor_fleet", "id")
    assert (fleet.id, fleet.automation_paused, fleet.breaker_open) == (1, True, False)
    assert fleet.watermark == T0
    [node] = await rows_of(engine, fresh_schema, "governor_nodes", "node")
    assert (node.node, node.last_heartbeat_at, node.heartbeat_lost) == ("gpu-node-a", T0, False)


async def test_a_write_from_a_stale_state_is_refused_and_rolled_back(
    engine: AsyncEngine, fresh_schema: str
) -> None:
    store = GovernanceStore(engine, fresh_schema)
    state = GovernorState()
    decisions = fold(state, records()[:2])
    await store.write(batch_rows(state, decisions, topic=TOPIC, offset=1, expected_offset=None))
    state.clear_dirty()

    later = fold(state, [transition("GPU-9", Health.UNHEALTHY, 9, 9)], start=2)
    with pytest.raises(StaleGovernorState, match="recorded offset 1"):
        await store.write(batch_rows(state, later, topic=TOPIC, offset=2, expected_offset=0))
    assert len(await rows_of(engine, fresh_schema, "quarantines", "quarantine_id")) == 0
    assert (await store.load(TOPIC)).offset == 1

    await store.write(batch_rows(state, later, topic=TOPIC, offset=2, expected_offset=1))
    assert len(await rows_of(engine, fresh_schema, "quarantines", "quarantine_id")) == 1
    # Decisions already stored are kept (a re-fold after a crash writes the same ids).
    await store.write(batch_rows(state, later, topic=TOPIC, offset=2, expected_offset=2))
    assert len(await rows_of(engine, fresh_schema, "governance_decisions", "seq")) == len(
        decisions
    ) + len(later)


async def test_node_labels_are_their_nodes_rows_and_restore_in_either_layout(
    engine: AsyncEngine, fresh_schema: str
) -> None:
    store = GovernanceStore(engine, fresh_schema)
    state = GovernorState()
    items: list[GovernanceInput] = [
        WatermarkAdvanced(0, 1, T0),
        NodeLabelsChanged("node-a", (("pool", "east"), ("zone", "a")), T0),
        NodeLabelsChanged("node-b", (("pool", "west"),), T0),
    ]
    fold(state, items)
    await store.write(batch_rows(state, [], topic=TOPIC, offset=2, expected_offset=None))
    state.clear_dirty()
    fleet_sql = f'SELECT snapshot::text FROM "{fresh_schema}".governor_fleet'
    async with engine.connect() as conn:
        fleet_text = (await conn.execute(text(fleet_sql))).scalar_one()
    assert "nodeLabels" not in fleet_text and "east" not in fleet_text
    labels = await rows_of(engine, fresh_schema, "governor_node_labels", "node")
    assert [(r.node, r.snapshot["labels"]) for r in labels] == [
        ("node-a", {"pool": "east", "zone": "a"}),
        ("node-b", {"pool": "west"}),
    ]

    def restored_of(loaded: Any) -> GovernorState:
        return GovernorState.restore(
            loaded.devices, loaded.nodes, loaded.fleet, 60, loaded.workloads, loaded.labels
        )

    restored = restored_of(await store.load(TOPIC))
    assert orjson.dumps(restored.snapshot()) == orjson.dumps(state.snapshot())

    # The layout of the previous version: the labels in the fleet's row, no label rows.
    old = {**orjson.loads(fleet_text)}
    old["adoption"] = {
        **old.get("adoption", {}),
        "nodeLabels": [[r.node, r.snapshot["observedAt"], r.snapshot["labels"]] for r in labels],
    }
    async with engine.begin() as conn:
        await conn.execute(text(f'DELETE FROM "{fresh_schema}".governor_node_labels'))
        await conn.execute(
            text(f'UPDATE "{fresh_schema}".governor_fleet SET snapshot = CAST(:s AS jsonb)'),
            {"s": orjson.dumps(old).decode()},
        )
    restored = restored_of(await store.load(TOPIC))
    assert orjson.dumps(restored.snapshot()) == orjson.dumps(state.snapshot())
    await store.write(batch_rows(restored, [], topic=TOPIC, offset=3, expected_offset=2))
    moved = await rows_of(engine, fresh_schema, "governor_node_labels", "node")
    assert [(r.node, r.snapshot) for r in moved] == [(r.node, r.snapshot) for r in labels]
    async with engine.connect() as conn:
        assert "nodeLabels" not in (await conn.execute(text(fleet_sql))).scalar_one()
