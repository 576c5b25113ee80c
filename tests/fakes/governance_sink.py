"""An in-memory governance sink (the governor's port, real: ``GovernanceStore``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from services.adapters.projection.governance_store import (
    BatchRows,
    GovernorSnapshot,
    StaleGovernorState,
)


class FakeGovernanceSink:
    """Keeps what the tables do: device and node snapshots (deleted ones removed), the fleet,
    the migration policy's workload facts, the nodes' labels and the merge's pending records
    (deleted ones removed),
        the recorded offset per topic (never moving back), quarantines upserted by id, decisions and
        commands kept once per key; fails the first ``fail`` writes; awaits ``before_commit`` once the
    rows are checked, before anything is kept (an exception from it keeps nothing). Held to
        ``GovernanceStore`` by ``tests/contracts/test_governance_sink.py``."""

    def __init__(self, fail: int = 0, error: Exception | None = None) -> None:
        self.devices: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.fleet: dict[str, Any] | None = None
        self.offsets: dict[str, int] = {}
        self.decisions: dict[tuple[int, int], dict[str, Any]] = {}
        self.quarantines: dict[str, dict[str, Any]] = {}
        self.commands: dict[str, dict[str, Any]] = {}
        self.workloads: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.labels: dict[str, dict[str, Any]] = {}
        self.pending: dict[tuple[int, int, int], dict[str, Any]] = {}
        self._last_topic: str | None = None
        self.writes: list[BatchRows] = []
        self.loads = 0
        self.fail = fail
        self.error = error or ConnectionResetError("db restarted")
        self.calls = 0

    def refuse(self, rows: BatchRows) -> None:
        """Where a test raises what the database would refuse ``rows`` with (nothing here)."""

    @property
    def offset(self) -> int | None:
        """The recorded offset of the topic written last (``None``: no write yet)."""
        return None if self._last_topic is None else self.offsets.get(self._last_topic)

    async def load(self, topic: str) -> GovernorSnapshot:
        self.loads += 1
        return GovernorSnapshot(
            devices=[self.devices[k] for k in sorted(self.devices)],
            nodes=[self.nodes[k] for k in sorted(self.nodes)],
            fleet=self.fleet,
            offset=self.offsets.get(topic),
            workloads=[
                {**self.workloads[k], "node": k[0], "resourceID": k[1]}
                for k in sorted(self.workloads)
            ],
            labels=[self.labels[k] for k in sorted(self.labels)],
            pending=[self.pending[k] for k in sorted(self.pending)],
        )

    async def write(
        self, rows: BatchRows, before_commit: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.calls += 1
        if self.calls <= self.fail:
            raise self.error
        recorded = self.offsets.get(rows.topic)
        if rows.expected_offset != recorded:
            raise StaleGovernorState(f"recorded {recorded}, expected {rows.expected_offset}")
        self.refuse(rows)
        if before_commit is not None:  # every row "written", nothing kept yet
            await before_commit()
        for key in rows.deleted_devices:
            self.devices.pop(key, None)
        for name in rows.deleted_nodes:
            self.nodes.pop(name, None)
        for wkey in rows.deleted_workloads:
            self.workloads.pop(wkey, None)
        for source in rows.deleted_pending:
            self.pending.pop(source, None)
        for row in orjson.loads(rows.pending or "[]"):
            key = (row["source_partition"], row["source_offset"], row["source_index"])
            self.pending.setdefault(key, row["snapshot"])
        for name in rows.deleted_labels:
            self.labels.pop(name, None)
        for row in orjson.loads(rows.labels or "[]"):
            self.labels[row["node"]] = row["snapshot"]
        for row in orjson.loads(rows.workloads or "[]"):
            self.workloads[(row["node"], row["resource_id"], row["pod_uid"])] = row["snapshot"]
        for row in orjson.loads(rows.devices or "[]"):
            self.devices[(row["node"], row["resource_id"])] = row["snapshot"]
        for row in orjson.loads(rows.nodes or "[]"):
            self.nodes[row["node"]] = row["snapshot"]
        self.fleet = orjson.loads(rows.fleet)[0]["snapshot"]
        for row in orjson.loads(rows.quarantines or "[]"):
            self.quarantines[row["quarantine_id"]] = row
        for row in orjson.loads(rows.decisions or "[]"):
            self.decisions.setdefault((row["seq"], row["idx"]), row["payload"])
        for row in orjson.loads(rows.commands or "[]"):
            self.commands.setdefault(row["command_id"], row)
        # Like the table's GREATEST: the recorded offset never moves back.
        self.offsets[rows.topic] = max(rows.offset, recorded if recorded is not None else -1)
        self._last_topic = rows.topic
        self.writes.append(rows)
