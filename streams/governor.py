"""The governor agent: folds the governance topic through the pure state machine (issue 3).

The governance topic has ONE partition (a total order); the agent reads it in batches
(``stream.take_events``) in the same Faust app as the health agent. Per batch:

1. on the first batch, or when the batch does not follow what the state was built from (the
   partition moved between workers), the state is (re)loaded from PostgreSQL (the device, node
   and fleet snapshots, and the topic's recorded offset in ``partition_progress``); records at or
   before that offset are skipped (already folded);
2. each record is decoded (:func:`~services.domain.governance.input_batch.unpack`, told the
   type its ``devicestate-type`` header names; one that does not decode, or whose body is of
   another type than its header says, goes to the dead-letter topic, stage ``governor-decode``)
   into its entries (one for a single record, several for a ``ForwardedBatch``; an entry that
   does not decode is dead-lettered alone, same stage), and each entry taken in order
   (:func:`~services.domain.governance.intake.take`: the event-time merge, then ``step`` for
   each record it releases, numbered by the decisions' ``seq``);
3. ONE PostgreSQL transaction writes the touched rows, the decisions, the operator commands and
   the topic's progress (:class:`~services.adapters.projection.governance_store.GovernanceStore`);
   once they are written, just before the commit, the decisions are sent to the decisions topic
   (their kind in the type header) and their delivery awaited. Retried on transient errors like
   the health agent's writes; then ``state.clear_dirty()``, then the acks.

A crash anywhere before the commit leaves the offsets unacknowledged and the progress unchanged: the
next worker restores the last committed state and folds the same records again, so it makes the
same decisions (same ids, ``<seq>.<index>``; consumers of the decisions topic deduplicate by id).
Rows the database refuses (a data error, a constraint) send no decision: the fold that makes them
is found (:mod:`streams.poison`), dead-lettered (stage ``governor-write``, the database's error)
and left out, and the batch folded again from its starting state without it. Any other batch
that cannot be written stops the worker (``on_fatal``), like the health agent's. Dead letters:
:mod:`streams.deadletter`; gauges and counters: :mod:`streams.governor_metrics`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import structlog

from services.adapters.kafka.headers import record_type, type_headers
from services.adapters.projection.errors import refusal_reason
from services.adapters.projection.governance_store import (
    BatchRows,
    GovernorSnapshot,
    StaleGovernorState,
    batch_rows,
)
from services.domain.governance.decisions import Decision, encode_decision
from services.domain.governance.fold_filter import REFUSED_STAGE, FoldFilter, FoldId, fold_id
from services.domain.governance.input_batch import unpack
from services.domain.governance.intake import Folded, StepFn, start_sequence, take
from services.domain.governance.machine import refusal
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.runtime.config import WorkerProcessSettings
from streams.batchwrite import BatchNotWritten, BatchWriter, is_retriable, write_grace_seconds
from streams.deadletter import OncePerBatch
from streams.governor_metrics import GovernorGauges, record_batch
from streams.metrics import WorkerMetrics
from streams.poison import Tried, is_poison, refused_item

log = structlog.get_logger(__name__)

DEAD_LETTER_STAGE: Final = "governor-decode"
"""``devicestate-stage`` header of the governor's dead letters."""
CEILING_STAGE: Final = "governor-device-ceiling"
"""``devicestate-stage`` of a transition refused by ``max_devices_per_node``
(:func:`~services.domain.governance.machine.refusal`); it is still folded, so the node's one
data-quality decision is made as in a replay."""


def machine_step() -> StepFn:
    """The real state machine's ``step`` (imported on first use)."""
    from services.domain.governance.machine import step

    fn: StepFn = step
    return fn


class GovernanceSink(Protocol):
    """Where the governor's state lives: :class:`~services.adapters.projection.governance_store.
    GovernanceStore`, or a fake in unit tests."""

    def load(self, topic: str) -> Awaitable[GovernorSnapshot]: ...

    def write(
        self, rows: BatchRows, before_commit: Callable[[], Awaitable[None]] | None = None
    ) -> Awaitable[None]: ...


DecisionSender = Callable[[Sequence[tuple[bytes, bytes, str]]], Awaitable[None]]
"""Sends ``(key, value, type)`` decisions (type: the decision's kind, for the type header)."""


@dataclass(slots=True)
class FoldResult:
    """What folding one batch did (before it is written)."""

    decisions: list[Decision] = field(default_factory=list)
    folded: int = 0
    skipped: int = 0
    """Records at or before the recorded offset (already folded)."""
    last_offset: int | None = None
    dead: list[Awaitable[Any]] = field(default_factory=list)
    unknown_seconds: list[float] = field(default_factory=list)
    """Durations of the Unknown periods that ended in the batch (event time)."""


class Governor:
    """Owns the governor agent on ``source_topic`` (the governance topic, one partition).

    ``step`` defaults to the real state machine; ``send_decisions`` to faust's producer on
    ``settings.decisions_topic``."""

    def __init__(
        self,
        app: Any,
        settings: WorkerProcessSettings,
        sink: GovernanceSink,
        metrics: WorkerMetrics,
        *,
        source_topic: Any = None,
        on_fatal: Callable[[BaseException], None] | None = None,
        step: StepFn | None = None,
        send_decisions: DecisionSender | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.sink = sink
        self.metrics = metrics
        self.on_fatal = on_fatal
        self.policy = GovernancePolicy.from_settings(settings)
        self._step = step
        self.topic_name = settings.governance_topic
        self.source_topic = source_topic or app.topic(
            settings.governance_topic, key_serializer="raw", value_serializer="raw", partitions=1
        )
        self.decisions_topic = app.topic(
            settings.decisions_topic, key_serializer="raw", value_serializer="raw"
        )
        self.dead_letter_topic = app.topic(
            settings.dead_letter_topic, key_serializer="raw", value_serializer="raw"
        )
        self.send_decisions = send_decisions or self._send_to_topic
        self.agent = app.agent(self.source_topic, name="devicestate.governor")(self.process)
        self.writer = BatchWriter(
            metrics.db_retries,
            _retriable,
            what="governance batch",
            grace_seconds=write_grace_seconds(settings),
        )
        self.state: GovernorState | None = None
        self.applied_through: int | None = None
        """Last offset folded into :attr:`state` and committed (``None``: none yet)."""
        self.batches = 0
        self.records_seen = 0
        self._halted = False
        self.gauges = GovernorGauges(metrics)
        self._attempt: list[FoldId] = []
        """The folds the last attempt at a batch carried out, in order."""
        self._letters = OncePerBatch()

    @property
    def step(self) -> StepFn:
        if self._step is None:
            self._step = machine_step()
        return self._step

    def begin_shutdown(self) -> None:
        self.writer.begin_shutdown()

    async def process(self, stream: Any) -> None:
        """The agent body: batches from the governance topic until the stream stops."""
        size = self.settings.worker_batch_size
        within = self.settings.worker_batch_within_seconds
        async for events in stream.take_events(size, within=within):
            await self.handle_batch(events)

    # -- one batch ------------------------------------------------------------------------------

    async def handle_batch(self, events: Sequence[Any]) -> None:
        """Load (if needed), fold, send the decisions, write; never raises for a transient error."""
        if self._halted:
            _withhold_acks(events)
            return
        started = time.perf_counter()
        self.metrics.governor_records.inc(len(events))
        self.records_seen += len(events)
        self._letters.reset()
        refused: dict[FoldId, str] = {}
        try:
            while True:
                try:
                    result, cancelled = await self.writer.write(
                        lambda: self._fold_and_commit(events, FoldFilter(refused)), len(events)
                    )
                    break
                except BatchNotWritten as exc:
                    if not (is_poison(exc) and await self._refuse(events, refused, exc)):
                        raise
        except asyncio.CancelledError:
            self.state = None  # may be ahead of what was committed
            _withhold_acks(events)
            raise
        except Exception as exc:  # BatchNotWritten, or sending failed for good
            self.state = None
            _withhold_acks(events)
            self._halted = True
            if self.writer.shutting_down:
                log.warning("governance batch abandoned at shutdown, not acknowledged")
            else:
                log.error("governance batch not written; stopping the worker", error=repr(exc))
                if self.on_fatal is None:
                    raise
                self.on_fatal(exc if isinstance(exc, BatchNotWritten) else BatchNotWritten(exc))
            return
        if result is None:
            self.state = None
            _withhold_acks(events)
            raise asyncio.CancelledError
        self._record(result, started)
        if cancelled:
            raise asyncio.CancelledError

    async def _refuse(
        self, events: Sequence[Any], refused: dict[FoldId, str], error: BatchNotWritten
    ) -> bool:
        """The database refused the batch's rows: add the fold that makes them unwritable
        (:func:`streams.poison.refused_item` over the failed attempt's folds) to ``refused``
        with the database's error; ``False`` when no fold is to blame (the worker stops)."""
        folds = list(self._attempt)

        async def trial(count: int) -> None:
            def attempt() -> Awaitable[FoldResult]:
                return self._fold_and_commit(events, FoldFilter(refused, limit=count), trial=True)

            if (await self.writer.write(attempt, count))[1]:  # cancelled: a trial never commits
                raise asyncio.CancelledError

        found = await refused_item(folds, error, trial)
        if found is None:
            return False
        which, refusal = found
        refused[which] = refusal_reason(refusal.__cause__ or refusal)
        self.metrics.poison_records.labels("governor").inc()
        log.warning("governance fold refused by the database", fold=which, reason=refused[which])
        return True

    async def _fold_and_commit(
        self, events: Sequence[Any], folds: FoldFilter, trial: bool = False
    ) -> FoldResult:
        """One attempt at the whole batch: (re)load if needed, fold (the folds ``folds`` lets
        through), write, send the decisions just before the commit. A retry after a failure
        starts again from the committed state (the fold mutates the state). ``trial``: the rows
        are written and rolled back (:class:`~streams.poison.Tried`), nothing is sent."""
        self._attempt = []
        first = events[0].message.offset if events else None
        if self.state is not None and first is not None:
            expected_next = -1 if self.applied_through is None else self.applied_through
            if first > expected_next + 1:  # a gap: another worker folded the records between
                log.info("governance records skipped by this worker; reloading the state")
                self.state = None
        if self.state is None:
            await self._load()
        state = self.state
        assert state is not None
        before = self.applied_through
        try:
            result = self._fold(state, events, folds, letters=not trial)
            self._attempt = folds.folded

            if result.dead:  # each sent once per batch, whatever the attempts (OncePerBatch)
                await asyncio.gather(*result.dead)

            async def publish() -> None:  # rows the database refuses send no decision
                if trial:
                    raise Tried
                if result.decisions:
                    await self.send_decisions(
                        [
                            (d.decision_id.encode(), encode_decision(d), d.kind.value)
                            for d in result.decisions
                        ]
                    )

            if result.last_offset is None:
                await publish()
            else:
                rows = batch_rows(
                    state,
                    result.decisions,
                    topic=self.topic_name,
                    offset=result.last_offset,
                    expected_offset=before,
                    highwater=self._highwater(events),
                )
                await self.sink.write(rows, publish)
        except StaleGovernorState as exc:
            log.warning("governor state is stale; reloading", error=str(exc))
            self.state = None
            raise
        except BaseException:
            self.state = None  # folded past what is committed: reload before the next attempt
            raise
        self.gauges.update(state)
        if result.last_offset is not None:  # written: what was dirty is in the tables now
            state.clear_dirty()  # (not before: a restore's unwritten rows wait for a write)
            self.applied_through = result.last_offset
        return result

    def _fold(
        self, state: GovernorState, events: Sequence[Any], folds: FoldFilter, letters: bool
    ) -> FoldResult:
        result = FoldResult()
        step, policy = folds.guard(self.step), self.policy
        through = -1 if self.applied_through is None else self.applied_through
        for event in events:
            message = event.message
            offset = message.offset
            if offset <= through:  # folded before, or a copy earlier in this batch
                result.skipped += 1
                continue
            result.last_offset = through = offset
            payload = message.value
            try:
                if payload is None:
                    raise ValueError("record has no value (tombstone)")
                unpacked = unpack(payload, record_type(message.headers))
            except Exception as exc:  # EventDecodeError, or anything a bad payload provokes
                if letters:
                    result.dead.append(self._dead_letter(message, str(exc) or type(exc).__name__))
                continue
            if letters:  # an entry of a ForwardedBatch that does not decode: alone
                topic, metrics, stage = self.dead_letter_topic, self.metrics, DEAD_LETTER_STAGE
                result.dead.extend(
                    self._letters.entry(topic, metrics, message, bad, stage=stage)
                    for bad in unpacked.bad
                )
            folds.offset = offset
            released = (  # the entries in order, as if each were a record
                folded
                for record, key in unpacked.entries
                for folded in take(state, record, key, policy, step, refusal)
            )
            for folded in released:
                poison = folds.refused.get(fold_id(folded.key, offset))
                if poison is not None:  # its rows were refused: left out
                    if letters:
                        result.dead.append(self._dead_letter_folded(folded, message, poison))
                    continue
                if letters and folded.refused is not None:  # over the device ceiling
                    result.dead.append(self._dead_letter_folded(folded, message))
                self.gauges.track_unknown(state, folded.decisions, result.unknown_seconds)
                result.decisions.extend(folded.decisions)
                result.folded += 1
        return result

    async def _load(self) -> None:
        snapshot = await self.sink.load(self.topic_name)
        self.state = GovernorState.restore(
            snapshot.devices,
            snapshot.nodes,
            snapshot.fleet,
            self.policy.heartbeat_grace_seconds,
            snapshot.workloads,
            snapshot.labels,
            snapshot.pending,
        )
        self.applied_through = snapshot.offset
        start_sequence(self.state, snapshot.offset)
        self.gauges.reset(self.state)
        log.info(
            "governor state loaded",
            devices=len(snapshot.devices),
            nodes=len(snapshot.nodes),
            offset=snapshot.offset,
        )

    async def _send_to_topic(self, records: Sequence[tuple[bytes, bytes, str]]) -> None:
        futures = [
            await self.decisions_topic.send(key=k, value=v, headers=type_headers(t), force=True)
            for k, v, t in records
        ]
        await asyncio.gather(*futures)

    def _dead_letter_folded(
        self, folded: Folded, message: Any, poison: str | None = None
    ) -> Awaitable[Any]:
        """Dead-letter a record the merge released over the device ceiling, or whose rows the
        database refused (``poison``: its error)."""
        stage, reason = (REFUSED_STAGE, poison) if poison else (CEILING_STAGE, folded.refused or "")
        if folded.key is None:
            return self._dead_letter(message, reason, stage)
        topic, health = self.dead_letter_topic, self.settings.topic
        return self._letters.merged(topic, self.metrics, folded, health, stage=stage, reason=reason)

    def _dead_letter(
        self, message: Any, reason: str, stage: str = DEAD_LETTER_STAGE
    ) -> Awaitable[Any]:
        topic, metrics = self.dead_letter_topic, self.metrics
        return self._letters.message(topic, metrics, message, stage=stage, reason=reason)

    def _highwater(self, events: Sequence[Any]) -> int | None:
        try:
            value = self.app.consumer.highwater(events[-1].message.tp)
        except Exception:  # no consumer (unit tests)
            return None
        return value if isinstance(value, int) else None

    def _record(self, result: FoldResult, started: float) -> None:
        record_batch(self.metrics, result.decisions, result.unknown_seconds, started)
        self.batches += 1


def _retriable(exc: BaseException) -> bool:
    """Transient database and Kafka errors, and a stale state (reloaded by the next attempt)."""
    return isinstance(exc, StaleGovernorState) or is_retriable(exc)


def _withhold_acks(events: Sequence[Any]) -> None:
    """Keep ``take_events``'s ``finally`` from acknowledging events that were not committed."""
    for event in events:
        event.message.acked = True
