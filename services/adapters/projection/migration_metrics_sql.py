"""The decisions the migration metrics read (issue 13 item 5): the governor's quarantine and
``Migration*`` decisions of ``governance_decisions`` in log order, reduced to
:class:`~services.domain.migration.metrics.MigrationFact` (the fold itself is in the domain,
:mod:`services.domain.migration.metrics`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import governance_decisions, governor_fleet
from services.adapters.projection.tables import in_schema
from services.domain.migration.metrics import FACT_KINDS, MigrationFact, namespace_of

_PREFIX = "migration/"


class MigrationMetricReads:
    """Read helper on the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)

    async def facts(self) -> tuple[list[MigrationFact], datetime | None]:
        """Every decision of :data:`FACT_KINDS`, oldest first (``seq``, ``idx``), and the
        governor's watermark (``governor_fleet``; None before the governor wrote it), read in
        one REPEATABLE READ snapshot. Raises SQLAlchemy's ``DBAPIError`` when the database
        cannot answer (also while the tables do not exist)."""
        d = governance_decisions.c
        details = d.payload["details"]
        stmt = (
            select(
                d.kind,
                d.at,
                d.node,
                d.resource_id,
                d.incident,
                details["reason"].astext.label("reason"),
                details["waitingFor"].astext.label("waiting_for"),
                details["pods"][0].astext.label("pod"),
            )
            .where(d.kind.in_(FACT_KINDS))
            .order_by(d.seq, d.idx)
        )
        async with self._engine.begin() as conn:
            await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            rows = list(await conn.execute(stmt, execution_options=self._options))
            fleet = select(governor_fleet.c.watermark)
            watermark = (await conn.execute(fleet, execution_options=self._options)).scalar()
        return [self._fact(r) for r in rows], watermark

    @staticmethod
    def _fact(row: Any) -> MigrationFact:
        incident = str(row.incident or "")
        migration = str(row.kind).startswith("Migration") and incident.startswith(_PREFIX)
        return MigrationFact(
            kind=str(row.kind),
            at=row.at,
            node=str(row.node or ""),
            resource_id=str(row.resource_id or ""),
            migration_id=incident.removeprefix(_PREFIX) if migration else "",
            namespace=namespace_of(row.pod),
            reason=str(row.reason or ""),
            waiting_for=str(row.waiting_for or ""),
        )
