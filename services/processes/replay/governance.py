"""Rebuild the governance projection from the governance topic: ``devicestate replay --governance``.

Reads the governance topic's one partition from offset 0 up to the end offset captured at the start
(no consumer group, nothing committed), folds every record through the same pure
:func:`~services.domain.governance.machine.step` as the governor, with the same policy
(``DEVICESTATE_*`` settings), from an empty state, and writes the rows with the governor's own
writer (:class:`~services.adapters.projection.governance_store.GovernanceStore`) into a fresh schema. Records
that do not decode are counted and skipped (the governor dead-lettered them already, and folded
nothing for them either). A ``ForwardedBatch`` (issue 12) is unpacked and its entries taken in
order, as the governor takes them (:mod:`services.domain.governance.input_batch`). No decision is
published.

The folds the live governor left out because the database refused their rows (issue 11 item 3:
dead letters of stage ``governor-write``) are left out here too: the dead-letter topic is read
first (:func:`refused_folds`) and the same folds skipped
(:class:`~services.domain.governance.fold_filter.FoldFilter`), so the replay folds the same log
minus the same records, whatever its own database would accept.

The fold has no wall clock, so the rows equal the live governor's whatever the batch boundaries
or restarts were: ``--verify`` diffs ``device_governance``, ``quarantines`` and
``governance_decisions`` with the live schema (the governor should have caught up).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from services.adapters.kafka.headers import record_type
from services.adapters.kafka.reader import TopicSnapshot
from services.adapters.projection.engine import Engine
from services.adapters.projection.governance_store import GovernanceStore, batch_rows
from services.adapters.projection.migrate import migrate
from services.adapters.projection.schema_admin import drop_schema, schema_exists
from services.adapters.projection.tables import check_schema_name
from services.domain.governance.decisions import Decision
from services.domain.governance.fold_filter import (
    REFUSED_STAGE,
    FoldFilter,
    FoldId,
    refused_fold,
)
from services.domain.governance.input_batch import unpack
from services.domain.governance.intake import StepFn, take
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.processes.replay.dead_letters import dead_letters
from services.processes.replay.run import REPLAY_CLIENT_ID, ReplayError, topic_partitions
from services.runtime.config import ReplayProcessSettings


@dataclass(slots=True)
class GovernanceReplaySummary:
    """What a governance replay did."""

    schema: str
    total: int = 0
    """Records between the beginning and the end offset captured at the start."""
    read: int = 0
    entries: int = 0
    """Forwarded records and others taken (a ``ForwardedBatch`` counts its entries)."""
    undecodable: int = 0
    """Records, and entries of a ``ForwardedBatch``, that did not decode."""
    refused: int = 0
    """Folds left out: the live governor dead-lettered them (the database refused their rows)."""
    decisions: int = 0
    batches: int = 0
    elapsed: float = 0.0
    devices: int = 0
    quarantines: int = 0
    end_offset: int = 0

    def line(self) -> str:
        """The one-line summary the CLI prints."""
        rate = self.read / self.elapsed if self.elapsed > 0 else 0.0
        return (
            f"replayed {self.read} governance records ({self.entries} entries) into schema "
            f"{self.schema}: decisions "
            f"{self.decisions}, devices {self.devices}, quarantines {self.quarantines}, "
            f"undecodable {self.undecodable}, refused {self.refused}; {self.batches} batches in {self.elapsed:.2f} s "
            f"({rate:,.0f} records/s)"
        )


async def read_governance_log(
    bootstrap_servers: str,
    topic: str,
    *,
    batch_size: int = 5000,
    on_ready: Callable[[int, int], None] | None = None,
) -> AsyncIterator[list[tuple[int, bytes | None, str | None]]]:
    """Yield ``(offset, value, type)`` lists (``type``: what the record's type header names,
    ``None`` without one) of partition 0 from the beginning up to the end offset
    captured at the start; ``on_ready(begin, end)`` is called first. Raises :class:`ReplayError`
    when the topic does not exist or has more than one partition."""
    partitions = await topic_partitions(bootstrap_servers, topic)
    if partitions != [0]:
        raise ReplayError(f"governance topic {topic!r} must have one partition, has {partitions}")
    async with TopicSnapshot(
        bootstrap_servers, topic, [0], client_id=REPLAY_CLIENT_ID, max_poll_records=batch_size
    ) as snapshot:
        [tp] = snapshot.partitions
        if on_ready is not None:
            on_ready(snapshot.begin[tp], snapshot.end[tp])
        while not snapshot.done:
            fetched = await snapshot.fetch(batch_size, timeout_ms=1000)
            batch = [(m.offset, m.value, record_type(m.headers)) for m in fetched.get(tp, [])]
            if batch:
                yield batch


async def refused_folds(settings: ReplayProcessSettings) -> set[FoldId]:
    """The folds the live governor left out (:func:`~services.domain.governance.fold_filter.
    refused_fold` of the dead letters of stage ``governor-write``); empty without a dead-letter
    topic."""
    topic = settings.dead_letter_topic
    letters = await dead_letters(settings.kafka_bootstrap_servers, topic, REFUSED_STAGE)
    folds = (refused_fold(REFUSED_STAGE, s, v, settings.governance_topic) for s, v in letters)
    return {which for which in folds if which is not None}


async def replay_governance(
    settings: ReplayProcessSettings,
    *,
    engine: Engine,
    database_url: str,
    schema: str,
    batch_size: int = 5000,
    progress: Callable[[int, int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    step: StepFn | None = None,
) -> GovernanceReplaySummary:
    """Fold ``settings.governance_topic`` from offset 0 into the new schema ``schema``.

    The schema must not exist (it is created and migrated; dropped again if the replay fails).
    Raises :class:`ReplayError` for a missing topic or an existing schema.
    """
    check_schema_name(schema)
    topic = settings.governance_topic
    await topic_partitions(settings.kafka_bootstrap_servers, topic)  # fail early
    if await schema_exists(engine, schema):
        raise ReplayError(f"schema {schema!r} already exists; pick another name or drop it")
    await migrate(database_url, schema)
    try:
        return await _fold(settings, engine, schema, batch_size, progress, on_start, step)
    except BaseException:
        await drop_schema(engine, schema)
        raise


async def _fold(
    settings: ReplayProcessSettings,
    engine: Engine,
    schema: str,
    batch_size: int,
    progress: Callable[[int, int], None] | None,
    on_start: Callable[[int], None] | None,
    step: StepFn | None,
) -> GovernanceReplaySummary:
    if step is None:
        from services.domain.governance.machine import step as machine_step

        step = machine_step
    policy = GovernancePolicy.from_settings(settings)
    refused = await refused_folds(settings)
    folds = FoldFilter(dict.fromkeys(refused, "refused by the live projection"))
    step = folds.guard(step)
    store = GovernanceStore(engine, schema)
    state = GovernorState()
    summary = GovernanceReplaySummary(schema=schema)
    topic = settings.governance_topic
    started = time.perf_counter()
    recorded: int | None = None

    def ready(begin: int, end: int) -> None:
        summary.total, summary.end_offset = end - begin, end
        if on_start is not None:
            on_start(summary.total)

    async for batch in read_governance_log(
        settings.kafka_bootstrap_servers, topic, batch_size=batch_size, on_ready=ready
    ):
        decisions: list[Decision] = []
        for offset, value, kind in batch:
            summary.read += 1
            try:
                if value is None:
                    raise ValueError("record has no value")
                unpacked = unpack(value, kind)
            except Exception:
                summary.undecodable += 1
                continue
            summary.undecodable += len(unpacked.bad)  # entries the governor dead-lettered
            summary.entries += len(unpacked.entries)
            folds.offset = offset
            for record, key in unpacked.entries:  # in order, as if each were a record
                for folded in take(state, record, key, policy, step):
                    decisions.extend(folded.decisions)
        last = batch[-1][0]
        await store.write(
            batch_rows(state, decisions, topic=topic, offset=last, expected_offset=recorded)
        )
        state.clear_dirty()
        recorded = last
        summary.decisions += len(decisions)
        summary.batches += 1
        if progress is not None:
            progress(summary.read, summary.total)
    summary.refused = len(folds.left_out)
    summary.devices = len(state.devices)
    summary.quarantines = sum(1 for d in state.devices.values() if d.quarantine is not None)
    summary.elapsed = time.perf_counter() - started
    return summary


async def verify_governance(engine: Engine, live_schema: str, replay_schema: str) -> list[str]:
    """Differences in ``device_governance``, ``quarantines`` and ``governance_decisions`` between
    the live schema and the replayed one (empty: identical)."""
    from services.adapters.projection.compare import GOVERNANCE_COMPARED_TABLES, diff_projections

    differences: list[str] = await diff_projections(
        engine, live_schema, replay_schema, GOVERNANCE_COMPARED_TABLES
    )
    return differences
