"""The rounds of a fault campaign (:mod:`bench.faults`): publish, inject, catch up, check.

Round 0 publishes its records and injects nothing (it checks the set-up itself); round ``r > 0``
publishes its records, waits until the worker has applied a drawn share of them (10-90 %, from
the campaign's seed), injects fault ``r`` and waits until the worker has applied the round and the
governor folded the governance topic to its end; then every check of :mod:`bench.faults_check`
runs. Progress is the worker's own ``partition_progress`` rows (written in the transaction of the
rows they count), read in its schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.console import console
from bench.faults_check import count_observations, count_quarantines, replay_verify
from bench.faults_inject import (
    FaultKind,
    Worker,
    lose_a_broker,
    restart_broker,
    restart_postgres,
)
from bench.faults_input import CampaignInput, Record, Round
from bench.kafka_admin import end_offsets
from bench.stack import Run
from devtools.stack.supervisor import StackLayout
from services.runtime.config import Settings

CATCH_UP_SECONDS = 600.0
"""Longest wait for one round to be applied and governed after its fault (then it fails)."""


@dataclass
class RoundResult:
    """What one round did and found (JSON-ready with :func:`dataclasses.asdict`)."""

    round: int
    fault: str | None
    events: int
    at_share: float | None = None
    fault_seconds: float | None = None  # the injection itself (a restart's down time included)
    caught_up_seconds: float = 0.0  # from the injection (round 0: the publish) to caught up
    lost: int = 0
    doubled: int = 0
    history_rows: int = 0
    expected_observations: int = 0
    quarantines: int = 0
    expected_quarantines: int = 0
    spurious_created: int = 0
    spurious_released: int = 0
    missing_quarantines: int = 0
    replay_differences: int = 0
    governance_differences: int = 0
    replay_seconds: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(
            self.error
            or self.lost
            or self.doubled
            or self.spurious_created
            or self.spurious_released
            or self.missing_quarantines
            or self.replay_differences
            or self.governance_differences
        )


async def publish(settings: Settings, records: list[Record]) -> dict[int, int]:
    """Send ``records`` to their partitions (idempotent producer, acks=all); returns
    ``{partition: last offset written}``."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        client_id="devicestate-faults",
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        request_timeout_ms=60_000,
    )
    await producer.start()
    last: dict[int, int] = {}
    try:
        futures = [
            await producer.send(settings.topic, value=v, key=k, partition=p) for k, v, p in records
        ]
        for meta in await asyncio.gather(*futures):
            last[meta.partition] = max(last.get(meta.partition, -1), meta.offset)
    finally:
        await producer.stop()
    return last


async def progress(engine: Any, schema: str, topic: str) -> dict[int, int]:
    """``{partition: last applied offset}`` of ``topic`` in ``schema``; ``{}`` while the
    schema or the database is not there (the worker not started yet, PostgreSQL restarting)."""
    from sqlalchemy import text

    from services.adapters.projection.tables import quoted_schema

    with contextlib.suppress(Exception):
        async with asyncio.timeout(5), engine.connect() as conn:
            rows = await conn.execute(
                text(
                    f'SELECT "partition", "offset" FROM {quoted_schema(schema)}.partition_progress'
                    ' WHERE topic = :t AND "offset" IS NOT NULL'
                ),
                {"t": topic},
            )
            return {int(r[0]): int(r[1]) for r in rows}
    return {}


def applied(done: dict[int, int], start: dict[int, int], ends: dict[int, int]) -> int:
    """Records applied since ``start`` towards ``ends`` (last offsets; -1: none)."""
    return sum(max(0, min(done.get(p, -1), end) - start.get(p, -1)) for p, end in ends.items())


class Campaign:
    """One campaign run on one stack: its worker, its input, its rounds' results."""

    def __init__(
        self,
        run: Run,
        settings: Settings,
        worker: Worker,
        engine: Any,
        layout: StackLayout,
        seed: int,
    ) -> None:
        self.run = run
        self.settings = settings
        self.worker = worker
        self.engine = engine
        self.layout = layout
        self.rng = random.Random(seed * 7919 + 1)
        self.ends: dict[int, int] = {}
        self.results: list[RoundResult] = []

    async def rounds(self, campaign: CampaignInput, plan: list[FaultKind]) -> list[RoundResult]:
        """Run round 0 and one round per fault of ``plan`` (``len(plan) + 1`` rounds of
        ``campaign``); stops after a round that could not finish (``error``)."""
        for index, round_ in enumerate(campaign.rounds):
            fault = plan[index - 1] if index > 0 else None
            result = await self.one_round(index, round_, fault)
            self.results.append(result)
            mark = "[red]FAIL[/red]" if result.failed else "[green]ok[/green]"
            console.print(
                f"  round {index:>2} {fault or 'no fault':<17} {mark}: lost {result.lost}, "
                f"doubled {result.doubled}, quarantines {result.quarantines}/"
                f"{result.expected_quarantines} (spurious +{result.spurious_created} "
                f"-{result.spurious_released}, missing {result.missing_quarantines}), replay diff "
                f"{result.replay_differences}/{result.governance_differences}, caught up in "
                f"{result.caught_up_seconds:.1f} s{'; ' + result.error if result.error else ''}"
            )
            if result.error:
                break
        return self.results

    async def one_round(self, index: int, round_: Round, fault: FaultKind | None) -> RoundResult:
        result = RoundResult(index, fault.value if fault else None, round_.events)
        schema, topic = self.run.worker_schema, self.settings.topic
        start = dict(self.ends)
        last = await publish(self.settings, round_.records)
        self.ends.update(last)
        total = applied(self.ends, start, self.ends)
        began = time.monotonic()
        if fault is not None:
            share = round(self.rng.uniform(0.1, 0.9), 3)
            result.at_share = share
            while True:
                self.worker.ensure_running()
                done = applied(await progress(self.engine, schema, topic), start, self.ends)
                if done >= share * total:
                    break
                if time.monotonic() - began > CATCH_UP_SECONDS:
                    result.error = f"the worker did not reach {share:.0%} of the round"
                    return result
                await asyncio.sleep(0.02)
            began = time.monotonic()
            try:
                result.fault_seconds = round(await self.inject(fault), 2)
            # A fault this stack cannot take (broker-loss on one broker, no broker running).
            except RuntimeError as exc:
                result.error = str(exc)
                return result
        try:
            await self.caught_up(began)
        except TimeoutError as exc:
            result.error = str(exc)
            return result
        result.caught_up_seconds = round(time.monotonic() - began, 2)
        await self.check(index, round_, result)
        return result

    async def inject(self, fault: FaultKind) -> float:
        """Inject ``fault`` now; returns the seconds it took (threads: the stack's code blocks)."""
        started = time.monotonic()
        if fault is FaultKind.WORKER_KILL:
            self.worker.kill9()
        elif fault is FaultKind.BROKER_RESTART:
            await asyncio.to_thread(restart_broker, self.layout, 3.0)
        elif fault is FaultKind.POSTGRES_RESTART:
            await asyncio.to_thread(restart_postgres, self.layout, 3.0)
        else:
            await asyncio.to_thread(lose_a_broker, self.layout)
        return time.monotonic() - started

    async def caught_up(self, began: float) -> None:
        """Until the worker applied every record published and the governor folded the
        governance topic to its end; raises ``TimeoutError`` after :data:`CATCH_UP_SECONDS`."""
        schema, topic = self.run.worker_schema, self.settings.topic

        def overdue(what: str) -> None:
            if time.monotonic() - began > CATCH_UP_SECONDS:
                raise TimeoutError(f"{what} not done {CATCH_UP_SECONDS:.0f} s after the fault")

        while True:
            self.worker.ensure_running()
            done = await progress(self.engine, schema, topic)
            if all(done.get(p, -1) >= end for p, end in self.ends.items()):
                break
            overdue("the round's records")
            await asyncio.sleep(0.1)
        # The health agent forwards before it commits: the governance topic is complete now.
        gov = self.settings.governance_topic
        gov_end = (await end_offsets(self.settings.kafka_bootstrap_servers, gov)).get(0, 0)
        while gov_end and (await progress(self.engine, schema, gov)).get(0, -1) < gov_end - 1:
            self.worker.ensure_running()
            overdue("the governor")
            await asyncio.sleep(0.1)

    async def check(self, index: int, round_: Round, result: RoundResult) -> None:
        schema = self.run.worker_schema
        observations = await count_observations(self.engine, schema, round_.observations)
        result.lost, result.doubled = observations.lost, observations.doubled
        result.history_rows = observations.rows
        result.expected_observations = observations.expected
        quarantines = await count_quarantines(self.engine, schema, round_)
        result.quarantines, result.expected_quarantines = quarantines.rows, quarantines.expected
        result.spurious_created = quarantines.spurious_created
        result.spurious_released = quarantines.spurious_released
        result.missing_quarantines = quarantines.missing
        log = self.run.log_dir / "replay.log"
        started = time.monotonic()
        for governance, suffix in ((False, "r"), (True, "g")):
            target = f"{schema}_{suffix}{index}"
            self.run.created_schemas.append(target)
            verdict = await asyncio.to_thread(
                replay_verify, self.worker.env, target, governance=governance, log=log
            )
            if verdict.differences < 0:
                result.notes.append(f"replay exit {verdict.exit_code}: {verdict.output[-300:]}")
                result.error = f"replay{' --governance' if governance else ''} could not run"
            if governance:
                result.governance_differences = max(verdict.differences, 0)
            else:
                result.replay_differences = max(verdict.differences, 0)
        result.replay_seconds = round(time.monotonic() - started, 2)


def as_json(results: list[RoundResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
