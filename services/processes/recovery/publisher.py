"""The recovery executor's writes: lease requests and reports appended to the governance topic.

:class:`RecordSink` is what :class:`~services.processes.recovery.service.RecoveryService` appends
through; :class:`GovernancePublisher` is the Kafka one (key = node, the record type in the type
header, idempotent producer with ``acks=all``). Retriable Kafka errors are retried with jittered
exponential backoff for up to :data:`PUBLISH_GIVE_UP_SECONDS`, then re-raised; other errors are
raised at once.
"""

from __future__ import annotations

from typing import Final, Protocol

from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

from services.adapters.kafka.clients import is_retriable, make_producer
from services.adapters.kafka.headers import type_headers
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import RecoveryLeaseRequested, RecoveryReport
from services.runtime.config import GovernanceTopicSettings

PUBLISH_GIVE_UP_SECONDS: Final = 120.0


class GovernancePublisher:
    """Appends recovery records to the governance topic (key = node, type in the type header;
    idempotent, ``acks=all``), retrying retriable failures for up to ``PUBLISH_GIVE_UP_SECONDS``."""

    def __init__(self, settings: GovernanceTopicSettings) -> None:
        self._topic = settings.governance_topic
        self._producer = make_producer(settings, client_id="devicestate-recovery")

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, record: RecoveryLeaseRequested | RecoveryReport) -> None:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(is_retriable),
            wait=wait_random_exponential(multiplier=0.2, max=10),
            stop=stop_after_delay(PUBLISH_GIVE_UP_SECONDS),
            reraise=True,
        ):
            with attempt:
                await self._producer.send_and_wait(
                    self._topic,
                    encode_input(record),
                    key=record.node.encode("utf-8"),
                    headers=type_headers(record.type),
                )


class RecordSink(Protocol):
    """Where :class:`RecoveryService` appends records (a :class:`GovernancePublisher`)."""

    async def publish(self, record: RecoveryLeaseRequested | RecoveryReport) -> None: ...
