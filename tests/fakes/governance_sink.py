"""An in-memory governance sink (the governor's port, real: ``GovernanceStore``)."""

from __future__ import annotations

from typing import Any

import orjson

from services.adapters.projection.governance_store import (
    BatchRows,
    GovernorSnapshot,
    StaleGovernorState,
)


class FakeGovernanceSink:
    """Keeps the snapshots and the offset like the tables; fails the first ``fail`` writes."""

    def __init__(self, fail: int = 0, error: Exception | None = None) -> None:
        self.devices: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.fleet: dict[str, Any] | None = None
        self.offset: int | None = None
        self.decisions: dict[tuple[int, int], dict[str, Any]] = {}
        self.quarantines: dict[str, dict[str, Any]] = {}
        self.writes: list[BatchRows] = []
        self.loads = 0
        self.fail = fail
        self.error = error or ConnectionResetError("db restarted")
        self.calls = 0

    async def load(self, topic: str) -> GovernorSnapshot:
        self.loads += 1
        return GovernorSnapshot(
            devices=[self.devices[k] for k in sorted(self.devices)],
            nodes=[self.nodes[k] for k in sorted(self.nodes)],
            fleet=self.fleet,
            offset=self.offset,
        )

    async def write(self, rows: BatchRows) -> None:
        self.calls += 1
        if self.calls <= self.fail:
            raise self.error
        if rows.expected_offset != self.offset:
            raise StaleGovernorState(f"recorded {self.offset}, expected {rows.expected_offset}")
        for row in orjson.loads(rows.devices or "[]"):
            self.devices[(row["node"], row["resource_id"])] = row["snapshot"]
        for row in orjson.loads(rows.nodes or "[]"):
            self.nodes[row["node"]] = row["snapshot"]
        self.fleet = orjson.loads(rows.fleet)[0]["snapshot"]
        for row in orjson.loads(rows.quarantines or "[]"):
            self.quarantines[row["quarantine_id"]] = row
        for row in orjson.loads(rows.decisions or "[]"):
            self.decisions.setdefault((row["seq"], row["idx"]), row["payload"])
        self.offset = rows.offset
        self.writes.append(rows)
