"""The decisions the migration metrics read (issue 13 item 5): the governor's quarantine and
``Migration*`` decisions of ``governance_decisions`` in log order, reduced to
:class:`~services.domain.migration.metrics.MigrationFact` (the fold itself is in the domain,
:mod:`services.domain.migration.metrics`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, select, text, tuple_
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

    async def facts(
        self, after: tuple[int, int] | None = None
    ) -> tuple[list[MigrationFact], tuple[int, int] | None, datetime | None, bool]:
        """The decisions of :data:`FACT_KINDS` after position ``after`` (``(seq, idx)`` of
        ``governance_decisions``; None: from the start), oldest first, read in one REPEATABLE
        READ snapshot with the governor's watermark (``governor_fleet``; None before the
        governor wrote it). Returns (facts, the position of the last one read or ``after`` when
        there is none, watermark, whether the table is behind ``after``: rebuilt or emptied
        since, so the caller starts again from None). Raises SQLAlchemy's ``DBAPIError`` when
        the database cannot answer (also while the tables do not exist)."""
        d = governance_decisions.c
        details = d.payload["details"]
        stmt = select(
            d.seq,
            d.idx,
            d.kind,
            d.at,
            d.node,
            d.resource_id,
            d.incident,
            details["reason"].astext.label("reason"),
            details["waitingFor"].astext.label("waiting_for"),
            details["pods"][0].astext.label("pod"),
        ).where(d.kind.in_(FACT_KINDS))
        if after is not None:
            stmt = stmt.where(tuple_(d.seq, d.idx) > tuple_(literal(after[0]), literal(after[1])))
        stmt = stmt.order_by(d.seq, d.idx)
        async with self._engine.begin() as conn:
            await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            o = self._options
            behind = False
            if after is not None:
                newest = select(func.max(d.seq))
                top = (await conn.execute(newest, execution_options=o)).scalar()
                behind = top is None or int(top) < after[0]
            rows = [] if behind else list(await conn.execute(stmt, execution_options=o))
            fleet = select(governor_fleet.c.watermark)
            watermark = (await conn.execute(fleet, execution_options=o)).scalar()
        cursor = (int(rows[-1].seq), int(rows[-1].idx)) if rows else after
        return [self._fact(r) for r in rows], cursor, watermark, behind

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
