"""Reads of the DRA-against-plugin comparison report (issue 16 item 5): the rows
:func:`services.domain.adoption.report.build_report` computes from, as plain records
(:mod:`services.domain.adoption.report_rows`): ``pod_lifecycle_stages``, ``device_history``
joined with ``devices``, ``pod_workloads``, ``dra_failures``, and the health topic's event time (the newest
``partition_progress.last_event_at``). What they mean is computed in the domain."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Executable, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.failure_tables import dra_failures
from services.adapters.projection.lifecycle_tables import pod_lifecycle_stages
from services.adapters.projection.tables import (
    device_history,
    devices,
    in_schema,
    partition_progress,
)
from services.adapters.projection.workload_tables import pod_workloads
from services.domain.adoption.report_rows import FailureRow, HistoryRow, StageRow, WorkloadRow


class AdoptionReportReads:
    """Read helpers on the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)

    async def _fetch(self, stmt: Executable) -> list[Any]:
        async with self._engine.connect() as conn:
            return list(await conn.execute(stmt, execution_options=self._options))

    async def event_time(self) -> datetime | None:
        """The health topic's event time (UTC): the newest partition watermark, ``None`` before
        the worker wrote a batch."""
        p = partition_progress.c
        rows = await self._fetch(select(func.max(p.last_event_at)))
        return rows[0][0] if rows else None

    async def stages(self, classes: Iterable[str], until: datetime) -> list[StageRow]:
        """The stage rows of ``classes`` observed at or before ``until`` (the domain applies the
        window; rows before it still name a Pod's class for its device-hours)."""
        s = pod_lifecycle_stages.c
        rows = await self._fetch(
            select(s.pod_uid, s.node, s.stage, s.device_class, s.path, s.seconds, s.observed_at)
            .where(s.device_class.in_(sorted(set(classes))), s.observed_at <= until)
            .order_by(s.pod_uid, s.stage, s.device_class, s.path, s.claim_uid)
        )
        return [StageRow(*r) for r in rows]

    async def ready_stages(self, since: datetime, until: datetime) -> list[StageRow]:
        """The ``pod_ready`` rows (bound-to-Ready) observed in ``[since, until]`` (UTC), of
        every class and path (the gate's ``ready-latency``, on read)."""
        s = pod_lifecycle_stages.c
        rows = await self._fetch(
            select(s.pod_uid, s.node, s.stage, s.device_class, s.path, s.seconds, s.observed_at)
            .where(s.stage == "pod_ready", s.observed_at >= since, s.observed_at <= until)
            .order_by(s.pod_uid, s.device_class, s.path, s.claim_uid)
        )
        return [StageRow(*r) for r in rows]

    async def history(self, since: datetime, until: datetime) -> list[HistoryRow]:
        """``device_history`` rows observed in ``[since, until]`` with their device's source and
        resource name, in log order per device (observed time, then offset)."""
        h, d = device_history.c, devices.c
        rows = await self._fetch(
            select(
                h.node, h.resource_id, h.kind, h.pod_uid, h.observed_at, d.source, d.resource_name
            )
            .join(devices, (d.node == h.node) & (d.resource_id == h.resource_id))
            .where(h.observed_at >= since, h.observed_at <= until, h.frozen.is_(False))
            .order_by(h.node, h.resource_id, h.observed_at, h.topic, h.partition, h.offset)
        )
        return [HistoryRow(*r) for r in rows]

    async def workloads(self, pod_uids: Iterable[str]) -> list[WorkloadRow]:
        """The ``pod_workloads`` rows of ``pod_uids``."""
        uids = sorted(set(pod_uids))
        if not uids:
            return []
        w = pod_workloads.c
        rows = await self._fetch(
            select(w.pod_uid, w.workload_uid, w.workload_kind).where(w.pod_uid.in_(uids))
        )
        return [WorkloadRow(*r) for r in rows]

    async def failures(self, since: datetime, until: datetime) -> list[FailureRow]:
        """The ``dra_failures`` rows observed in ``[since, until]`` (first observed at or before
        ``until``, last at or after ``since``), by ``source_uid``; the domain picks the reasons
        that count (:mod:`services.domain.adoption.report_failures`)."""
        f = dra_failures.c
        rows = await self._fetch(
            select(f.pod_uid, f.node, f.reason, f.failure_class, f.first_observed_at, f.observed_at)
            .where(f.first_observed_at <= until, f.observed_at >= since)
            .order_by(f.source_uid)
        )
        return [FailureRow(*r) for r in rows]
