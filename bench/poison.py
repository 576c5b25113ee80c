"""What isolating poison records costs (issue 11 item 3), measured on the local stack's PostgreSQL.

    .venv/bin/python -m bench.poison --records 2000 --poison 0 --poison 1 --poison 5

Per ``--poison`` k, on a fresh schema with a CHECK constraint that refuses a marker resource ID
(dropped afterwards), one batch of ``--records`` records of which k are refused:

- **health**: observations through :meth:`ProjectionStore.apply_batch`, bisected by
  :func:`streams.poison.isolate` with the health agent's writes (each part with its partition
  position; a refused record's offset with an empty batch);
- **governor**: forwarded transitions through the governor agent (:class:`streams.governor.Governor`
  on in-memory events, the real :class:`GovernanceStore`): the search over rolled-back fold
  prefixes, then the batch again without the refused folds.

Figures: database writes (``apply_batch`` / ``GovernanceStore.write`` calls, trials included) and
the batch's wall time; both agents must end with every record but the refused ones written.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Annotated, Any
from uuid import uuid4

import typer
from sqlalchemy import text

from bench.console import console
from bench.machine import machine_info
from services.adapters.projection.engine import Engine, create_engine
from services.adapters.projection.governance_store import BatchRows, GovernanceStore
from services.adapters.projection.migrate import migrate
from services.adapters.projection.store import BatchStats, ProjectionStore
from services.domain.batch import CommitHook, LoggedBatch
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import HealthTransition
from services.domain.log import LoggedEvent, LogPosition
from services.runtime.config import Settings
from streams.app import build_worker_app
from streams.batchwrite import BatchNotWritten
from streams.poison import isolate

T0 = datetime(2026, 12, 1, tzinfo=UTC)
TOPIC = "bench.poison.events"
MARKER = "POISON-"


def poisoned(records: int, poison: int) -> set[int]:
    """``poison`` indexes spread evenly over ``records``."""
    return {round((j + 1) * records / (poison + 1)) for j in range(poison)}


def resource_id(i: int, bad: set[int]) -> str:
    return f"{MARKER}{i}" if i in bad else f"GPU-{i}"


async def refusing_schema(engine: Engine, url: str, table: str) -> str:
    schema = f"bench_poison_{uuid4().hex[:10]}"
    await migrate(url, schema)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                f'ALTER TABLE "{schema}".{table} ADD CONSTRAINT bench_poison '
                f"CHECK (resource_id NOT LIKE '{MARKER}%')"
            )
        )
    return schema


async def count_and_drop(engine: Engine, schema: str, table: str) -> int:
    async with engine.begin() as conn:
        count = (await conn.execute(text(f'SELECT count(*) FROM "{schema}".{table}'))).scalar_one()
        await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    return int(count)


async def health(engine: Engine, url: str, records: int, poison: int) -> dict[str, Any]:
    schema = await refusing_schema(engine, url, "devices")
    store = ProjectionStore(engine, schema)
    bad = poisoned(records, poison)
    items = [
        LoggedEvent(
            LogPosition(TOPIC, 0, i),
            DeviceHealthObserved(
                node=f"gpu-node-{i % 50:03d}",
                namespace="ml",
                pod_name=f"train-{i}",
                pod_uid=f"uid-{i}",
                containers=(ContainerRef("main"),),
                resource_name="nvidia.com/gpu",
                resource_id=resource_id(i, bad),
                health=Health.HEALTHY,
                source=DeviceSource.DEVICE_PLUGIN,
                status_version=i + 1,
                observed_at=T0 + timedelta(seconds=i),
            ),
        )
        for i in range(records)
    ]
    writes = 0

    async def write(part: Sequence[LoggedEvent]) -> None:
        nonlocal writes
        writes += 1
        last = part[-1].position.offset
        try:
            await store.apply_batch(LoggedBatch(list(part), consumed_through={(TOPIC, 0): last}))
        except Exception as exc:
            raise BatchNotWritten(f"{len(part)} records not written") from exc

    async def offsets_only(item: LoggedEvent, error: BaseException) -> None:
        nonlocal writes
        writes += 1
        await store.apply_batch(
            LoggedBatch([], consumed_through={(TOPIC, 0): item.position.offset})
        )

    started = time.perf_counter()
    try:
        await write(items)
    except BatchNotWritten as exc:
        await isolate(items, exc, write, offsets_only)
    seconds = time.perf_counter() - started
    written = await count_and_drop(engine, schema, "devices")
    if written != records - poison:
        raise SystemExit(f"health: {written} devices written, expected {records - poison}")
    return {"agent": "health", "poison": poison, "writes": writes, "seconds": round(seconds, 3)}


class _NoSink:
    async def apply_batch(self, batch: LoggedBatch, hook: CommitHook | None = None) -> BatchStats:
        return BatchStats()


class _NoLetters:
    async def send(self, **_: Any) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def governor(engine: Engine, url: str, records: int, poison: int) -> dict[str, Any]:
    schema = await refusing_schema(engine, url, "device_governance")
    store = GovernanceStore(engine, schema)
    writes = 0

    class Counted:
        async def load(self, topic: str) -> Any:
            return await store.load(topic)

        async def write(self, rows: BatchRows, before_commit: Any = None) -> None:
            nonlocal writes
            writes += 1
            await store.write(rows, before_commit)

    bad = poisoned(records, poison)
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            worker_store="memory://",
            worker_data_dir=data_dir,
            topic=TOPIC,
            governance_topic="bench.poison.governance",
            consumer_group=f"bench-poison-{uuid4().hex[:6]}",
        )
        built = build_worker_app(settings, sink=_NoSink(), governance_sink=Counted())
        agent = built.governor

        async def no_decisions(batch: Sequence[tuple[bytes, bytes, str]]) -> None:
            return None

        agent.send_decisions = no_decisions
        agent.dead_letter_topic = _NoLetters()
        events = [
            SimpleNamespace(
                message=SimpleNamespace(
                    topic=settings.governance_topic,
                    partition=0,
                    offset=i,
                    key=b"k",
                    value=encode_input(
                        HealthTransition(
                            node=f"gpu-node-{i % 50:03d}",
                            resource_id=resource_id(i, bad),
                            resource_name="nvidia.com/gpu",
                            source=DeviceSource.DEVICE_PLUGIN,
                            health=Health.HEALTHY,
                            status_version=i + 1,
                            observed_at=T0 + timedelta(seconds=i),
                            partition=0,
                            offset=i,
                        )
                    ),
                    acked=False,
                    tp=None,
                    headers=None,
                )
            )
            for i in range(records)
        ]
        started = time.perf_counter()
        await agent.handle_batch(events)
        seconds = time.perf_counter() - started
    written = await count_and_drop(engine, schema, "device_governance")
    if written != records - poison:
        raise SystemExit(f"governor: {written} devices governed, expected {records - poison}")
    return {"agent": "governor", "poison": poison, "writes": writes, "seconds": round(seconds, 3)}


async def measure(records: int, poisons: Sequence[int]) -> list[dict[str, Any]]:
    """Every run of both agents on the stack's database (``DEVICESTATE_DATABASE_URL``)."""
    url = Settings().database_url
    engine = create_engine(url)
    try:
        results = [await health(engine, url, records, k) for k in poisons]
        results += [await governor(engine, url, records, k) for k in poisons]
    finally:
        await engine.dispose()
    return results


def cli(
    records: Annotated[int, typer.Option(help="Records in the batch.")] = 2000,
    poison: Annotated[
        list[int] | None, typer.Option(help="Refused records in the batch (repeat).")
    ] = None,
) -> None:
    """Database writes and time to isolate poison records in one batch, both agents."""
    poisons = poison or [0, 1, 5]
    console.print(f"load average at the start: {machine_info().get('loadavg_at_start')}")
    for r in asyncio.run(measure(records, poisons)):
        console.print(
            f"  {r['agent']:>8}: {records} records, {r['poison']} refused: "
            f"{r['writes']:>3} writes, {r['seconds']:.3f} s"
        )


def main() -> None:
    typer.run(cli)


if __name__ == "__main__":
    main()
