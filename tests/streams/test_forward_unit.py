"""Forwarding to the governance topic without a broker: what a batch of the health topic becomes
(:mod:`streams.forward`), and what the health agent hands the store for it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from services.domain.batch import PendingCommit, Transition
from services.domain.directory import apply_event
from services.domain.event_codec import encode_event
from services.domain.events import ClaimRef, DeviceSource, Health
from services.domain.governance.input_batch import decode_records
from services.domain.governance.input_codec import decode_input, decode_keyed, encode_input
from services.domain.governance.inputs import HealthTransition, MergeKey, PartitionWatermark
from services.domain.log import LoggedEvent, LogPosition
from services.domain.node_events import (
    NodeHeartbeat,
    NodeLabelsChanged,
    NodeResourcesChanged,
    WatcherTick,
    encode_node_event,
)
from streams.forward import (
    BatchView,
    Forwarder,
    LoggedNodeEvent,
    governance_records,
    health_transition,
    record_key,
)
from tests.conftest import T0, TOPIC
from tests.fakes.batch_sink import FakeSink
from tests.streams.test_dedup_unit import _run_agent


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pos(partition: int, offset: int) -> LogPosition:
    return LogPosition(TOPIC, partition, offset)


def transition_of(logged: LoggedEvent, state: dict[Any, Any] | None = None) -> Transition:
    [change] = apply_event(state or {}, logged.event)
    assert change.transition
    assert logged.event.type == "DeviceHealthObserved"
    return Transition(logged.position, change, logged.event)  # type: ignore[arg-type]


def commit(
    transitions: Sequence[Transition],
    applied: dict[tuple[str, int], int] | None = None,
    last: dict[tuple[str, int], datetime] | None = None,
) -> PendingCommit:
    return PendingCommit(list(transitions), applied or {}, last or {})


def view(
    records: Sequence[tuple[LogPosition, datetime]],
    node_events: Sequence[LoggedNodeEvent] = (),
    clamped: Sequence[LogPosition] = (),
) -> BatchView:
    return BatchView(
        order={p: i for i, (p, _) in enumerate(records)},
        node_events=list(node_events),
        times=dict(records),
        clamped=set(clamped),
    )


def key(seconds: float, partition: int, offset: int, index: int = 0) -> MergeKey:
    return MergeKey(at(seconds), partition, offset, index)


def test_a_transition_becomes_a_health_transition(observation: Any) -> None:
    event = observation(
        42,
        Health.UNHEALTHY,
        at=5,
        message="XID 79",
        source=DeviceSource.DRA,
        resource_name="claim:gpu",
        claim=ClaimRef("gpu", None, "train-0-gpu-x7"),
    )
    [change] = apply_event({}, event)
    record = health_transition(Transition(pos(2, 17), change, event))
    assert record == HealthTransition(
        node="gpu-node-a",
        resource_id="GPU-0",
        resource_name="claim:gpu",
        source=DeviceSource.DRA,
        health=Health.UNHEALTHY,
        status_version=42,
        observed_at=at(5),
        partition=2,
        offset=17,
        message="XID 79",
        raw_health=None,
        resource_claim="train-0-gpu-x7",
        pods=("ml/train-0",),
    )
    assert decode_input(encode_input(record)) == record


def test_pods_are_every_holder_after_the_change_sorted(observation: Any) -> None:
    state: dict[Any, Any] = {}
    first = observation(1, pod_uid="uid-2", pod_name="zeta", namespace="b")
    [change] = apply_event(state, first)
    state[change.key] = change.record
    second = observation(2, Health.UNHEALTHY, pod_uid="uid-1", pod_name="alpha", namespace="a")
    [change] = apply_event(state, second)
    record = health_transition(Transition(pos(0, 1), change, second))
    assert record.pods == ("a/alpha", "b/zeta")
    assert record.resource_claim is None


def test_batch_order_with_merge_keys_then_one_progress_mark_per_partition(
    observation: Any,
) -> None:
    obs = [
        LoggedEvent(pos(0, 10), observation(1, Health.UNHEALTHY, at=3)),
        LoggedEvent(pos(1, 4), observation(7, Health.UNKNOWN, at=4, node="gpu-node-b")),
    ]
    heartbeat = NodeHeartbeat("gpu-node-a", renewed_at=at(5), observed_at=at(6))
    resources = NodeResourcesChanged(
        "gpu-node-b", (("nvidia.com/gpu", 8),), (("nvidia.com/gpu", 7),), 99, at(2)
    )
    tick = WatcherTick(partition=1, observed_at=at(9))
    nodes = [
        LoggedNodeEvent(pos(0, 11), heartbeat),
        LoggedNodeEvent(pos(1, 3), resources),
        LoggedNodeEvent(pos(1, 5), tick),
    ]
    # batch order: obs p1/4 came first, then the resources change, the heartbeat, obs p0/10, tick
    times = [
        (pos(1, 4), at(4)),
        (pos(1, 3), at(2)),
        (pos(0, 11), at(6)),
        (pos(0, 10), at(3)),
        (pos(1, 5), at(9)),
    ]
    batch = view(times, nodes)
    out = governance_records(batch, commit([transition_of(o) for o in obs]), partitions=3)
    records = [r for r, _ in out]
    assert [type(r).__name__ for r in records] == [
        "HealthTransition",
        "NodeResourcesChanged",
        "NodeHeartbeat",
        "HealthTransition",
        "WatcherTick",  # a clock record of the merge
        "PartitionWatermark",
        "PartitionWatermark",
    ]
    assert records[1] == resources and records[2] == heartbeat and records[4] == tick
    assert [k for _, k in out] == [
        key(4, 1, 4),
        key(2, 1, 3),
        key(6, 0, 11),
        key(3, 0, 10),
        key(9, 1, 5),
        None,
        None,
    ]
    assert records[5:] == [
        PartitionWatermark(partition=0, partitions=3, event_time=at(6)),
        PartitionWatermark(partition=1, partitions=3, event_time=at(9)),  # the tick counts
    ]
    assert [record_key(r) for r in records] == [
        b"gpu-node-b",
        b"gpu-node-b",
        b"gpu-node-a",
        b"gpu-node-a",
        b"~tick/1",
        b"~watermark/0",
        b"~watermark/1",
    ]


def test_merge_keys_never_go_back_along_a_partition(observation: Any) -> None:
    """A record older than one before it in its partition (or than the recorded newest time)
    takes that time as its key: keys are ordered like offsets within a partition."""
    late = LoggedEvent(pos(0, 8), observation(1, Health.UNHEALTHY, at=2))
    batch = view(
        [(pos(0, 7), at(5)), (pos(0, 8), at(2)), (pos(1, 3), at(1))],
        [
            LoggedNodeEvent(pos(0, 7), WatcherTick(0, at(5))),
            LoggedNodeEvent(pos(1, 3), WatcherTick(1, at(1))),
        ],
    )
    out = governance_records(
        batch, commit([transition_of(late)], last={(TOPIC, 1): at(4)}), partitions=2
    )
    assert [k for _, k in out] == [key(5, 0, 7), key(5, 0, 8), key(4, 1, 3), None]
    transition = out[1][0]
    assert isinstance(transition, HealthTransition) and transition.observed_at == at(2)
    assert out[3][0] == PartitionWatermark(0, 2, at(5))  # partition 1 did not pass at(4)


def test_a_clamped_record_is_forwarded_at_its_bound(observation: Any) -> None:
    """The batch's time of a record whose observedAt ran ahead of the broker is the bound; the
    transition carries it too, so no timer of the governor is set from the future."""
    future = LoggedEvent(pos(0, 1), observation(1, Health.UNKNOWN, at=10 * 365 * 86400))
    batch = view([(pos(0, 1), at(300))], clamped=[pos(0, 1)])
    out = governance_records(batch, commit([transition_of(future)]), partitions=1)
    (transition, k), (mark, none) = out
    assert k == MergeKey(at(300), 0, 1, 0, clamped=True) and k.clamped
    assert isinstance(transition, HealthTransition) and transition.observed_at == at(300)
    assert mark == PartitionWatermark(0, 1, at(300)) and none is None


def test_no_progress_mark_unless_later_than_the_recorded_one() -> None:
    tick0, tick1 = WatcherTick(0, at(10)), WatcherTick(1, at(10))
    batch = view(
        [(pos(0, 5), at(10)), (pos(1, 5), at(10))],
        [LoggedNodeEvent(pos(0, 5), tick0), LoggedNodeEvent(pos(1, 5), tick1)],
    )
    out = governance_records(
        batch, commit([], last={(TOPIC, 0): at(10), (TOPIC, 1): at(8)}), partitions=2
    )
    assert out == [
        (tick0, key(10, 0, 5)),
        (tick1, key(10, 1, 5)),
        (PartitionWatermark(1, 2, at(10)), None),
    ]


def test_records_at_or_before_the_recorded_offset_are_not_forwarded_again(
    observation: Any,
) -> None:
    heartbeat = NodeHeartbeat("gpu-node-a", renewed_at=at(5), observed_at=at(20))
    batch = view(
        [(pos(0, 7), at(20)), (pos(0, 8), at(3))],
        [LoggedNodeEvent(pos(0, 7), heartbeat)],
    )
    # offset 7 was committed already (a redelivery); the store passes no transition for it either
    out = governance_records(batch, commit([], applied={(TOPIC, 0): 7}), partitions=1)
    assert out == [(PartitionWatermark(0, 1, at(3)), None)]
    assert governance_records(batch, commit([], applied={(TOPIC, 0): 8}), partitions=1) == []


async def test_forwarder_sends_encoded_records_and_counts_them(observation: Any) -> None:
    sent: list[list[tuple[bytes, bytes, str]]] = []
    counted: list[tuple[str, int]] = []

    async def send(records: Sequence[tuple[bytes, bytes, str]]) -> None:
        sent.append(list(records))

    forwarder = Forwarder(
        send, partitions=lambda: 3, on_sent=lambda k, n: counted.append((k, n)), batch_records=1
    )
    logged = LoggedEvent(pos(2, 0), observation(3, Health.UNKNOWN, at=1))
    hook = forwarder.before_commit(view([(pos(2, 0), at(1))]))
    await hook(commit([transition_of(logged)]))
    [batch] = sent
    decoded = [decode_keyed(v) for _, v, _ in batch]
    assert [r.type for r, _ in decoded] == ["HealthTransition", "PartitionWatermark"]
    assert [k for _, k in decoded] == [key(1, 2, 0), None]  # the merge key travels in the body
    assert [t for _, _, t in batch] == ["HealthTransition", "PartitionWatermark"]  # type headers
    assert sorted(counted) == [("HealthTransition", 1), ("PartitionWatermark", 1)]
    assert forwarder.forwarded == 2 and forwarder.sent == 2

    await forwarder.before_commit(view([]))(commit([]))  # nothing to forward: nothing sent
    assert len(sent) == 1

    # The default (issue 12): the same records in one ForwardedBatch, in order, counted by type.
    counted.clear()
    packing = Forwarder(send, partitions=lambda: 3, on_sent=lambda k, n: counted.append((k, n)))
    await packing.before_commit(view([(pos(2, 0), at(1))]))(commit([transition_of(logged)]))
    [(record_key_, value, kind)] = sent[1]
    assert (record_key_, kind) == (b"~forwarded-batch", "ForwardedBatch")
    assert decode_records(value, kind) == decoded
    assert sorted(counted) == [("HealthTransition", 1), ("PartitionWatermark", 1)]
    assert packing.forwarded == 2 and packing.sent == 1


async def test_agent_keeps_node_events_out_of_the_directory_but_hands_them_over(
    tmp_path: Any, observation: Any
) -> None:
    from services.domain.records import encode_record
    from tests.kafka.test_records import inventory_events

    heartbeat = NodeHeartbeat("gpu-node-a", renewed_at=at(1), observed_at=at(2))
    inventory = inventory_events()[0]
    payloads = [
        encode_event(observation(5, at=1)),
        encode_node_event(heartbeat),
        encode_event(observation(5, at=3)),  # a duplicate: dropped early by the table
        encode_node_event(WatcherTick(0, at(4))),
        encode_record(inventory),  # a DRA inventory record: neither directory nor dead letter
    ]
    sink = FakeSink(run_hooks=False)
    _, dead = await _run_agent(tmp_path, payloads, sink, expected_calls=1)
    assert dead.sent == []
    [written] = sink.batches
    assert [r.position.offset for r in written] == [0]
    [logged] = sink.logged
    assert sorted((p.offset, t) for p, t in logged.event_times) == [
        (1, at(2)),
        (2, at(3)),
        (3, at(4)),
        (4, inventory.observed_at),
    ]
    [hook] = sink.hooks
    assert callable(hook)


# --- identities and inventory conflicts (issue 4) ---------------------------------------------


def test_a_transition_carries_the_device_id_only_when_resolved_or_as_reported(
    observation: Any,
) -> None:
    from services.domain.inventory.identity import Identity, IdentityStatus

    logged = LoggedEvent(
        pos(0, 3), observation(1, source=DeviceSource.DRA, resource_id="cdi=x-gpu-2")
    )
    transition = transition_of(logged)
    for status, device_id in (
        (IdentityStatus.RESOLVED, "gpu.example.com/gpu-node-a/gpu-2"),
        (IdentityStatus.REPORTED, "gpu.example.com/gpu-node-a/gpu-2"),
        (IdentityStatus.AMBIGUOUS, None),
        (IdentityStatus.UNRESOLVED, None),
    ):
        identity = Identity(
            "gpu.example.com/gpu-node-a/gpu-2", DeviceSource.DRA, status, uuid="GPU-1234"
        )
        record = health_transition(transition, identity)
        assert (record.device_id, record.identity, record.uuid) == (
            device_id,
            status.value,
            "GPU-1234",
        )
        assert record.device_key == ("gpu-node-a", device_id or "cdi=x-gpu-2")
        assert decode_input(encode_input(record)) == record
    plain = health_transition(transition)
    assert (plain.device_id, plain.identity, plain.uuid) == (None, None, None)


def test_conflicts_follow_the_record_that_raised_them(observation: Any) -> None:
    from services.domain.governance.inputs import InventoryConflict
    from services.domain.inventory.fold import ConflictChange, ConflictRow, InventoryPlan
    from services.domain.inventory.identity import Identity, IdentityStatus

    first = LoggedEvent(pos(0, 0), observation(1, at=1))
    second = LoggedEvent(pos(0, 2), observation(1, at=3, resource_id="GPU-1"))
    resources = NodeResourcesChanged(
        "gpu-node-a", (("example.com/gpu", 8),), (("example.com/gpu", 8),), 4, at(2)
    )
    nodes = [LoggedNodeEvent(pos(0, 1), resources)]
    batch = view([(pos(0, 0), at(1)), (pos(0, 1), at(2)), (pos(0, 2), at(3))], nodes)

    def change(position: LogPosition, subject: str, active: bool, seconds: float) -> ConflictChange:
        row = ConflictRow(
            "plugin-and-dra", "gpu-node-a", subject, "why", active, at(0), at(seconds)
        )
        return ConflictChange(position, at(seconds), row)

    plan = InventoryPlan(
        resolved={
            first.position: Identity("GPU-0", DeviceSource.DEVICE_PLUGIN, IdentityStatus.REPORTED),
        },
        changes=[
            change(pos(0, 0), "GPU-0", True, 1),
            change(pos(0, 1), "example.com/gpu", True, 2),
            change(pos(0, 2), "GPU-0", False, 3),
        ],
    )
    pending = PendingCommit([transition_of(first), transition_of(second)], {}, {}, plan)
    keyed = governance_records(batch, pending, partitions=1)
    out = [r for r, _ in keyed]
    assert [type(r).__name__ for r in out] == [
        "HealthTransition",
        "InventoryConflict",
        "NodeResourcesChanged",
        "InventoryConflict",
        "HealthTransition",
        "InventoryConflict",
        "PartitionWatermark",
    ]
    # a conflict follows its record in the merge too: same source, next index
    assert [k for _, k in keyed][:2] == [key(1, 0, 0, 0), key(1, 0, 0, 1)]
    assert isinstance(out[0], HealthTransition) and out[0].device_id == "GPU-0"
    assert isinstance(out[4], HealthTransition) and out[4].identity is None  # not resolved
    conflicts = [r for r in out if isinstance(r, InventoryConflict)]
    assert [(c.subject, c.active, c.observed_at) for c in conflicts] == [
        ("GPU-0", True, at(1)),
        ("example.com/gpu", True, at(2)),
        ("GPU-0", False, at(3)),
    ]
    assert all(decode_input(encode_input(c)) == c for c in conflicts)
    assert record_key(conflicts[0]) == b"gpu-node-a"


def test_a_device_identified_late_is_forwarded_after_the_record_that_identified_it(
    observation: Any,
) -> None:
    """Issue 10: a claim read after the Pod's observation identifies the device; the governor is
    told after that record, so it merges what it held under the CDI-form resourceID."""
    from services.domain.governance.inputs import DeviceIdentified
    from services.domain.inventory.fold import IdentityResolved, InventoryPlan
    from services.domain.inventory.identity import Identity, IdentityStatus

    seen = LoggedEvent(
        pos(0, 0), observation(1, at=1, source=DeviceSource.DRA, resource_id="cdi=x-gpu-2")
    )
    gpu = Identity("gpu.example.com/gpu-node-a/gpu-2", DeviceSource.DRA, IdentityStatus.RESOLVED)
    unresolved = Identity("cdi=x-gpu-2", DeviceSource.DRA, IdentityStatus.UNRESOLVED)
    plan = InventoryPlan(
        resolved={seen.position: unresolved},
        identified=[IdentityResolved(pos(1, 0), at(2), "gpu-node-a", "cdi=x-gpu-2", gpu)],
    )
    batch = view([(pos(0, 0), at(1)), (pos(1, 0), at(2))])
    keyed = governance_records(batch, PendingCommit([transition_of(seen)], {}, {}, plan), 2)
    out = [r for r, _ in keyed]
    assert [type(r).__name__ for r in out] == [
        "HealthTransition",
        "DeviceIdentified",
        "PartitionWatermark",
        "PartitionWatermark",
    ]
    # the identification takes its place in event time at the record that identified it
    assert [k for _, k in keyed][:2] == [key(1, 0, 0), key(2, 1, 0)]
    assert isinstance(out[0], HealthTransition) and out[0].device_id is None
    assert out[1] == DeviceIdentified(
        "gpu-node-a", "cdi=x-gpu-2", gpu.device_id, at(2), partition=1, offset=0
    )
    assert decode_input(encode_input(out[1])) == out[1]
    assert record_key(out[1]) == b"gpu-node-a"


async def test_agent_hands_the_inventory_its_records_in_batch_order(
    tmp_path: Any, observation: Any
) -> None:
    from services.domain.records import encode_record
    from tests.kafka.test_records import inventory_events

    inventory = inventory_events()[0]
    resources = NodeResourcesChanged("gpu-node-a", (), (), 1, at(2))
    payloads = [
        encode_record(inventory),
        encode_event(observation(5, at=1)),
        encode_node_event(WatcherTick(0, at(4))),
        encode_node_event(resources),
        encode_event(observation(5, at=3)),  # a duplicate: dropped early, still handed over
    ]
    sink = FakeSink(run_hooks=False)
    await _run_agent(tmp_path, payloads, sink, expected_calls=1)
    [logged] = sink.logged
    items = logged.inventory
    assert items is not None
    assert [(p.offset, type(r).__name__) for p, r in items] == [
        (0, "InventoryObserved"),
        (1, "DeviceHealthObserved"),
        (3, "NodeResourcesChanged"),
        (4, "DeviceHealthObserved"),
    ]


def test_workload_facts_follow_the_record_that_made_them(observation: Any) -> None:
    """Issue 13: a ``WorkloadOnDevice`` of the batch is forwarded after the other records of its
    position (the device's transition first), in event time, at its clamped bound when clamped."""
    from services.domain.migration.records import WorkloadOnDevice

    seen = LoggedEvent(pos(0, 0), observation(1, at=1))
    fact = WorkloadOnDevice(
        "gpu-node-a", "gpu-0", "job-uid", "uid-a", "ml", "a", "checkpointed", 7, at(1)
    )
    late = WorkloadOnDevice(
        "gpu-node-a",
        "gpu-0",
        "job-uid",
        "uid-a",
        "ml",
        "a",
        "checkpointed",
        8,
        at(9),
        present=False,
    )
    batch = view([(pos(0, 0), at(1)), (pos(0, 1), at(3))], clamped=[pos(0, 1)])
    pending = PendingCommit(
        [transition_of(seen)], {}, {}, workloads_on_devices=[(pos(0, 1), late), (pos(0, 0), fact)]
    )
    keyed = governance_records(batch, pending, 1)
    assert [type(r).__name__ for r, _ in keyed] == [
        "HealthTransition",
        "WorkloadOnDevice",
        "WorkloadOnDevice",
        "PartitionWatermark",
    ]
    assert [k for _, k in keyed][:3] == [
        key(1, 0, 0),
        key(1, 0, 0, 1),
        MergeKey(at(3), 0, 1, 0, True),
    ]
    assert keyed[1][0] == fact
    clamped = keyed[2][0]
    assert isinstance(clamped, WorkloadOnDevice) and clamped.observed_at == at(3)
    assert decode_keyed(encode_input(*keyed[1])) == keyed[1]
    assert record_key(fact) == b"gpu-node-a"


def test_a_failure_on_a_node_is_forwarded_in_event_time_at_its_bound_when_clamped() -> None:
    """Issue 16: each ``NodeFailureObserved`` of the batch (an increase of a failure's count) is
    forwarded with its record's merge key, at its clamped bound when clamped, keyed by node."""
    from services.domain.governance.inputs_failures import NodeFailureObserved

    first = NodeFailureObserved("gpu-node-a", at(1), "ev-1", 3, 3, "retryable", "Failed")
    grown = NodeFailureObserved("gpu-node-a", at(9), "ev-1", 5, 2, "retryable", "Failed")
    batch = view([(pos(0, 0), at(1)), (pos(0, 1), at(3))], clamped=[pos(0, 1)])
    pending = PendingCommit([], {}, {}, failures_on_nodes=[(pos(0, 1), grown), (pos(0, 0), first)])
    keyed = governance_records(batch, pending, 1)
    assert [type(r).__name__ for r, _ in keyed] == [
        "NodeFailureObserved",
        "NodeFailureObserved",
        "PartitionWatermark",
    ]
    assert [k for _, k in keyed][:2] == [key(1, 0, 0), MergeKey(at(3), 0, 1, 0, True)]
    assert keyed[0][0] == first
    clamped = keyed[1][0]
    assert isinstance(clamped, NodeFailureObserved) and clamped.observed_at == at(3)
    assert (clamped.increase, clamped.occurrences) == (2, 5)
    assert decode_keyed(encode_input(*keyed[1])) == keyed[1]
    assert record_key(first) == b"gpu-node-a"


def test_a_pods_ready_latencies_are_forwarded_in_event_time_at_its_bound_when_clamped() -> None:
    """Issue 16: each ``NodeReadyObserved`` of the batch (a Pod's bound-to-Ready stages) is
    forwarded with its record's merge key, at its clamped bound when clamped, keyed by node."""
    from services.domain.governance.inputs_ready import NodeReadyObserved, ReadySample

    sample = ReadySample("example.com/gpu", "device-plugin", 3.0, ("gpu.example.com",))
    first = NodeReadyObserved("gpu-node-a", at(1), "uid-a", (sample,))
    late = NodeReadyObserved("gpu-node-a", at(9), "uid-b", (sample,))
    batch = view([(pos(0, 0), at(1)), (pos(0, 1), at(3))], clamped=[pos(0, 1)])
    pending = PendingCommit([], {}, {}, ready_on_nodes=[(pos(0, 1), late), (pos(0, 0), first)])
    keyed = governance_records(batch, pending, 1)
    assert [type(r).__name__ for r, _ in keyed] == [
        "NodeReadyObserved",
        "NodeReadyObserved",
        "PartitionWatermark",
    ]
    assert [k for _, k in keyed][:2] == [key(1, 0, 0), MergeKey(at(3), 0, 1, 0, True)]
    assert keyed[0][0] == first
    clamped = keyed[1][0]
    assert isinstance(clamped, NodeReadyObserved) and clamped.observed_at == at(3)
    assert clamped.pod_uid == "uid-b"
    assert decode_keyed(encode_input(*keyed[1])) == keyed[1]
    assert record_key(first) == b"gpu-node-a"


def test_a_nodes_labels_are_forwarded_with_their_merge_key_and_their_bound_when_clamped() -> None:
    """issue 16: ``NodeLabelsChanged`` goes to the governor unchanged, in event time."""
    labels = NodeLabelsChanged("gpu-node-a", (("pool", "east"),), at(10 * 365 * 86400))
    batch = view([(pos(0, 3), at(300))], [LoggedNodeEvent(pos(0, 3), labels)], clamped=[pos(0, 3)])
    (forwarded, k), _ = governance_records(batch, commit([]), partitions=1)
    assert forwarded == NodeLabelsChanged("gpu-node-a", (("pool", "east"),), at(300))
    assert k == MergeKey(at(300), 0, 3, 0, clamped=True)
    assert decode_keyed(encode_input(forwarded, k)) == (forwarded, k)


async def test_agent_hands_a_nodes_labels_to_the_inventory_and_the_forwarder(
    tmp_path: Any,
) -> None:
    labels = NodeLabelsChanged("gpu-node-a", (("pool", "east"),), at(2))
    sink = FakeSink(run_hooks=False)
    await _run_agent(tmp_path, [encode_node_event(labels)], sink, expected_calls=1)
    [logged] = sink.logged
    assert [(p.offset, r) for p, r in logged.inventory or ()] == [(0, labels)]
