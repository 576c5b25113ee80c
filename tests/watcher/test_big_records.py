"""No record can stop the watcher (issue 11): the four shapes through ``run_watch`` in file mode,
into the real Kafka broker.

1. a 1.2 MB Pod (huge annotations, a huge status message) yields its normal small events;
2. a Pod whose 10,000 containers share one GPU yields one observation cut to fit, flagged;
3. what cannot be split and is over the topic's limit is dead-lettered with its reason and size
   (a ResourceSlice of 15,000 devices: one InventoryObserved of ~1.2 MB; a rejected 1.2 MB Pod:
   its original bytes cut to fit), and the records after it are still published;
4. the normal stream around them is published exactly as it is without them.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final
from uuid import uuid4

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from services.adapters.kafka.headers import HEADER_ORIGINAL_SIZE, HEADER_REASON, HEADER_STAGE
from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved, Health, PodDevicesReleased
from services.domain.inventory.events import InventoryObserved
from services.domain.node_events import WatcherTick
from services.domain.record_size import CONTAINERS_TRUNCATED
from services.domain.records import TopicRecord
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings
from tests.domain.test_pod_tracker import make_pod
from tests.domain.test_record_size import shared_gpu_pod
from tests.fakes.watch_apis import event_line
from tests.watcher.test_dra_source import resource_slice
from tests.watcher.test_run import decoded, read_all

pytestmark = pytest.mark.integration

LIMIT: Final = 1_048_576  # KafkaSettings.max_message_bytes' default
CLOCK: Final = b'{"type":"_CLOCK","now":"2026-12-01T12:00:00Z"}'


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Settings, Settings]]:
    """Two topic pairs: one for the stream with the large records, one for the normal stream."""
    made = []
    for _ in range(2):
        suffix = uuid4().hex[:12]
        made.append(
            Settings().model_copy(
                update={
                    "topic": f"test-big-{suffix}.events",
                    "dead_letter_topic": f"test-big-{suffix}.dead-letter",
                    "watcher_metrics_port": 0,
                    "topic_partitions": 2,
                }
            )
        )
    yield made[0], made[1]
    admin = AIOKafkaAdminClient(bootstrap_servers=made[0].kafka_bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([t for s in made for t in (s.topic, s.dead_letter_topic)])
    finally:
        await admin.close()


def normal_pod(uid: str, version: str, health: str = "Healthy") -> dict[str, Any]:
    return make_pod({f"GPU-{uid}": health}, version, uid=uid, name=f"pod-{uid}")


def large_pod() -> dict[str, Any]:
    """1.2 MB of annotations and status message around one healthy GPU."""
    pod = make_pod({"GPU-large": "Healthy"}, "210", uid="uid-large", name="pod-large")
    pod["metadata"]["annotations"] = {"example.com/blob": "a" * 700_000}
    pod["status"]["message"] = "m" * 500_000
    return pod


def rejected_pod() -> dict[str, Any]:
    """A 1.2 MB Pod without nodeName: dead-lettered (missing-node-name) with its bytes."""
    pod = make_pod({"GPU-nowhere": "Healthy"}, "230", uid="uid-nowhere", node=None)
    pod["metadata"]["annotations"] = {"example.com/blob": "b" * 1_200_000}
    return pod


def huge_slice() -> dict[str, Any]:
    """A ResourceSlice of 15,000 devices: one InventoryObserved over 1 MiB (one object, one
    record: nothing to split it into)."""
    obj = resource_slice("gpu-node-huge", "240")
    first = obj["spec"]["devices"][0]
    obj["spec"]["devices"] = [dict(copy.deepcopy(first), name=f"gpu-{i}") for i in range(15_000)]
    return obj


def write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def normal_head() -> list[bytes]:
    return [
        CLOCK,
        event_line("ADDED", normal_pod("uid-a", "200")),
        event_line("ADDED", normal_pod("uid-b", "201")),
    ]


def normal_tail() -> list[bytes]:
    return [
        event_line("MODIFIED", normal_pod("uid-a", "300", "Unhealthy")),
        event_line("ADDED", normal_pod("uid-c", "301")),
        event_line("DELETED", normal_pod("uid-b", "302")),
    ]


def of_normal_pods(values: list[TopicRecord]) -> list[TopicRecord]:
    normal = {"uid-a", "uid-b", "uid-c"}
    return [v for v in values if isinstance(v, WatcherTick) or getattr(v, "pod_uid", "") in normal]


async def test_no_record_stops_the_watcher(pair: tuple[Settings, Settings], tmp_path: Path) -> None:
    big, plain = pair
    large, shared, rejected, slice_ = large_pod(), shared_gpu_pod(), rejected_pod(), huge_slice()
    large_lines = [
        event_line("ADDED", large),
        event_line("ADDED", shared),
        event_line("ADDED", rejected),
        event_line("ADDED", slice_),
    ]
    assert all(len(line) > 1_200_000 for line in large_lines)
    path = write(tmp_path / "big.jsonl", [*normal_head(), *large_lines, *normal_tail()])
    summary = await asyncio.wait_for(run_watch(big, from_file=path), 120)

    # Every record after the large ones was published, and two were dead-lettered.
    assert summary.dead_lettered == 2
    assert summary.problems["containers-truncated"] == 1
    assert summary.problems["missing-node-name"] == 1
    assert summary.problems["record-too-large"] == 1
    assert summary.events_published == {"DeviceHealthObserved": 6, "PodDevicesReleased": 1}
    published = decoded(await read_all(big, big.topic, 7 + summary.ticks_sent))
    by_pod: dict[str, list[TopicRecord]] = {}
    for value in published:
        by_pod.setdefault(getattr(value, "pod_uid", value.type), []).append(value)
    assert not [v for v in published if isinstance(v, InventoryObserved)]

    # 1. The 1.2 MB Pod: its one small observation, its message not the Pod's.
    [observed] = by_pod["uid-large"]
    assert isinstance(observed, DeviceHealthObserved)
    assert (observed.resource_id, observed.health) == ("GPU-large", Health.HEALTHY)
    assert len(encode_event(observed)) < 1024
    # 2. 10,000 containers on one GPU: one observation, containers cut to fit, flagged.
    [cut] = by_pod["uid-shared"]
    assert isinstance(cut, DeviceHealthObserved)
    assert cut.resource_id == "GPU-S" and cut.health is Health.HEALTHY
    assert CONTAINERS_TRUNCATED in cut.flags and 0 < len(cut.containers) < 10_000
    assert len(encode_event(cut)) <= LIMIT - 1024

    # 3. Dead letters: the ResourceSlice at the publish stage, the rejected Pod at pod-status,
    # each with its reason, its original size, and as much of it as fits.
    letters = await read_all(big, big.dead_letter_topic, 2)
    stages = {dict(r.headers)[HEADER_STAGE].decode(): r for r in letters}
    assert set(stages) == {"publish", "pod-status"}
    published_slice = stages["publish"]
    headers = dict(published_slice.headers)
    reason = headers[HEADER_REASON].decode()
    size = int(headers[HEADER_ORIGINAL_SIZE])
    assert size > LIMIT
    assert reason.startswith(f"record-too-large: InventoryObserved of {size} bytes")
    assert f"max.message.bytes of {LIMIT}" in reason
    assert published_slice.value is not None and 0 < len(published_slice.value) < LIMIT
    assert published_slice.value.startswith(b'{"deleted":false')
    pod_letter = stages["pod-status"]
    headers = dict(pod_letter.headers)
    assert b"missing-node-name" in headers[HEADER_REASON]
    assert int(headers[HEADER_ORIGINAL_SIZE]) == len(large_lines[2])
    assert pod_letter.value is not None and large_lines[2].startswith(pod_letter.value)
    assert len(pod_letter.value) > LIMIT - 16 * 1024

    # 4. The normal stream around them, published as it is without them.
    plain_path = write(tmp_path / "plain.jsonl", [*normal_head(), *normal_tail()])
    plain_summary = await asyncio.wait_for(run_watch(plain, from_file=plain_path), 60)
    alone = decoded(await read_all(plain, plain.topic, 5 + plain_summary.ticks_sent))
    assert of_normal_pods(published) == alone
    assert [type(v) for v in alone if not isinstance(v, WatcherTick)] == [
        DeviceHealthObserved,
        DeviceHealthObserved,
        DeviceHealthObserved,
        DeviceHealthObserved,
        PodDevicesReleased,
    ]


async def test_topics_and_producer_share_one_size_limit(
    pair: tuple[Settings, Settings], tmp_path: Path
) -> None:
    settings = pair[0].model_copy(update={"max_message_bytes": 2 * LIMIT})
    path = write(tmp_path / "shared.jsonl", [CLOCK, event_line("ADDED", shared_gpu_pod())])
    summary = await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    # 2 MiB allowed: the 10,000 containers fit whole, nothing is cut or dead-lettered.
    assert summary.problems["containers-truncated"] == 0 and summary.dead_lettered == 0
    [record] = [
        v
        for v in decoded(await read_all(settings, settings.topic, 1 + summary.ticks_sent))
        if isinstance(v, DeviceHealthObserved)
    ]
    assert len(record.containers) == 10_000 and not record.flags
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        for topic in (settings.topic, settings.dead_letter_topic):
            (config,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, {"max.message.bytes": None})]
            )
            entries = config.to_object()["resources"][0]["config_entries"]
            values = {e["config_names"]: e["config_value"] for e in entries}
            assert values["max.message.bytes"] == str(2 * LIMIT)
    finally:
        await admin.close()
