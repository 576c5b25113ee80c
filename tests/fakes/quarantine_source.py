"""An in-memory quarantine source (the reconciler's ``QuarantineSource``, real:
``PostgresQuarantineSource``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.domain.governance.held import HOLDING_STATUSES


@dataclass
class FakeSource:
    """:class:`~services.processes.enforcement.source.QuarantineSource` over a list of
    :class:`~services.domain.governance.held.QuarantineRow` (``error``: raised by every read):
    the holding ones (active, recovering), sorted by ID as the real source reads them."""

    rows: list[Any] = field(default_factory=list)
    error: Exception | None = None
    reads: int = 0

    async def enforced(self) -> list[Any]:
        self.reads += 1
        if self.error is not None:
            raise self.error
        holding = [r for r in self.rows if r.status in HOLDING_STATUSES]
        return sorted(holding, key=lambda r: r.quarantine_id)
