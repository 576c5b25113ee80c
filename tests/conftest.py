"""Shared fixtures.

PostgreSQL (integration tests): ``engine`` is one async engine per session on
``DEVICESTATE_DATABASE_URL`` (default: the local stack's cluster from ``devicestate-dev stack up``);
``fresh_schema`` creates, migrates and finally drops a schema private to one test (``new_schema``
makes more); ``store`` is a :class:`ProjectionStore` on it and ``reads`` a :class:`DeviceReads`. Event builders: ``observation``,
``release`` and ``logged``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from services.adapters.projection.migrate import migrate
from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.store import ProjectionStore
from services.domain.events import (
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.log import LoggedEvent, LogPosition
from services.runtime.config import Settings

TOPIC = "devicestate.device-health.v1"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SHARED_EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"


def pytest_configure(config: pytest.Config) -> None:
    """The golden tests read the shared examples at ``../shared/examples`` (beside the repository,
    as in CI). Without them those tests would have nothing to compare: stop with a clear error."""
    if not SHARED_EXAMPLES.is_dir():
        raise pytest.UsageError(
            f"{SHARED_EXAMPLES} is missing: the tests need the shared examples beside the "
            "repository (../shared/examples), as CI provides them"
        )


# --- PostgreSQL ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def database_url() -> str:
    return Settings().database_url


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(database_url, pool_size=5)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except (OSError, DBAPIError) as exc:
        await engine.dispose()
        pytest.fail(
            f"PostgreSQL is not reachable at {engine.url!r}; start it with `devicestate-dev stack up` "
            f"or set DEVICESTATE_DATABASE_URL ({exc})"
        )
    yield engine
    await engine.dispose()


SchemaFactory = Callable[[], Awaitable[str]]


@pytest.fixture
async def new_schema(engine: AsyncEngine, database_url: str) -> AsyncIterator[SchemaFactory]:
    """``await new_schema()``: a new migrated schema; every one is dropped after the test."""
    created: list[str] = []

    async def make() -> str:
        schema = f"test_{uuid4().hex[:16]}"
        created.append(schema)
        await migrate(database_url, schema)
        return schema

    try:
        yield make
    finally:
        async with engine.begin() as conn:
            for schema in created:
                await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
                # the dashboards' views (migration 0008) live beside it
                await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}_views" CASCADE'))


@pytest.fixture
async def fresh_schema(new_schema: SchemaFactory) -> str:
    """A migrated schema private to this test, dropped afterwards."""
    return await new_schema()


@pytest.fixture
def store(engine: AsyncEngine, fresh_schema: str) -> ProjectionStore:
    return ProjectionStore(engine, fresh_schema)


@pytest.fixture
def reads(engine: AsyncEngine, fresh_schema: str) -> DeviceReads:
    return DeviceReads(engine, fresh_schema)


# --- event builders -----------------------------------------------------------------------

ObservationFactory = Callable[..., DeviceHealthObserved]
ReleaseFactory = Callable[..., PodDevicesReleased]
LogFactory = Callable[..., list[LoggedEvent]]


@pytest.fixture
def observation() -> ObservationFactory:
    """``observation(version, health=..., at=<seconds after T0>, **fields)``: a
    DeviceHealthObserved of pod ``uid-1`` on ``gpu-node-a`` device ``GPU-0`` unless overridden."""

    def build(
        version: int | None = 1,
        health: Health = Health.HEALTHY,
        at: float = 0,
        **fields: Any,
    ) -> DeviceHealthObserved:
        values: dict[str, Any] = dict(
            node="gpu-node-a",
            namespace="ml",
            pod_name="train-0",
            pod_uid="uid-1",
            containers=(ContainerRef("main"),),
            resource_name="nvidia.com/gpu",
            resource_id="GPU-0",
            source=DeviceSource.DEVICE_PLUGIN,
        )
        values.update(fields)
        return DeviceHealthObserved(
            health=health,
            status_version=version,
            observed_at=T0 + timedelta(seconds=at),
            **values,
        )

    return build


@pytest.fixture
def release() -> ReleaseFactory:
    """``release(version, at=<seconds after T0>, **fields)``: pod ``uid-1`` on ``gpu-node-a``
    released (deleted) unless overridden."""

    def build(version: int | None = 1, at: float = 0, **fields: Any) -> PodDevicesReleased:
        values: dict[str, Any] = dict(
            node="gpu-node-a",
            namespace="ml",
            pod_name="train-0",
            pod_uid="uid-1",
            reason=ReleaseReason.DELETED,
        )
        values.update(fields)
        return PodDevicesReleased(
            status_version=version, observed_at=T0 + timedelta(seconds=at), **values
        )

    return build


def as_log(
    events: Sequence[Event], partition: int = 0, start: int = 0, topic: str = TOPIC
) -> list[LoggedEvent]:
    """``events`` at consecutive offsets from ``start`` of one partition."""
    return [
        LoggedEvent(LogPosition(topic, partition, start + i), event)
        for i, event in enumerate(events)
    ]


@pytest.fixture
def logged() -> LogFactory:
    """``logged(events, partition=0, start=0)``: the events at consecutive log offsets."""
    return as_log


# --- Kafka and the stream worker (tests/streams, tests/replay) --------------------------------
# Each test gets a private namespace: its own topics, consumer group (so its own faust changelog
# topics) and PostgreSQL schema; every Kafka topic whose name contains the test's tag is deleted
# afterwards.


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return Settings().kafka_bootstrap_servers


@pytest.fixture(scope="session")
async def kafka_admin(kafka_bootstrap: str) -> AsyncIterator[Any]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10000)
    try:
        await admin.start()
        await admin.list_topics()
    except Exception as exc:
        await admin.close()
        pytest.fail(
            f"Kafka is not reachable at {kafka_bootstrap}; start it with `devicestate-dev stack up` "
            f"or set DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS ({exc!r})"
        )
    yield admin
    await admin.close()


@pytest.fixture
async def stream_settings(
    kafka_admin: Any, fresh_schema: str, tmp_path: Any
) -> AsyncIterator[Settings]:
    """Settings private to one test: topics ``t<tag>.events`` (3 partitions),
    ``t<tag>.dead-letter``, ``t<tag>.governance`` and ``t<tag>.decisions``, created by the
    service's own ``ensure_topics`` (the broker auto-creates nothing), consumer group
    ``t<tag>.worker``, the test's fresh schema, a RocksDB data directory under ``tmp_path``,
    metrics off, small batches. No test worker touches the shared default topics."""
    from services.adapters.kafka.topics import ensure_topics

    tag = f"t{uuid4().hex[:12]}"
    settings = Settings(
        topic=f"{tag}.events",
        dead_letter_topic=f"{tag}.dead-letter",
        governance_topic=f"{tag}.governance",
        decisions_topic=f"{tag}.decisions",
        topic_partitions=3,
        consumer_group=f"{tag}.worker",
        database_schema=fresh_schema,
        worker_data_dir=str(tmp_path / "worker"),
        worker_store="rocksdb://",
        worker_metrics_port=0,
        worker_batch_size=500,
        worker_batch_within_seconds=0.2,
    )
    await ensure_topics(settings)
    try:
        yield settings
    finally:
        names = [t for t in await kafka_admin.list_topics() if tag in t]
        if names:
            await kafka_admin.delete_topics(names)


def settings_env(settings: Settings) -> dict[str, str]:
    """``DEVICESTATE_*`` environment variables that rebuild ``settings`` in a subprocess."""
    env = {}
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"DEVICESTATE_{name.upper()}"] = str(value)
    return env


async def publish(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]
) -> None:
    """Send ``(key, value)`` records in order (idempotent producer, acks=all) and flush."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5, max_batch_size=262144
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k) for k, v in records]
        await producer.flush()
        for future in futures:
            await future
    finally:
        await producer.stop()


class WorkerProcess:
    """``python -m streams.cli`` in a subprocess with ``settings`` in its environment; output goes
    to ``log_path``."""

    def __init__(self, settings: Settings, log_path: Any, *args: str) -> None:
        import os
        import subprocess
        import sys
        from pathlib import Path

        root = Path(__file__).resolve().parents[1]
        env = {**os.environ, **settings_env(settings)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", *args],
            cwd=root,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    async def wait(self, seconds: float = 60.0) -> int:
        """Wait (polling) for the process to exit; kill it and fail after ``seconds``."""
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.process.poll() is None:
            if loop.time() > deadline:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"worker did not exit in {seconds} s; log: {self.log_path}")
            await asyncio.sleep(0.1)
        self._log.close()
        return self.process.returncode

    def log_text(self) -> str:
        self._log.flush()
        text: str = self.log_path.read_text(errors="replace")
        return text


@pytest.fixture
def worker_process(tmp_path: Any) -> Iterator[Callable[..., WorkerProcess]]:
    """``worker_process(settings, *args)`` starts a worker subprocess; all are killed at teardown."""
    import signal as signals

    started: list[WorkerProcess] = []

    def start(settings: Settings, *args: str) -> WorkerProcess:
        process = WorkerProcess(settings, tmp_path / f"worker-{len(started)}.log", *args)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.process.poll() is None:
            process.signal(signals.SIGKILL)
            process.process.wait()
