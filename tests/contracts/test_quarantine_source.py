"""The reconciler's quarantine source (``enforcement.source.QuarantineSource``):
:class:`~tests.fakes.quarantine_source.FakeSource` and
:class:`~services.processes.enforcement.source.PostgresQuarantineSource` on a fresh schema pass
the same tests.

Quarantines are written as the governor writes them (``quarantines`` upserts on
``quarantine_id``, the device's ``device_governance`` row for its source: the SQL of
``tests/kubeapi/test_enforcement.py``); the fake's harness keeps the same rows and hands the
fake the joined :class:`~services.domain.governance.held.QuarantineRow` list.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.governance.held import QuarantineRow
from services.processes.enforcement.source import PostgresQuarantineSource, QuarantineSource
from tests.fakes.quarantine_source import FakeSource
from tests.kubeapi.test_enforcement import DRIVER, T0, _governed, _quarantine, _write

DRA = f"{DRIVER}/gpu-node-a"


class Harness(ABC):
    source: QuarantineSource

    @abstractmethod
    async def write(self, *rows: dict[str, Any]) -> None:
        """Upsert ``quarantines`` rows (on ``quarantine_id``)."""

    @abstractmethod
    async def govern(self, node: str, resource_id: str, source: str) -> None:
        """A ``device_governance`` row for the device, of ``source``."""

    @abstractmethod
    def unreadable(self) -> QuarantineSource:
        """A source whose store cannot be read."""


def expected(row: dict[str, Any], source: str | None = None) -> QuarantineRow:
    return QuarantineRow(
        quarantine_id=row["quarantine_id"],
        node=row["node"],
        resource_id=row["resource_id"],
        kind=row["kind"],
        status=row["status"],
        reason=row["reason"],
        created_at=row["created_at"],
        resource_claim=row["resource_claim"],
        source=source,
    )


class QuarantineSourceContract:
    """What the reconciler relies on. Subclasses provide ``harness``."""

    async def test_nothing_written_is_nothing_enforced(self, harness: Harness) -> None:
        assert await harness.source.enforced() == []

    async def test_active_and_recovering_are_enforced_sorted_by_id_released_are_not(
        self, harness: Harness
    ) -> None:
        rows = [
            _quarantine(f"{DRA}/gpu-2", status="recovering", quarantine_id="q-3", at=5),
            _quarantine(f"{DRA}/gpu-0", quarantine_id="q-2"),
            _quarantine(f"{DRA}/gpu-1", status="released", quarantine_id="q-1", at=9),
            _quarantine("GPU-a5ced723", node="gpu-node-b", kind="manual", quarantine_id="q-0"),
        ]
        await harness.write(*rows)
        assert await harness.source.enforced() == [
            expected(rows[3]),
            expected(rows[1]),
            expected(rows[0]),
        ]
        enforced = await harness.source.enforced()
        assert enforced[0].created_at == T0 and enforced[2].created_at == T0 + timedelta(seconds=5)

    async def test_the_source_comes_from_the_device_governance_row(self, harness: Harness) -> None:
        dra = _quarantine(f"{DRA}/gpu-0", quarantine_id="q-1")
        plugin = _quarantine("GPU-a5ced723", node="gpu-node-b", quarantine_id="q-2")
        unknown = _quarantine("GPU-ffff", node="gpu-node-c", quarantine_id="q-3")
        await harness.write(dra, plugin, unknown)
        await harness.govern("gpu-node-a", f"{DRA}/gpu-0", "dra")
        await harness.govern("gpu-node-b", "GPU-a5ced723", "device-plugin")
        assert [r.source for r in await harness.source.enforced()] == ["dra", "device-plugin", None]

    async def test_a_quarantine_written_again_is_one_row_in_its_last_state(
        self, harness: Harness
    ) -> None:
        first = _quarantine(f"{DRA}/gpu-0", quarantine_id="q-1")
        await harness.write(first)
        recovering = {**first, "status": "recovering", "recovery_stage": "canary"}
        await harness.write(recovering)
        assert await harness.source.enforced() == [expected(recovering)]
        released = _quarantine(f"{DRA}/gpu-0", status="released", quarantine_id="q-1")
        await harness.write(released)
        assert await harness.source.enforced() == []

    async def test_an_unreadable_store_raises_never_an_empty_list(self, harness: Harness) -> None:
        await harness.write(_quarantine(f"{DRA}/gpu-0"))
        with pytest.raises(Exception) as raised:
            await harness.unreadable().enforced()
        assert not isinstance(raised.value, AssertionError)


class FakeHarness(Harness):
    def __init__(self) -> None:
        self.fake = FakeSource()
        self.source = self.fake
        self.rows: dict[str, dict[str, Any]] = {}
        self.sources: dict[tuple[str, str], str] = {}

    def _joined(self) -> None:
        self.fake.rows = [
            expected(r, self.sources.get((r["node"], r["resource_id"]))) for r in self.rows.values()
        ]

    async def write(self, *rows: dict[str, Any]) -> None:
        self.rows.update({r["quarantine_id"]: r for r in rows})
        self._joined()

    async def govern(self, node: str, resource_id: str, source: str) -> None:
        self.sources[(node, resource_id)] = source
        self._joined()

    def unreadable(self) -> QuarantineSource:
        return FakeSource(rows=list(self.fake.rows), error=ConnectionRefusedError("no database"))


class PostgresHarness(Harness):
    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.engine, self.schema = engine, schema
        self.source = PostgresQuarantineSource(engine, schema)

    async def write(self, *rows: dict[str, Any]) -> None:
        await _write(self.engine, self.schema, rows)

    async def govern(self, node: str, resource_id: str, source: str) -> None:
        await _governed(self.engine, self.schema, node, resource_id, source)

    def unreadable(self) -> QuarantineSource:
        return PostgresQuarantineSource(self.engine, f"{self.schema}_missing")


class TestFakeSource(QuarantineSourceContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return FakeHarness()


@pytest.mark.integration
class TestPostgresQuarantineSource(QuarantineSourceContract):
    @pytest.fixture
    def harness(self, engine: AsyncEngine, fresh_schema: str) -> Harness:
        return PostgresHarness(engine, fresh_schema)

    async def test_a_missing_schema_is_a_database_error(self, harness: Harness) -> None:
        with pytest.raises(DBAPIError):
            await harness.unreadable().enforced()
