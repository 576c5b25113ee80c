"""The store's check of the observations the worker dropped early
(:mod:`services.domain.early_drops`), inside the batch's transaction."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.batch_sql import BatchStatements
from services.adapters.projection.rows import records_from_rows
from services.domain.early_drops import EarlyDropsUnjustified, unjustified_drops
from services.domain.events import DeviceHealthObserved
from services.domain.log import LoggedEvent


async def check_early_drops(
    conn: AsyncConnection,
    sql: BatchStatements,
    dropped: Sequence[LoggedEvent],
    records: Sequence[LoggedEvent],
) -> None:
    """Raise :class:`EarlyDropsUnjustified` (the caller's transaction then rolls back) when an
    observation of ``dropped`` (after its partition's recorded offset) is neither in the
    projection nor explained by an earlier one of ``records`` (:func:`unjustified_drops`). The
    dropped devices' rows are locked like the batch's own."""
    keys = sorted(
        {r.event.device_key for r in dropped if isinstance(r.event, DeviceHealthObserved)}
    )
    params = {"nodes": [n for n, _ in keys], "ids": [i for _, i in keys]}
    result = await conn.execute(sql.lock_by_key, params)
    committed = {r.key: r.status_version for r in records_from_rows(result)}
    unexplained = unjustified_drops(dropped, records, committed)
    if unexplained:
        raise EarlyDropsUnjustified(unexplained)
