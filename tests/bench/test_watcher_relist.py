"""The re-LIST benchmark's input (bench/watcher_relist.py): the Pods it lists are read by the
watcher as the real ones are, every device Healthy and nothing dead-lettered, so the benchmark
measures the translation and publishing, not the rejection path."""

from __future__ import annotations

from bench.watcher_relist import T0, pods
from services.domain.events import DeviceHealthObserved, Health, PodsListed
from services.processes.watcher.processor import WatchProcessor


def test_the_listed_pods_translate_to_one_observation_per_gpu_and_one_snapshot_per_node() -> None:
    listed = pods(6, gpus=8, per_node=2)
    outcome = WatchProcessor(record_schema=1).relisted(listed, "100", "bench", T0)
    assert outcome.problems == [] and outcome.dead_letters == []
    observed = [e for e in outcome.events if isinstance(e, DeviceHealthObserved)]
    assert len(observed) == 48 and {e.health for e in observed} == {Health.HEALTHY}
    assert len({(e.node, e.resource_id) for e in observed}) == 48  # every GPU its own
    snapshots = [e for e in outcome.events if isinstance(e, PodsListed)]
    assert sorted(s.node for s in snapshots) == [f"bench-node-0000{i}" for i in range(3)]
