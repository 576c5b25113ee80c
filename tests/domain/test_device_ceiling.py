"""The device ceiling (:mod:`services.domain.device_ceiling`): which observations are refused
depends on each node's records in log order only, never on the batch split or on how the nodes'
records interleave."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.device_ceiling import first_per_node, new_device_nodes, within_ceiling
from services.domain.directory import DeviceKey
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.log import LoggedEvent, LogPosition

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def logged(node: str, rid: str, offset: int) -> LoggedEvent:
    event = DeviceHealthObserved(
        node=node,
        namespace="ml",
        pod_name="p",
        pod_uid="u",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=rid,
        health=Health.HEALTHY,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=offset + 1,
        observed_at=T0 + timedelta(seconds=offset),
    )
    return LoggedEvent(LogPosition("t", 0, offset), event)


def run_in_batches(
    records: list[LoggedEvent], cuts: list[int], ceiling: int
) -> tuple[set[DeviceKey], list[int]]:
    """Fold ``records`` in batches cut at ``cuts``, the held devices carried between batches as
    the store carries its rows; returns the held devices and the refused offsets."""
    held: set[DeviceKey] = set()
    refused: list[int] = []
    bounds = [0, *sorted(set(cuts)), len(records)]
    for start, end in itertools.pairwise(bounds):
        batch = records[start:end]
        nodes = new_device_nodes(batch, held.__contains__)
        counts = {n: sum(1 for k in held if k[0] == n) for n in nodes}
        counts = {n: c for n, c in counts.items() if c}
        kept, over = within_ceiling(batch, held.__contains__, counts, ceiling)
        held.update(r.event.device_key for r in kept if isinstance(r.event, DeviceHealthObserved))
        refused += [o.record.position.offset for o in over]
    return held, refused


observations = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 7)), min_size=0, max_size=60
)


@settings(max_examples=200, deadline=None)
@given(observations, st.lists(st.integers(0, 60), max_size=10), st.integers(1, 5))
def test_any_batch_split_refuses_the_same_observations(
    seen: list[tuple[str, int]], cuts: list[int], ceiling: int
) -> None:
    records = [logged(n, f"GPU-{i}", k) for k, (n, i) in enumerate(seen)]
    cuts = [c for c in cuts if c < len(records)]
    assert run_in_batches(records, cuts, ceiling) == run_in_batches(records, [], ceiling)
    held, _ = run_in_batches(records, cuts, ceiling)
    for node in "abc":
        firsts = list(dict.fromkeys(f"GPU-{i}" for n, i in seen if n == node))
        assert {k for k in held if k[0] == node} == {(node, r) for r in firsts[:ceiling]}


@settings(max_examples=200, deadline=None)
@given(observations, st.randoms(use_true_random=False), st.integers(1, 5))
def test_interleaving_the_nodes_refuses_the_same_devices(
    seen: list[tuple[str, int]], rnd: object, ceiling: int
) -> None:
    """Each node's records keep their order; how nodes interleave does not matter."""
    records = [logged(n, f"GPU-{i}", k) for k, (n, i) in enumerate(seen)]
    per_node = {n: [r for r in records if r.event.node == n] for n in "abc"}
    shuffled: list[LoggedEvent] = []
    queues = {n: list(rs) for n, rs in per_node.items() if rs}
    while queues:
        node = rnd.choice(sorted(queues))  # type: ignore[attr-defined]
        shuffled.append(queues[node].pop(0))
        if not queues[node]:
            del queues[node]
    _, refused = run_in_batches(records, [], ceiling)
    _, refused_shuffled = run_in_batches(shuffled, [], ceiling)
    assert sorted(refused) == sorted(refused_shuffled)


def test_known_devices_are_never_refused_and_reasons_name_the_setting() -> None:
    records = [logged("a", "GPU-0", 0), logged("a", "GPU-9", 1), logged("a", "GPU-1", 2)]
    kept, over = within_ceiling(records, {("a", "GPU-0")}.__contains__, {"a": 1}, 1)
    assert [r.position.offset for r in kept] == [0]
    assert [o.record.position.offset for o in over] == [1, 2]
    assert "DEVICESTATE_MAX_DEVICES_PER_NODE=1" in over[0].reason
    assert "'GPU-9'" in over[0].reason
    assert [o.record.position.offset for o in first_per_node(over)] == [1]
    assert within_ceiling(records, set().__contains__, {}, None) == (records, [])
    with pytest.raises(ValueError, match="at least 1"):
        within_ceiling(records, set().__contains__, {}, 0)
