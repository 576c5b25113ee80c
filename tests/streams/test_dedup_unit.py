"""The dedup agent without a broker: the pure early filter, and the agent on faust's memory store.

The early filter (:func:`streams.dedup_table.select_new`) must never change what the projection
ends up with: folding only what it keeps, batch after batch, with the table raised after each
batch, gives the fold of the whole log.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import exc as sa_exc

from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE, type_headers
from services.adapters.projection.errors import ProjectionConflictError, is_transient
from services.domain.directory import fold
from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved, Event, Health
from services.runtime.config import Settings
from streams.app import build_worker_app
from streams.dedup_table import (
    device_ranks,
    encode_node_ranks,
    select_new,
    table_key,
)
from tests.conftest import as_log
from tests.domain.strategies import event_logs
from tests.fakes.batch_sink import FakeSink

# --- select_new -------------------------------------------------------------------------------


def test_keeps_first_sight_and_newer(observation: Any) -> None:
    items = as_log([observation(5), observation(7)])
    selection = select_new(items, {})
    assert selection.records == items
    assert (selection.duplicates, selection.stale) == (0, 0)
    assert selection.ranks == {table_key("gpu-node-a", "GPU-0"): (7, 1)}


def test_drops_same_and_older_than_known(observation: Any) -> None:
    items = as_log([observation(5), observation(3), observation(6)])
    selection = select_new(items, {table_key("gpu-node-a", "GPU-0"): 5})
    assert [r.event.status_version for r in selection.records] == [6]
    assert selection.kept == [2]
    assert (selection.duplicates, selection.stale) == (1, 1)


def test_drops_repeats_within_the_batch(observation: Any) -> None:
    items = as_log([observation(5), observation(5), observation(4), observation(9)])
    selection = select_new(items, {})
    assert [r.event.status_version for r in selection.records] == [5, 9]
    assert (selection.duplicates, selection.stale) == (1, 1)
    assert selection.ranks[table_key("gpu-node-a", "GPU-0")] == (9, 3)


def test_unordered_observation_creates_but_never_overwrites(observation: Any) -> None:
    key = table_key("gpu-node-a", "GPU-0")
    first = select_new(as_log([observation(None)]), {})
    assert len(first.records) == 1 and first.ranks[key] == (0, 0)
    again = select_new(as_log([observation(None)]), {key: 0})
    assert again.records == [] and again.duplicates == 1
    over_ordered = select_new(as_log([observation(None)]), {key: 4})
    assert over_ordered.records == [] and over_ordered.stale == 1


def test_releases_always_pass(observation: Any, release: Any) -> None:
    items = as_log([release(1), release(1), observation(2), release(1)])
    selection = select_new(items, {table_key("gpu-node-a", "GPU-0"): 10})
    assert [type(r.event).__name__ for r in selection.records] == ["PodDevicesReleased"] * 3


def test_devices_are_keyed_by_node_and_resource(observation: Any) -> None:
    items = as_log(
        [observation(5), observation(5, node="gpu-node-b"), observation(5, resource_id="GPU-1")]
    )
    assert len(select_new(items, {table_key("gpu-node-a", "GPU-0"): 5}).records) == 2


@settings(max_examples=300, deadline=None)
@given(log=event_logs, cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6))
def test_early_filter_never_changes_the_fold(log: list[Event], cuts: list[int]) -> None:
    items = as_log(log)
    bounds = sorted({0, len(items), *(c for c in cuts if c <= len(items))})
    table: dict[str, int] = {}
    state: dict[Any, Any] = {}
    tombstones: dict[str, Any] = {}  # kept between batches, as the projection keeps them
    for start, end in itertools.pairwise(bounds):
        selection = select_new(items[start:end], table)
        fold([r.event for r in selection.records], state, tombstones)
        for key, (rank, _) in selection.ranks.items():
            table[key] = max(rank, table.get(key, rank))
    assert state == fold(log)


# --- is_transient -------------------------------------------------------------------------------


@dataclass
class _PgError(Exception):
    sqlstate: str


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ConnectionRefusedError(), True),
        (TimeoutError(), True),
        (sa_exc.OperationalError("SELECT 1", {}, Exception("boom")), True),
        (sa_exc.InterfaceError("SELECT 1", {}, Exception("closed")), True),
        (sa_exc.DBAPIError("SELECT 1", {}, _PgError("40P01")), True),
        (sa_exc.DBAPIError("SELECT 1", {}, _PgError("57P01")), True),
        (sa_exc.DBAPIError("SELECT 1", {}, _PgError("23505")), False),
        (ProjectionConflictError("raced"), True),
        (ValueError("bug"), False),
        (KeyError("bug"), False),
    ],
)
def test_is_transient(error: BaseException, expected: bool) -> None:
    assert is_transient(error) is expected


# --- the agent on the memory store --------------------------------------------------------------


class FakeDeadLetters:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, **kwargs: Any) -> asyncio.Future[None]:
        self.sent.append(kwargs)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


def _unit_settings(tmp_path: Any) -> Settings:
    return Settings(
        worker_store="memory://",
        worker_batch_size=50,
        worker_batch_within_seconds=0.05,
        worker_data_dir=str(tmp_path),
        topic="unit-events",
        consumer_group=f"unit-{id(tmp_path)}",
    )


async def _wait_for(predicate: Any, seconds: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("timed out waiting for the agent")
        await asyncio.sleep(0.02)


async def _run_agent(
    tmp_path: Any,
    payloads: list[bytes],
    sink: FakeSink,
    expected_calls: int,
    on_fatal: Any = None,
    settle: float = 0.1,
) -> tuple[Any, FakeDeadLetters]:
    built = build_worker_app(_unit_settings(tmp_path), sink=sink, on_fatal=on_fatal)
    app = built.app
    app.finalize()
    app.flow_control.resume()
    sink.table = built.dedup.table
    dead = FakeDeadLetters()
    built.dedup.dead_letter_topic = dead
    async with built.dedup.agent.test_context() as agent:
        for payload in payloads:
            await agent.put(payload, key=b"gpu-node-a", wait=False)
        await _wait_for(lambda: sink.calls >= expected_calls)
        await asyncio.sleep(settle)
    return built, dead


async def test_agent_drops_early_writes_once_and_dead_letters(
    tmp_path: Any, observation: Any
) -> None:
    payloads = [
        encode_event(observation(5)),
        encode_event(observation(5)),
        b"{not json",
        encode_event(observation(3)),
        encode_event(observation(7, health=Health.UNHEALTHY)),
    ]
    sink = FakeSink(run_hooks=False)
    built, dead = await _run_agent(tmp_path, payloads, sink, expected_calls=1)

    assert sink.calls == 1
    [written] = sink.batches
    assert [r.event.status_version for r in written] == [5, 7]
    assert [r.position.offset for r in written] == [0, 4]
    key = table_key("gpu-node-a", "GPU-0")
    assert sink.table_at_write == [{}]  # the table is raised only after the commit
    assert device_ranks(built.dedup.table.items()) == {key: "7"}

    [letter] = dead.sent
    assert letter["value"] == b"{not json"
    headers = dict(letter["headers"])
    assert headers[HEADER_STAGE] == b"decode"
    assert headers[HEADER_REASON].startswith(b"not JSON")
    assert headers[HEADER_SOURCE] == b"unit-events/0/2"

    metrics = built.metrics
    assert metrics.consumed._value.get() == 5
    assert metrics.table_duplicates.labels("duplicate")._value.get() == 1
    assert metrics.table_duplicates.labels("stale")._value.get() == 1
    assert metrics.dead_lettered.labels("decode")._value.get() == 1


async def test_agent_decodes_by_the_type_header_and_dead_letters_a_disagreeing_one(
    tmp_path: Any, observation: Any
) -> None:
    sink = FakeSink(run_hooks=False)
    built = build_worker_app(_unit_settings(tmp_path), sink=sink)
    app = built.app
    app.finalize()
    app.flow_control.resume()
    sink.table = built.dedup.table
    dead = FakeDeadLetters()
    built.dedup.dead_letter_topic = dead
    headed, older = observation(5), observation(7, health=Health.UNHEALTHY)
    puts = [
        (encode_event(headed), type_headers(headed.type)),
        (encode_event(observation(6)), type_headers("PodDevicesReleased")),  # disagrees
        (encode_event(older), None),  # written before the header: decoded from its bytes
    ]
    async with built.dedup.agent.test_context() as agent:
        for payload, headers in puts:
            await agent.put(payload, key=b"gpu-node-a", headers=headers, wait=False)
        await _wait_for(lambda: sink.calls >= 1)
        await asyncio.sleep(0.1)
    [written] = sink.batches
    assert [r.event for r in written] == [headed, older]
    [letter] = dead.sent
    assert letter["value"] == encode_event(observation(6))
    headers = dict(letter["headers"])
    assert headers[HEADER_STAGE] == b"decode"
    assert headers[HEADER_REASON] == (
        b"type header says 'PodDevicesReleased' but the body is of type 'DeviceHealthObserved'"
    )
    assert headers[HEADER_SOURCE] == b"unit-events/0/1"


async def test_dead_letter_reasons_name_the_real_fault(tmp_path: Any, observation: Any) -> None:
    """Random bytes are 'not UTF-8' (orjson says 'surrogates not allowed'), a record keyed by
    another node than its body's is dead-lettered rather than applied under the body's node, and
    a node name that is no DNS-1123 subdomain or a resourceID with a bidi override is refused
    (issue 11, item 10)."""
    sink = FakeSink(run_hooks=False)
    built = build_worker_app(_unit_settings(tmp_path), sink=sink)
    app = built.app
    app.finalize()
    app.flow_control.resume()
    sink.table = built.dedup.table
    dead = FakeDeadLetters()
    built.dedup.dead_letter_topic = dead
    good = observation(5)
    puts = [
        (b"\xf7f\xb0\xf0\x9d\xce# \xb9", b"gpu-node-a"),
        (encode_event(observation(6)), b"gpu-node-b"),
        (encode_event(observation(7, node="GPU_Node")), b"GPU_Node"),
        (encode_event(observation(8, resource_id="GPU-\u202e0")), b"gpu-node-a"),
        (encode_event(good), b"gpu-node-a"),
    ]
    async with built.dedup.agent.test_context() as agent:
        for payload, key in puts:
            await agent.put(payload, key=key, wait=False)
        await _wait_for(lambda: sink.calls >= 1)
        await asyncio.sleep(0.1)
    [written] = sink.batches
    assert [r.event for r in written] == [good]
    reasons = [dict(letter["headers"])[HEADER_REASON].decode() for letter in dead.sent]
    assert reasons[0] == (
        "not UTF-8 text: byte 0xf7 at offset 0 (invalid start byte); a record is a UTF-8 JSON "
        "object"
    )
    assert reasons[1] == (
        "record key 'gpu-node-b' differs from the body's node 'gpu-node-a' "
        "(a record is keyed by its node)"
    )
    assert reasons[2].startswith("cannot be stored: node is not a DNS-1123 subdomain")
    assert (
        "resourceID contains an invisible or bidirectional-control character, U+202E"
        in (reasons[3])
    )


async def test_agent_retries_transient_errors_inside_the_batch(
    tmp_path: Any, observation: Any
) -> None:
    sink = FakeSink(run_hooks=False, fail=2)
    built, _ = await _run_agent(tmp_path, [encode_event(observation(5))], sink, expected_calls=3)
    assert sink.calls == 3
    assert len(sink.batches) == 1
    assert built.metrics.db_retries._value.get() == 2
    assert sink.table_at_write == [{}, {}, {}]
    assert len(device_ranks(built.dedup.table.items())) == 1


async def test_non_transient_error_stops_without_acks_or_later_writes(
    tmp_path: Any, observation: Any
) -> None:
    failures: list[BaseException] = []
    sink = FakeSink(run_hooks=False, fail=1, error=ValueError("column does not exist"))

    built, _ = await _run_agent(
        tmp_path,
        [encode_event(observation(5))],
        sink,
        expected_calls=1,
        on_fatal=failures.append,
    )
    assert [type(e).__name__ for e in failures] == ["BatchNotWritten"]
    assert isinstance(failures[0].__cause__, ValueError)
    assert sink.batches == [] and list(built.dedup.table.items()) == []
    assert built.dedup._halted


async def test_halted_worker_withholds_every_later_batch(tmp_path: Any) -> None:
    sink = FakeSink(run_hooks=False)
    built = build_worker_app(_unit_settings(tmp_path), sink=sink)
    built.dedup._halted = True

    events = [SimpleNamespace(message=SimpleNamespace(acked=False)) for _ in range(2)]
    await built.dedup.handle_batch(None, events)
    assert sink.calls == 0
    assert all(e.message.acked for e in events)  # faust's ack skips them: offsets not committed


async def test_a_table_ahead_of_the_projection_loses_nothing(
    tmp_path: Any, observation: Any
) -> None:
    """The table claims a rank the projection does not have (as a wrong restore would): the
    store refuses the batch, and the agent writes it again without dropping anything early."""
    sink = FakeSink(run_hooks=False)
    built = build_worker_app(_unit_settings(tmp_path), sink=sink)
    app = built.app
    app.finalize()
    app.flow_control.resume()
    built.dedup.dead_letter_topic = FakeDeadLetters()
    key = table_key("gpu-node-a", "GPU-0")
    async with built.dedup.agent.test_context() as agent:
        await agent.put(encode_event(observation(5)), key=b"gpu-node-a", wait=False)
        await _wait_for(lambda: len(sink.batches) >= 1)
        built.dedup.table.data["gpu-node-a"] = encode_node_ranks({"GPU-0": "99"})  # ahead (v5)
        for version in (7, 7, 8):
            await agent.put(encode_event(observation(version)), key=b"gpu-node-a", wait=False)
        await _wait_for(lambda: len(sink.batches) >= 2)
        await asyncio.sleep(0.1)

    assert [r.event.status_version for r in sink.batches[-1]] == [7, 8]
    assert sink.projection.devices[("gpu-node-a", "GPU-0")].status_version == 8
    assert built.metrics.table_unjustified._value.get() == 2  # the two fresh versions
    assert device_ranks(built.dedup.table.items()) == {key: "8"}


async def test_a_batch_holding_records_twice_writes_them_once(
    tmp_path: Any, observation: Any
) -> None:
    """After a rebalance the consumer can fetch a range again while the stream still holds it
    (the two-worker determinism run in CI): the copies are the same records, not drops the
    projection lacks, so the batch is written once and the worker keeps going."""
    failures: list[BaseException] = []
    sink = FakeSink(run_hooks=False)
    built = build_worker_app(_unit_settings(tmp_path), sink=sink, on_fatal=failures.append)
    app = built.app
    app.finalize()
    app.flow_control.resume()
    built.dedup.dead_letter_topic = FakeDeadLetters()
    async with built.dedup.agent.test_context() as agent:
        for _ in range(2):
            agent.sent_offset = 0  # the same offsets again: the range fetched twice
            for version in (5, 6):
                await agent.put(encode_event(observation(version)), key=b"gpu-node-a", wait=False)
        await _wait_for(lambda: sink.calls >= 1)
        await asyncio.sleep(0.1)

    assert failures == []
    assert sink.calls == 1  # one batch held both copies
    [written] = sink.batches
    assert [(r.position.offset, r.event.status_version) for r in written] == [(0, 5), (1, 6)]
    assert built.metrics.table_unjustified._value.get() == 0
    assert built.metrics.consumed._value.get() == 4


def test_a_frozen_observation_passes_but_raises_no_rank(observation: Any) -> None:
    """Issue 15 item 2: the fold records a frozen Healthy without changing the device's version,
    so the early filter must not remember its rank (a later redelivery still reaches the store)."""
    frozen = replace(observation(9), pod_terminated=True)
    assert frozen.frozen
    items = as_log([observation(5), frozen])
    selection = select_new(items, {})
    assert selection.records == items
    assert selection.ranks == {table_key("gpu-node-a", "GPU-0"): (5, 0)}


@settings(max_examples=200, deadline=None)
@given(
    log=event_logs,
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
    terminated=st.sets(st.integers(min_value=0, max_value=40)),
)
def test_early_filter_never_changes_the_fold_with_terminated_pods(
    log: list[Event], cuts: list[int], terminated: set[int]
) -> None:
    log = [
        replace(e, pod_terminated=True)
        if n in terminated and isinstance(e, DeviceHealthObserved)
        else e
        for n, e in enumerate(log)
    ]
    items = as_log(log)
    bounds = sorted({0, len(items), *(c for c in cuts if c <= len(items))})
    table: dict[str, int] = {}
    state: dict[Any, Any] = {}
    tombstones: dict[str, Any] = {}
    for start, end in itertools.pairwise(bounds):
        selection = select_new(items[start:end], table)
        fold([r.event for r in selection.records], state, tombstones)
        for key, (rank, _) in selection.ranks.items():
            table[key] = max(rank, table.get(key, rank))
    assert state == fold(log)
