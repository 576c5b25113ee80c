"""Poison isolation without a broker (issue 11 item 3): the bisection and the prefix search over
fake writers (pure functions over a list), which errors count as a refusal, and the health agent
on faust's memory store with a sink that refuses one record."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc

from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE
from services.adapters.projection.errors import ProjectionConflictError, is_refused, refusal_reason
from services.domain.batch import CommitHook, LoggedBatch
from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved
from services.runtime.config import Settings
from streams.app import build_worker_app
from streams.batchwrite import BatchNotWritten
from streams.dedup_table import device_ranks
from streams.poison import first_refused, is_poison, isolate
from tests.fakes.batch_sink import FakeSink
from tests.streams.test_dedup_unit import FakeDeadLetters, _wait_for


@dataclass
class _PgError(Exception):
    sqlstate: str
    text: str = "refused"

    def __str__(self) -> str:
        return self.text


def _refusal(what: object) -> sa_exc.IntegrityError:
    return sa_exc.IntegrityError(
        "INSERT ... huge params", {"rows": "x" * 10_000}, _PgError("23514")
    )


class FakeWriter:
    """Commits a part unless it holds a poison item (refused like PostgreSQL would)."""

    def __init__(self, poison: set[int], error: type[Exception] | None = None) -> None:
        self.poison = poison
        self.committed: list[list[int]] = []
        self.calls = 0
        self.error = error

    async def write(self, part: Sequence[int]) -> None:
        self.calls += 1
        if self.poison.intersection(part):
            if self.error is not None:
                raise self.error("not a refusal")
            raise BatchNotWritten(f"{len(part)} not written") from _refusal(part)
        self.committed.append(list(part))


@pytest.mark.parametrize(
    ("n", "poison"), [(1, {0}), (10, {3}), (1000, {0, 999}), (1000, {17, 18, 500}), (64, set())]
)
async def test_isolate_writes_everything_but_the_poison_in_order(n: int, poison: set[int]) -> None:
    writer = FakeWriter(poison)
    items = list(range(n))
    letters: list[tuple[int, str]] = []
    position: list[int] = []  # what was settled, in order: committed items and poison alike

    async def write(part: Sequence[int]) -> None:
        await writer.write(part)
        position.extend(part)

    async def on_poison(item: int, error: BaseException) -> None:
        letters.append((item, refusal_reason(error.__cause__ or error)))
        position.append(item)

    first_error = BatchNotWritten("whole batch") if poison else None
    if first_error is None:
        await write(items)
        found: list[int] = []
    else:
        first_error.__cause__ = _refusal(items)
        found = await isolate(items, first_error, write, on_poison)
    assert found == sorted(poison)
    assert [item for item, _ in letters] == sorted(poison)
    assert all(reason == "23514 _PgError: refused" for _, reason in letters)
    committed = [item for part in writer.committed for item in part]
    assert committed == [i for i in items if i not in poison]
    assert position == items  # every item settled once, in log order: offsets stay contiguous
    k = len(poison)
    assert writer.calls <= max(1, 2 * k * math.ceil(math.log2(max(n, 2))) + 1)


async def test_isolate_raises_an_error_that_is_not_a_refusal() -> None:
    writer = FakeWriter({5}, error=RuntimeError)
    error = BatchNotWritten("whole")
    error.__cause__ = _refusal(None)

    async def on_poison(item: int, error: BaseException) -> None:
        raise AssertionError("not a poison")

    with pytest.raises(RuntimeError, match="not a refusal"):
        await isolate(list(range(10)), error, writer.write, on_poison)
    with pytest.raises(ValueError, match="bug"):
        await isolate([1], ValueError("bug"), writer.write, on_poison)


@pytest.mark.parametrize(("n", "poison"), [(1, 0), (2, 1), (100, 0), (100, 57), (1000, 999)])
async def test_first_refused_finds_the_first_poison_prefix(n: int, poison: int) -> None:
    calls: list[int] = []

    async def writable(prefix: int) -> bool:
        calls.append(prefix)
        return prefix <= poison  # items before the poison write; with it, refused

    assert await first_refused(n, writable) == poison
    assert len(calls) <= math.ceil(math.log2(n)) + 1 if n > 1 else len(calls) == 1


async def test_first_refused_blames_no_item_when_even_nothing_is_refused() -> None:
    async def never(prefix: int) -> bool:
        return False

    assert await first_refused(8, never) is None
    assert await first_refused(0, never) is None


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (sa_exc.IntegrityError("INSERT", {}, _PgError("23514")), True),
        (sa_exc.DataError("INSERT", {}, _PgError("22001")), True),
        (sa_exc.DBAPIError("INSERT", {}, _PgError("22P05")), True),  # jsonb \u0000
        (sa_exc.DBAPIError("INSERT", {}, _PgError("22003")), True),  # numeric overflow
        (sa_exc.DBAPIError("INSERT", {}, _PgError("40001")), False),  # serialization: retried
        (sa_exc.DBAPIError("INSERT", {}, _PgError("42P01")), False),  # missing table: a bug
        (sa_exc.OperationalError("INSERT", {}, _PgError("23505")), False),  # transient first
        (ProjectionConflictError("raced"), False),
        (ConnectionResetError(), False),
        (ValueError("bug"), False),
    ],
)
def test_what_counts_as_a_refusal(error: BaseException, expected: bool) -> None:
    assert is_refused(error) is expected
    wrapped = BatchNotWritten("not written")
    wrapped.__cause__ = error
    assert is_poison(wrapped) is expected


def test_the_reason_is_the_database_error_without_the_statement() -> None:
    error = sa_exc.IntegrityError(
        "INSERT INTO devices ...",
        {"rows": "x" * 10_000},
        _PgError("23514", 'new row violates check constraint "poison"'),
    )
    assert refusal_reason(error) == '23514 _PgError: new row violates check constraint "poison"'
    assert refusal_reason(ValueError("x" * 5000)) == "x" * 1000


# --- the health agent ----------------------------------------------------------------------------


class RefusingSink(FakeSink):
    """A fake projection that refuses any batch holding an observation of ``resource_id``."""

    def __init__(self, resource_id: str) -> None:
        super().__init__(run_hooks=False)
        self.resource_id = resource_id

    async def apply_batch(self, batch: LoggedBatch, before_commit: CommitHook | None = None) -> Any:
        for logged in batch.records:
            event = logged.event
            if isinstance(event, DeviceHealthObserved) and event.resource_id == self.resource_id:
                self.calls += 1
                raise _refusal(batch)
        return await super().apply_batch(batch, before_commit)


async def test_the_health_agent_dead_letters_the_refused_record_and_writes_the_rest(
    tmp_path: Any, observation: Any
) -> None:
    settings = Settings(
        worker_store="memory://",
        worker_batch_size=50,
        worker_batch_within_seconds=0.2,
        worker_data_dir=str(tmp_path),
        topic="unit-events",
        consumer_group=f"unit-{id(tmp_path)}",
    )
    sink = RefusingSink("GPU-POISON")
    fatal: list[BaseException] = []
    built = build_worker_app(settings, sink=sink, on_fatal=fatal.append)
    built.app.finalize()
    built.app.flow_control.resume()
    sink.table = built.dedup.table
    dead = FakeDeadLetters()
    built.dedup.dead_letter_topic = dead
    ids = [f"GPU-{i}" for i in range(9)]
    ids.insert(4, "GPU-POISON")
    async with built.dedup.agent.test_context() as agent:
        for resource_id in ids:
            payload = encode_event(observation(5, resource_id=resource_id))
            await agent.put(payload, key=b"gpu-node-a", wait=False)
        await _wait_for(lambda: sink.projection.offsets.get(("unit-events", 0)) == 9)
        await asyncio.sleep(0.1)
    assert fatal == [] and not built.dedup._halted
    written = [r.event.resource_id for batch in sink.batches for r in batch]
    assert written == [i for i in ids if i != "GPU-POISON"]
    [letter] = dead.sent
    assert letter["value"] == encode_event(observation(5, resource_id="GPU-POISON"))
    headers = dict(letter["headers"])
    assert headers[HEADER_STAGE] == b"write"
    assert headers[HEADER_SOURCE] == b"unit-events/0/4"
    assert headers[HEADER_REASON] == b"23514 _PgError: refused"
    assert built.metrics.poison_records.labels("health")._value.get() == 1
    assert built.metrics.dead_lettered.labels("write")._value.get() == 1
    # The table remembers what was written, not the refused record.
    assert len(device_ranks(built.dedup.table.items())) == 9
