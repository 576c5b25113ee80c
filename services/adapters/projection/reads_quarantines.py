"""Where the reconciler reads the quarantines from: the governance projection in PostgreSQL.

``quarantines`` rows with a status that still holds the device (``active``, ``recovering``:
:data:`~services.domain.governance.held.HOLDING_STATUSES`), each with its device's ``source`` from
``device_governance`` (same ``(node, resource_id)``; ``None`` without a row). Read in one
statement, so a reconcile sees one consistent snapshot of what the governor committed.
"""

from __future__ import annotations

from sqlalchemy import and_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import device_governance, quarantines
from services.adapters.projection.tables import in_schema
from services.domain.governance.held import HOLDING_STATUSES, QuarantineRow


class QuarantineReads:
    """The holding quarantines of the projection's schema ``schema``, through ``engine``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.engine = engine
        self.schema = schema
        q, d = quarantines, device_governance
        self._statement = (
            select(
                q.c.quarantine_id,
                q.c.node,
                q.c.resource_id,
                q.c.kind,
                q.c.status,
                q.c.reason,
                q.c.created_at,
                q.c.resource_claim,
                d.c.source,
            )
            .select_from(
                q.outerjoin(d, and_(d.c.node == q.c.node, d.c.resource_id == q.c.resource_id))
            )
            .where(q.c.status.in_(HOLDING_STATUSES))
            .order_by(q.c.quarantine_id)
        )

    async def holding(self) -> list[QuarantineRow]:
        """The active and recovering quarantines, sorted by ID; raises SQLAlchemy's
        ``DBAPIError`` family when they cannot be read (never an empty list instead)."""
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(**in_schema(self.schema))
            result = await conn.execute(self._statement)
            return [
                QuarantineRow(
                    quarantine_id=row.quarantine_id,
                    node=row.node,
                    resource_id=row.resource_id,
                    kind=row.kind,
                    status=row.status,
                    reason=row.reason,
                    created_at=row.created_at,
                    resource_claim=row.resource_claim,
                    source=row.source,
                )
                for row in result
            ]
