"""The health agent files ``PodWorkloadObserved`` records (issue 13 item 1) apart from the
directory's: to ``LoggedBatch.workloads``, with their event times, never to ``records`` and never
through the early dedup filter."""

from __future__ import annotations

from typing import Any

from services.domain.event_codec import encode_event
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved, StageSample
from services.domain.records import encode_record
from services.domain.workloads.events import PodWorkloadObserved
from tests.conftest import T0
from tests.fakes.batch_sink import FakeSink
from tests.streams.test_dedup_unit import _run_agent


async def test_workload_records_reach_the_sink_beside_the_observations(
    tmp_path: Any, observation: Any
) -> None:
    record = PodWorkloadObserved("gpu-node-a", "ml", "train-0", "uid-1", 5, T0)
    again = PodWorkloadObserved("gpu-node-a", "ml", "train-0", "uid-1", 5, T0)
    payloads = [encode_event(observation(5)), encode_record(record), encode_record(again)]
    sink = FakeSink(run_hooks=False)
    await _run_agent(tmp_path, payloads, sink, expected_calls=1)
    [batch] = sink.logged
    assert [r.event.type for r in batch.records] == ["DeviceHealthObserved"]
    assert [(p.offset, r) for p, r in batch.workloads] == [(1, record), (2, again)]
    assert {p.offset for p, _ in batch.event_times} >= {1, 2}
    assert sink.projection.workloads == {"uid-1": record}
    assert sink.projection.offsets[("unit-events", 0)] == 2


async def test_lifecycle_records_reach_the_sink_beside_the_observations(
    tmp_path: Any, observation: Any
) -> None:
    """Issue 16 item 5: ``PodLifecycleObserved`` goes to ``LoggedBatch.lifecycles`` with its event
    time, never to ``records``."""
    stage = StageSample(Stage.POD_READY, "gpu.example.com", DevicePath.DRA, 4.0)
    record = PodLifecycleObserved("gpu-node-a", "ml", "train-0", "uid-1", T0, (stage,))
    payloads = [encode_event(observation(5)), encode_record(record)]
    sink = FakeSink(run_hooks=False)
    await _run_agent(tmp_path, payloads, sink, expected_calls=1)
    [batch] = sink.logged
    assert [r.event.type for r in batch.records] == ["DeviceHealthObserved"]
    assert [(p.offset, r) for p, r in batch.lifecycles] == [(1, record)]
    assert 1 in {p.offset for p, _ in batch.event_times}
    assert sink.projection.lifecycle_stages == {
        ("uid-1", "pod_ready", "gpu.example.com", "dra", ""): 4.0
    }
