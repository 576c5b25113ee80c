"""An in-memory quarantine source (the reconciler's ``QuarantineSource``, real:
``PostgresQuarantineSource``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeSource:
    """:class:`~services.processes.enforcement.source.QuarantineSource` over a list (``error``: raised)."""

    rows: list[Any] = field(default_factory=list)
    error: Exception | None = None
    reads: int = 0

    async def enforced(self) -> list[Any]:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return [r for r in self.rows if r.status in ("active", "recovering")]
