"""Reads of the workload migrations (issue 13): the governor's ``Migration*`` decisions
(``governance_decisions``; incident ``migration/<id>``), each carrying the migration's view after
it (:func:`services.domain.migration.outcomes.view`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson
from sqlalchemy import Executable, select
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import governance_decisions, migration_evidence
from services.adapters.projection.tables import in_schema
from services.domain.migration.outcomes import OutcomeKind

VIEW_KINDS: Final = tuple(
    k.value for k in OutcomeKind if k not in (OutcomeKind.REPORT_REJECTED, OutcomeKind.LEASE_DENIED)
)
"""Decision kinds that change a migration (a refusal changes nothing, and one about an unknown
ID carries no view)."""


@dataclass(frozen=True, slots=True)
class MigrationDecision:
    seq: int
    idx: int
    kind: str
    at: datetime
    summary: str
    details: dict[str, Any]


def _payload(value: Any) -> dict[str, Any]:
    obj = orjson.loads(value) if isinstance(value, str | bytes) else value
    return dict(obj) if isinstance(obj, dict) else {}


class MigrationReads:
    """Read helpers on the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)

    async def _fetch(self, stmt: Executable) -> list[Any]:
        async with self._engine.connect() as conn:
            return list(await conn.execute(stmt, execution_options=self._options))

    async def latest(self, phase: str | None, limit: int) -> list[MigrationDecision]:
        """The latest decision of each migration (at most ``limit``, newest first), of the
        migrations in ``phase`` when given."""
        d = governance_decisions.c
        last = (
            select(d.seq, d.idx, d.kind, d.at, d.payload)
            .where(d.kind.in_(VIEW_KINDS), d.incident.like("migration/%"))
            .ext(distinct_on(d.incident))
            .order_by(d.incident, d.seq.desc(), d.idx.desc())
            .subquery()
        )
        stmt = select(last)
        if phase is not None:
            stmt = stmt.where(last.c.payload["details"]["phase"].astext == phase)
        stmt = stmt.order_by(last.c.seq.desc(), last.c.idx.desc()).limit(limit)
        return [self._decision(r) for r in await self._fetch(stmt)]

    async def history(self, migration_id: str) -> list[MigrationDecision]:
        """Every decision about ``migration_id``, oldest first (refusals included)."""
        d = governance_decisions.c
        stmt = (
            select(d.seq, d.idx, d.kind, d.at, d.payload)
            .where(
                d.kind.in_([k.value for k in OutcomeKind]),
                d.incident == f"migration/{migration_id}",
            )
            .order_by(d.seq, d.idx)
        )
        return [self._decision(r) for r in await self._fetch(stmt)]

    async def evidence(self, migration_id: str) -> list[dict[str, Any]]:
        """The stored evidence of ``migration_id`` (``migration_evidence`` rows as dicts, column
        names as keys), oldest first; empty when none is stored."""
        e = migration_evidence.c
        stmt = (
            select(migration_evidence)
            .where(e.migration_id == migration_id)
            .order_by(e.reported_at, e.namespace, e.pod_name, e.pod_uid)
        )
        rows = [dict(r._mapping) for r in await self._fetch(stmt)]
        for row in rows:
            row["status"] = _payload(row["status"])
        return rows

    @staticmethod
    def _decision(row: Any) -> MigrationDecision:
        payload = _payload(row.payload)
        return MigrationDecision(
            seq=int(row.seq),
            idx=int(row.idx),
            kind=str(row.kind),
            at=row.at,
            summary=str(payload.get("summary") or ""),
            details=dict(payload.get("details") or {}),
        )
