"""The API's producer of operator commands on the governance topic.

Operator writes never touch the projection: each is an
:class:`~services.domain.governance.inputs.OperatorCommand` appended to ``settings.governance_topic``
(one partition, the governor's total order), its type in the ``devicestate-type`` header. The governor answers with a ``CommandAccepted`` or
``CommandRejected`` decision and a ``governance_commands`` row, which the API reads back.

Idempotent producer (:func:`~services.adapters.kafka.clients.make_producer`), ``acks=all``: a command the API answered 202 for is on every in-sync
replica. The producer is started with the app (lifespan); when Kafka is down then, the API still
starts (reads keep working) and each write tries to connect again, answering 503 while it cannot.
Its first connection checks the event and governance topics (creating them if missing and
``topics_create_missing``): wrong topics stop the API at start, or answer writes 503 naming the fix.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import structlog

from services.adapters.kafka.clients import KafkaError, Producer, make_producer
from services.adapters.kafka.headers import type_headers
from services.adapters.kafka.topics import (
    TopicCheckError,
    TopicCreationError,
    TopicRole,
    ensure_topics,
)
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import OperatorCommand
from services.domain.migration.records import MigrationEvidence, MigrationReport
from services.runtime.config import GovernanceTopicSettings

log = structlog.get_logger(__name__)

CONNECT_TIMEOUT_SECONDS: Final = 5.0
"""Longest wait for a broker when (re)connecting."""
SEND_TIMEOUT_SECONDS: Final = 10.0
"""Longest wait for the acknowledgement of one command."""
RECONNECT_BACKOFF_SECONDS: Final = 2.0
"""After a failed connection, writes within this many seconds get 503 at once (no pile-up of
connection attempts while Kafka is down)."""


class CommandLogUnavailable(RuntimeError):
    """The command could not be appended to the governance topic (Kafka unreachable, topic
    missing, not acknowledged in time); nothing was written, the client may retry."""


class CommandPublisher:
    """``await start()`` (never raises), ``await publish(command)``, ``await close()``."""

    def __init__(
        self,
        settings: GovernanceTopicSettings,
        *,
        connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS,
        send_timeout_seconds: float = SEND_TIMEOUT_SECONDS,
    ) -> None:
        self.topic = settings.governance_topic
        self._settings = settings
        self._topics_checked = False
        self._bootstrap_servers = settings.kafka_bootstrap_servers
        self._options: dict[str, Any] = dict(
            client_id="devicestate-api",
            # Also bounds the wait for the topic's metadata (a missing topic, a dead broker).
            request_timeout_ms=int(send_timeout_seconds * 1000),
        )
        self._connect_timeout = connect_timeout_seconds
        self._send_timeout = send_timeout_seconds
        self._producer: Producer | None = None
        self._lock = asyncio.Lock()
        self._failed_at = float("-inf")
        self._failure = ""

    @property
    def connected(self) -> bool:
        return self._producer is not None

    async def start(self) -> None:
        """Connect now if Kafka answers; otherwise log it and connect on the first write. Raises
        :class:`~services.adapters.kafka.topics.TopicCheckError` when Kafka answers and the
        topics are wrong (or missing and not to be created): the API must not start."""
        try:
            await self._connect()
        except CommandLogUnavailable as exc:
            if isinstance(exc.__cause__, TopicCheckError | TopicCreationError):
                log.error("kafka topics not as the service needs them", error=str(exc.__cause__))
                raise exc.__cause__ from None
            log.warning(
                "command producer not connected; writes get 503 until it is", error=str(exc)
            )

    async def _connect(self) -> Producer:
        async with self._lock:
            if self._producer is not None:
                return self._producer
            loop = asyncio.get_running_loop()
            if loop.time() - self._failed_at < RECONNECT_BACKOFF_SECONDS:
                raise CommandLogUnavailable(self._failure)
            producer = make_producer(self._bootstrap_servers, **self._options)
            try:
                async with asyncio.timeout(self._connect_timeout):
                    await producer.start()
                    await self._check_topics()
            except (TopicCheckError, TopicCreationError) as exc:
                await _stop_quietly(producer)
                self._failed_at = loop.time()
                self._failure = str(exc)
                raise CommandLogUnavailable(self._failure) from exc
            except (KafkaError, OSError, TimeoutError) as exc:
                await _stop_quietly(producer)
                self._failed_at = loop.time()
                self._failure = (
                    f"cannot connect to Kafka at {self._bootstrap_servers}: {_describe(exc)}"
                )
                raise CommandLogUnavailable(self._failure) from exc
            except BaseException:
                await _stop_quietly(producer)
                raise
            self._producer = producer
            log.info("command producer connected", topic=self.topic)
            return producer

    async def _check_topics(self) -> None:
        # Before the first command: a producer's send to a missing topic would make a broker
        # that auto-creates topics create it with its default partitions (issue 11).
        if not self._topics_checked:
            await ensure_topics(
                self._settings,
                (TopicRole.EVENTS, TopicRole.GOVERNANCE),
                create=self._settings.topics_create_missing,
                request_timeout_ms=int(self._connect_timeout * 1000),
            )
            self._topics_checked = True

    async def publish(self, command: OperatorCommand | MigrationReport | MigrationEvidence) -> None:
        """Append ``command`` and wait for its acknowledgement (``acks=all``). Raises
        :class:`CommandLogUnavailable` when that fails; the command may then still have been
        written (an unacknowledged send), which is harmless: the governor ignores a repeated
        commandID, and a client retry reuses it through the ``Idempotency-Key`` header."""
        producer = await self._connect()
        key = _record_key(command).encode("utf-8")
        try:
            async with asyncio.timeout(self._send_timeout):
                await producer.send_and_wait(
                    self.topic, encode_input(command), key=key, headers=type_headers(command.type)
                )
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("command not acknowledged", key=_record_key(command), error=_describe(exc))
            raise CommandLogUnavailable(
                f"the governance topic {self.topic!r} did not acknowledge the command: "
                f"{_describe(exc)}"
            ) from exc

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await _stop_quietly(producer)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


async def _stop_quietly(producer: Producer) -> None:
    try:
        await producer.stop()
    except Exception as exc:  # closing a broken producer must not mask the cause
        log.debug("producer stop failed", error=repr(exc))


def _record_key(record: OperatorCommand | MigrationReport | MigrationEvidence) -> str:
    """The Kafka key of a record: a command's node (``fleet`` without one), a migration report's
    or evidence's migration ID (``POST /v1/migrations/{id}/reports`` and ``.../evidence``)."""
    if isinstance(record, MigrationReport | MigrationEvidence):
        return record.migration_id
    return record.node or "fleet"
