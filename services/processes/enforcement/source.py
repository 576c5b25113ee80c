"""Where the reconciler reads the quarantines from: the governance projection in PostgreSQL
(:class:`~services.adapters.projection.reads_quarantines.QuarantineReads`: active and recovering
quarantines with their device's ``source``, one consistent snapshot per read)."""

from __future__ import annotations

from typing import Protocol

from services.adapters.projection.engine import Engine, create_engine
from services.adapters.projection.reads_quarantines import QuarantineReads
from services.domain.governance.held import QuarantineRow


class QuarantineSource(Protocol):
    async def enforced(self) -> list[QuarantineRow]:
        """The active and recovering quarantines; raises when they cannot be read (never an
        empty list instead: that would delete every rule)."""
        ...


class PostgresQuarantineSource:
    """:class:`QuarantineSource` on the projection's schema ``schema``."""

    def __init__(self, engine: Engine, schema: str) -> None:
        self.engine = engine
        self.schema = schema
        self._reads = QuarantineReads(engine, schema)

    async def enforced(self) -> list[QuarantineRow]:
        return await self._reads.holding()


def make_engine(database_url: str) -> Engine:
    """A small pool with pre-ping: the reconciler's connections sit idle between passes."""
    return create_engine(database_url, pool_size=2, max_overflow=0, pre_ping=True)
