"""run_watch in file mode, end to end into the real Kafka broker (``devicestate stack up``)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient

from services.config import Settings
from services.domain.events import DeviceHealthObserved, decode_event, parse_time
from services.watcher.run import run_watch
from tests.watcher.test_kube_source import FakeApiServer, bookmark, event_line, fake_server, pod

__all__ = ["fake_server"]  # the fixture, re-used from the source tests

pytestmark = pytest.mark.integration

BUNDLED = Path(__file__).parents[2] / "services" / "examples"


@pytest.fixture
async def settings() -> AsyncIterator[Settings]:
    suffix = uuid4().hex[:12]
    settings = Settings().model_copy(
        update={
            "topic": f"test-watch-{suffix}.events",
            "dead_letter_topic": f"test-watch-{suffix}.dead-letter",
            "watcher_metrics_port": 0,
        }
    )
    yield settings
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([settings.topic, settings.dead_letter_topic])
    finally:
        await admin.close()


async def read_all(
    settings: Settings, topic: str, count: int
) -> list[ConsumerRecord[bytes, bytes]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        async with asyncio.timeout(30):
            while len(records) < count:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def test_demo_stream_is_published_with_dead_letters(settings: Settings) -> None:
    path = BUNDLED / "demo-stream.jsonl"
    summary = await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    assert summary.events_published == {"DeviceHealthObserved": 23, "PodDevicesReleased": 1}
    assert summary.dead_lettered == 2
    assert summary.problems["missing-node-name"] == 1
    assert summary.problems["conflicting-health"] == 1
    assert summary.problems["unknown-event-type"] == 1
    assert summary.problems["watch-error"] == 1
    assert summary.resource_version == "95021"
    assert "24 events published" in summary.line()

    records = await read_all(settings, settings.topic, 24)
    events = [decode_event(r.value) for r in records if r.value is not None]
    assert len(events) == 24
    assert all(r.key == e.node.encode() for r, e in zip(records, events, strict=True))
    # observedAt comes from the stream's _CLOCK lines, not from the wall clock.
    unhealthy = next(
        e
        for e in events
        if isinstance(e, DeviceHealthObserved)
        and e.resource_id == "GPU-a5ced723-33de-5eef-89d7-909771744097"
        and e.status_version == 70344
    )
    assert unhealthy.observed_at == parse_time("2026-11-29T10:42:10Z")

    lines = path.read_bytes().splitlines()
    letters = await read_all(settings, settings.dead_letter_topic, 2)
    by_source = {dict(r.headers)["devicestate-source"].decode(): r for r in letters}
    assert set(by_source) == {f"file:{path}:{n}" for n in (28, 35)}
    assert by_source[f"file:{path}:28"].value == lines[27]  # stream-10 line 5: no nodeName
    assert dict(by_source[f"file:{path}:28"].headers)["devicestate-stage"] == b"pod-status"
    assert b"missing-node-name" in dict(by_source[f"file:{path}:28"].headers)["devicestate-reason"]


async def test_truncated_line_is_dead_lettered_with_its_line_number(settings: Settings) -> None:
    path = BUNDLED / "stream-10b-truncated-line.jsonl"
    summary = await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    assert summary.problems == {"broken-line": 1}
    assert summary.events_published == {"DeviceHealthObserved": 2}
    (letter,) = await read_all(settings, settings.dead_letter_topic, 1)
    headers = dict(letter.headers)
    assert headers["devicestate-source"] == f"file:{path}:3".encode()
    assert headers["devicestate-stage"] == b"watch-line"
    assert letter.value == path.read_bytes().splitlines()[2]


async def test_live_mode_lists_watches_and_stops_on_sigterm(
    settings: Settings, fake_server: tuple[FakeApiServer, object], tmp_path: Path
) -> None:
    server, _ = fake_server
    server.watch_script = [
        [
            event_line("MODIFIED", pod("a", "101", **{"GPU-0": "Unhealthy"})) + b"\n",
            bookmark("102") + b"\n",
        ],
        ["hold"],
    ]
    host, port = server.address
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: 'http://{host}:{port}'}}}}]\n"
        "users: [{name: watcher, user: {token: not-a-secret}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: watcher}}]\n"
    )
    live = settings.model_copy(update={"kubeconfig": str(kubeconfig)})
    watching = asyncio.create_task(run_watch(live))
    async with asyncio.timeout(30):
        await server.holding.wait()  # listed, watched, now idle in the second watch
    os.kill(os.getpid(), signal.SIGTERM)
    summary = await asyncio.wait_for(watching, 30)
    assert summary.events_published == {"DeviceHealthObserved": 4}  # a, b, c, then a changed
    assert summary.resource_version == "102"
    assert summary.pods_tracked == 3
    assert [r.get("resourceVersion") for r in server.requests if r.get("watch")] == ["100", "102"]
    records = await read_all(settings, settings.topic, 4)
    versions = sorted(decode_event(r.value).status_version or 0 for r in records if r.value)
    assert versions == [10, 11, 12, 101]
