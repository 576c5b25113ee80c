"""An in-memory batch sink (the worker's ``BatchSink``, real: ``ProjectionStore.apply_batch``)."""

from __future__ import annotations

from typing import Any

from services.adapters.projection.store import BatchStats
from services.domain.batch import CommitHook, LoggedBatch
from services.domain.events import DeviceHealthObserved
from services.domain.log import LoggedEvent


class FakeSink:
    """Records batches; fails the first ``fail`` calls with ``error``; checks the table is not
    raised before the commit."""

    def __init__(self, table: Any = None, fail: int = 0, error: Exception | None = None) -> None:
        self.batches: list[list[LoggedEvent]] = []
        self.table = table
        self.fail = fail
        self.error = error or ConnectionResetError("db restarted")
        self.calls = 0
        self.table_at_write: list[dict[str, Any]] = []
        self.logged: list[LoggedBatch] = []
        self.hooks: list[CommitHook | None] = []

    async def apply_batch(
        self, batch: LoggedBatch, before_commit: CommitHook | None = None
    ) -> BatchStats:
        records = batch.records
        self.calls += 1
        self.logged.append(batch)
        self.hooks.append(before_commit)
        if self.table is not None:
            self.table_at_write.append(dict(self.table.items()))
        if self.calls <= self.fail:
            raise self.error
        self.batches.append(list(records))
        return BatchStats(applied=sum(isinstance(r.event, DeviceHealthObserved) for r in records))
