"""The dedup table keyed by node (issue 12): one entry per node, read and written once per batch.

The agent-level behaviour (what is dropped early, what reaches the store) is in
``test_dedup_unit.py``; this file checks the table's own bookkeeping against a dict standing in
for the faust table (get / set / delete / contains, and the current event it is written under).
"""

from __future__ import annotations

from typing import Any

from services.domain.events import DeviceHealthObserved
from streams.dedup_table import (
    NODE_ENTRY_MAX_BYTES,
    decode_node_ranks,
    device_ranks,
    encode_node_ranks,
    known_ranks,
    remember,
    select_new,
    table_key,
)
from tests.conftest import as_log


class CountingTable(dict[str, Any]):
    """A faust table's mapping calls, counted, with the partition of each write."""

    def __init__(self, stream: FakeStream) -> None:
        super().__init__()
        self.stream = stream
        self.reads = 0
        self.writes: list[tuple[str, Any]] = []  # (key, current event at the write)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.reads += 1
        return super().get(key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes.append((key, self.stream.current_event))
        super().__setitem__(key, value)


class FakeStream:
    current_event: Any = None

    def _set_current_event(self, event: Any) -> None:
        self.current_event = event


def _pod_change(observation: Any, node: str, version: int, gpus: int) -> list[DeviceHealthObserved]:
    return [
        observation(version, node=node, resource_id=f"GPU-{g}", pod_uid=f"{node}-pod")
        for g in range(gpus)
    ]


def test_a_pod_change_of_eight_gpus_is_one_read_and_one_write(observation: Any) -> None:
    stream = FakeStream()
    table = CountingTable(stream)
    events = _pod_change(observation, "gpu-node-a", 5, 8) + _pod_change(
        observation, "gpu-node-b", 6, 8
    )
    records = as_log(events)
    sources = [f"source-{i}" for i in range(len(records))]

    known = known_ranks(table, stream, records, sources)
    selection = select_new(records, known)
    remember(table, stream, selection, sources)

    assert known == {}
    assert table.reads == 2 + 2  # one per node to select, one per node to merge
    assert [key for key, _ in table.writes] == ["gpu-node-a", "gpu-node-b"]
    # Each entry is written under a record of its own node (its partition).
    assert [at for _, at in table.writes] == ["source-0", "source-8"]
    assert decode_node_ranks(table["gpu-node-a"]) == {f"GPU-{g}": "5" for g in range(8)}
    assert stream.current_event is None  # restored after each access

    # The same change again: every observation is dropped early, from one read per node.
    again = as_log(events, start=16)
    known = known_ranks(table, stream, again, sources)
    selection = select_new(again, known)
    assert selection.records == [] and selection.duplicates == 16


def test_the_entries_read_for_a_batch_are_not_read_again_to_merge(observation: Any) -> None:
    """``known_ranks`` hands the entries it read to ``remember``: one read per node and batch,
    and the same entries written as when ``remember`` reads them itself."""
    stream = FakeStream()
    table = CountingTable(stream)
    table["gpu-node-a"] = encode_node_ranks({"GPU-0": "3", "GPU-9": "4"})
    events = _pod_change(observation, "gpu-node-a", 5, 8) + _pod_change(
        observation, "gpu-node-b", 6, 8
    )
    records = as_log(events)
    sources = [f"source-{i}" for i in range(len(records))]
    entries: dict[str, dict[str, str]] = {}
    selection = select_new(records, known_ranks(table, stream, records, sources, entries))
    remember(table, stream, selection, sources, entries=entries)
    assert table.reads == 2
    assert decode_node_ranks(table["gpu-node-a"]) == {
        **{f"GPU-{g}": "5" for g in range(8)},
        "GPU-9": "4",
    }
    assert set(entries) == {"gpu-node-a", "gpu-node-b"}


def test_a_write_merges_into_the_node_entry_and_replaces_the_batch_devices(
    observation: Any,
) -> None:
    """A later batch of other devices keeps the entry's; a device of the batch takes the batch's
    rank even when lower (a batch written without the table corrects an entry that was ahead)."""
    stream = FakeStream()
    table = CountingTable(stream)
    table["gpu-node-a"] = encode_node_ranks({"GPU-0": "99", "GPU-7": "4"})
    records = as_log([observation(5, resource_id="GPU-0"), observation(6, resource_id="GPU-1")])
    selection = select_new(records, {})  # written without the table
    remember(table, stream, selection, ["s0", "s1"])
    assert decode_node_ranks(table["gpu-node-a"]) == {"GPU-0": "5", "GPU-1": "6", "GPU-7": "4"}


def test_refused_devices_are_not_remembered(observation: Any) -> None:
    stream = FakeStream()
    table = CountingTable(stream)
    records = as_log([observation(5, resource_id="GPU-0"), observation(5, resource_id="GPU-1")])
    selection = select_new(records, {})
    remember(table, stream, selection, ["s0", "s1"], refused={("gpu-node-a", "GPU-1")})
    assert device_ranks(table.items()) == {table_key("gpu-node-a", "GPU-0"): "5"}


def test_an_entry_that_does_not_decode_counts_as_empty(observation: Any) -> None:
    stream = FakeStream()
    table = CountingTable(stream)
    for garbage in (b"{not json", b'["GPU-0"]', b'{"GPU-0": 7, "GPU-1": "x"}'):
        table["gpu-node-a"] = garbage
        records = as_log([observation(5)])
        assert known_ranks(table, stream, records, ["s0"]) == {}
        assert select_new(records, {}).records == records


def test_an_oversized_entry_keeps_only_the_batch_or_is_removed(observation: Any) -> None:
    stream = FakeStream()
    table = CountingTable(stream)
    long_id = "GPU-" + "x" * 200
    big = {f"{long_id}-{i}": "1" for i in range(NODE_ENTRY_MAX_BYTES // 200)}
    table["gpu-node-a"] = encode_node_ranks(big)
    records = as_log([observation(5, resource_id="GPU-0")])
    remember(table, stream, select_new(records, {}), ["s0"])
    assert decode_node_ranks(table["gpu-node-a"]) == {"GPU-0": "5"}

    # A batch whose own devices do not fit: the entry is removed (nothing dropped early later).
    many = [observation(5, resource_id=f"{long_id}-{i}") for i in range(len(big))]
    records = as_log(many)
    remember(table, stream, select_new(records, {}), [f"s{i}" for i in range(len(many))])
    assert "gpu-node-a" not in table


def test_ranks_beyond_64_bits_round_trip(observation: Any) -> None:
    stream = FakeStream()
    table = CountingTable(stream)
    huge = 2**70
    records = as_log([observation(huge)])
    remember(table, stream, select_new(records, {}), ["s0"])
    assert known_ranks(table, stream, as_log([observation(huge)]), ["s0"]) == {
        table_key("gpu-node-a", "GPU-0"): huge
    }
