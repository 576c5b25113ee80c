"""The Faust app of the stream worker, built from :class:`~services.runtime.config.WorkerProcessSettings`.

No module-level app: :func:`create_app` builds a fresh one per call (the worker, each test), with
the dedup agent (:mod:`streams.dedup`, which forwards to the governance topic through
:mod:`streams.forward`) and the governor agent (:mod:`streams.governor`) already registered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import faust
from faust.transport.drivers.aiokafka import Producer as AiokafkaProducer

from services.adapters.kafka.topics import replication_configs
from services.domain.governance.intake import StepFn
from services.runtime.config import KafkaSettings, WorkerProcessSettings
from streams.dedup import BatchSink, DeviceDedup
from streams.forward import Forwarder, topic_sender
from streams.forward_batch import batch_bytes_limit
from streams.governor import GovernanceSink, Governor
from streams.metrics import WorkerMetrics


@dataclass(frozen=True, slots=True)
class WorkerApp:
    """A Faust app and the components registered on it."""

    app: Any  # faust.App (faust is not type-checked)
    dedup: DeviceDedup
    metrics: WorkerMetrics
    governor: Governor
    forwarder: Forwarder

    def begin_shutdown(self) -> None:
        """Bound the retries of the batches in flight (see :mod:`streams.batchwrite`)."""
        self.dedup.begin_shutdown()
        self.governor.begin_shutdown()


def broker_urls(bootstrap_servers: str) -> list[str]:
    """``"h1:9092,h2:9092"`` -> ``["kafka://h1:9092", "kafka://h2:9092"]``."""
    return [
        f"kafka://{server.strip()}" for server in bootstrap_servers.split(",") if server.strip()
    ]


def assignor_topic(settings: KafkaSettings) -> str:
    """The topic faust's partition assignor declares for the group (``<app id>-__assignor-__leader``,
    one partition); the worker has it created with the other topics, so it gets their replication."""
    return f"{settings.consumer_group}-__assignor-__leader"


class IdempotentProducer(AiokafkaProducer):  # type: ignore[misc]
    """faust's producer, idempotent like every producer of the service (``acks="all"`` and
    ``enable_idempotence``; faust makes it so only for exactly-once): a dead letter, changelog
    entry or forwarded record that is sent again after a broker failover is written once."""

    def _settings_extra(self) -> Mapping[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


def faust_settings(settings: WorkerProcessSettings, replication: int = 1) -> dict[str, Any]:
    """Faust configuration for the worker; ``replication``: the replicas of the topics faust
    creates (changelogs), as :func:`~services.adapters.kafka.topics.cluster_replication_factor` gives.

    - ``consumer_auto_offset_reset="earliest"``: a new group starts from the topic's beginning,
      and table recovery never skips changelog segments (see the stack notes).
    - ``producer_acks=-1``: dead letters and changelog entries are on every in-sync replica
      before the batch's offsets are committed.
    - ``web_enabled=False``: the worker's metrics are served by :mod:`streams.metrics`.
    - ``stream_buffer_maxsize``: room for at least two batches, so ``take_events`` can fill the
      next batch while one is being written.
    - ``broker_session_timeout=10``: a restarted worker gets its partitions back ~10 s after a
      crash instead of 60 s.
    - ``producer_max_batch_size`` 256 KiB (faust's default is 16 KiB), never above
      ``max_message_bytes``: the dead letters of one node all go to one partition, and with the
      idempotent producer one batch per partition is in flight, so a 16 KiB batch held a burst of
      refused observations to a few dozen letters per broker round trip (issue 11, one hot node).
    """
    return {
        "broker": broker_urls(settings.kafka_bootstrap_servers),
        "store": settings.worker_store,
        "datadir": settings.worker_data_dir,
        "topic_partitions": settings.topic_partitions,
        "topic_replication_factor": replication,
        "consumer_auto_offset_reset": "earliest",
        "producer_acks": -1,
        "processing_guarantee": "at_least_once",
        "web_enabled": False,
        "autodiscover": False,
        "table_standby_replicas": 0,
        "stream_buffer_maxsize": max(4096, 2 * settings.worker_batch_size),
        "broker_max_poll_records": max(500, settings.worker_batch_size),
        "broker_commit_interval": 1.0,
        "producer_linger": 0.005,
        "producer_max_batch_size": min(256 * 1024, settings.max_message_bytes),
        "producer_max_request_size": settings.max_message_bytes,
        # A killed worker's partitions are reassigned after the session timeout (faust's default
        # is 60 s); heartbeats run on the event loop, which no batch blocks for long.
        "broker_session_timeout": 10.0,
        "broker_heartbeat_interval": 3.0,
    }


def build_worker_app(
    settings: WorkerProcessSettings,
    *,
    sink: BatchSink | None = None,
    governance_sink: GovernanceSink | None = None,
    metrics: WorkerMetrics | None = None,
    on_fatal: Callable[[BaseException], None] | None = None,
    step: StepFn | None = None,
    replication: int | None = None,
) -> WorkerApp:
    """Build the Faust app with the dedup and governor agents.

    ``replication``: replicas of the changelog topics faust creates (with the
    ``min.insync.replicas`` of :func:`~services.adapters.kafka.topics.replication_configs`);
    ``None``: ``settings.kafka_replication_factor``, or 1 when that is 0 (the worker resolves 0
    against the cluster first: :func:`streams.worker.prepare`).

    ``sink`` defaults to a :class:`~services.adapters.projection.store.ProjectionStore` and
    ``governance_sink`` to a :class:`~services.adapters.projection.governance_store.GovernanceStore`, on
    one new async engine for ``settings.database_url`` / ``settings.database_schema`` (the engine
    connects lazily, on the first batch). ``step`` defaults to the governance state machine.
    """
    if sink is None or governance_sink is None:
        from services.adapters.projection.engine import create_engine
        from services.adapters.projection.governance_store import GovernanceStore
        from services.adapters.projection.store import ProjectionStore

        engine = create_engine(settings.database_url, pre_ping=True)
        if sink is None:
            sink = ProjectionStore(engine, settings.database_schema)
        if governance_sink is None:
            governance_sink = GovernanceStore(engine, settings.database_schema)
    metrics = metrics if metrics is not None else WorkerMetrics()
    if replication is None:
        replication = settings.kafka_replication_factor or 1
    app = faust.App(settings.consumer_group, **faust_settings(settings, replication))
    app.transport.Producer = IdempotentProducer  # before app.producer builds the first one
    # Table writes are buffered by faust's producer; when the buffer holds more than
    # ``max_messages`` (100 by default, sized for one write per event) faust stalls the stream
    # until it drains, one message at a time. A batch writes up to one changelog entry per event,
    # so give the buffer room for two batches.
    app.producer.buffer.max_messages = 2 * settings.worker_batch_size
    governance_topic = app.topic(
        settings.governance_topic, key_serializer="raw", value_serializer="raw", partitions=1
    )
    forwarder = Forwarder(
        topic_sender(governance_topic),
        partitions=lambda: health_partitions(app, settings),
        on_sent=lambda kind, count: metrics.forwarded.labels(kind).inc(count),
        batch_records=settings.worker_forward_batch_records,
        batch_bytes=batch_bytes_limit(settings.max_message_bytes),
    )
    dedup = DeviceDedup(
        app,
        settings,
        sink,
        metrics,
        on_fatal=on_fatal,
        forwarder=forwarder,
        changelog_configs=replication_configs(replication),
    )
    governor = Governor(
        app,
        settings,
        governance_sink,
        metrics,
        source_topic=governance_topic,
        on_fatal=on_fatal,
        step=step,
    )
    return WorkerApp(app=app, dedup=dedup, metrics=metrics, governor=governor, forwarder=forwarder)


def health_partitions(app: Any, settings: KafkaSettings) -> int:
    """The health topic's partition count: the consumer's metadata when it knows the topic,
    ``settings.topic_partitions`` otherwise."""
    try:
        count = app.consumer.topic_partitions(settings.topic)
    except Exception:  # consumer not started (unit tests)
        count = None
    return count if isinstance(count, int) and count > 0 else settings.topic_partitions


def create_app(settings: WorkerProcessSettings, *, sink: BatchSink | None = None) -> Any:
    """The worker's Faust app (``faust.App``) with the dedup agent registered."""
    return build_worker_app(settings, sink=sink).app
