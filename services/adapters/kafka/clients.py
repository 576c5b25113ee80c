"""The one place aiokafka clients are built: producers, consumers and admin clients.

Every client connects to ``KafkaSettings.kafka_bootstrap_servers`` (a comma-separated
``host:port`` list); functions that take a bootstrap string rather than :class:`KafkaSettings`
(the replay, the dev tools) pass that string instead. The settings hold no security options (plaintext listeners), so the
factory sets none either; the options each caller needs (timeouts, batch sizes, isolation) are
passed through unchanged as aiokafka's keyword arguments.

Defaults shared by every caller today: producers are idempotent with ``acks="all"`` (a record the
caller awaited is on every in-sync replica, and a retried send is not written twice); consumers
never auto-commit (each caller commits what it has handled, or nothing). A client's ``client_id``
names the process in the broker's logs and group descriptions (``devicestate-<process>``).

:func:`start_until_stopped` is the start-up loop the long-running processes share: start the
client, retrying with exponential backoff while no broker answers, until an ``asyncio.Event``
says stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, Final, Protocol, TypeAlias

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, KafkaTimeoutError

from services.runtime.config import KafkaSettings

log = structlog.get_logger(__name__)

__all__ = [
    "ConsumerRecord",
    "KafkaError",
    "KafkaTarget",
    "Producer",
    "TopicPartition",
    "bootstrap_servers",
    "is_broker_unavailable",
    "is_connection_error",
    "is_retriable",
    "make_admin",
    "make_consumer",
    "make_producer",
    "start_until_stopped",
]

Producer: TypeAlias = AIOKafkaProducer
"""The producer type :func:`make_producer` returns (for annotations outside the adapter)."""

KafkaTarget: TypeAlias = KafkaSettings | str
"""Where a client connects: the process's :class:`KafkaSettings` (or any settings class holding
that group), or a bootstrap servers string."""

START_FIRST_DELAY_SECONDS: Final = 0.5
START_MAX_DELAY_SECONDS: Final = 15.0
"""Backoff of :func:`start_until_stopped`: doubles from the first delay up to the maximum."""

_UNAVAILABLE_NAMES: Final = frozenset(
    {"KafkaConnectionError", "NodeNotReadyError", "KafkaTimeoutError"}
)


def bootstrap_servers(target: KafkaTarget) -> str:
    """The bootstrap servers string of ``target``."""
    return target.kafka_bootstrap_servers if isinstance(target, KafkaSettings) else target


def make_producer(
    target: KafkaTarget, *, client_id: str, idempotent: bool = True, **options: Any
) -> AIOKafkaProducer:
    """An unstarted producer with ``acks="all"`` (idempotent unless ``idempotent=False``);
    ``options`` are further ``AIOKafkaProducer`` arguments (``linger_ms``, ``request_timeout_ms``...)."""
    settings: dict[str, Any] = {"acks": "all", "enable_idempotence": idempotent}
    settings.update(options)
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers(target), client_id=client_id, **settings
    )


def make_consumer(
    target: KafkaTarget,
    *topics: str,
    client_id: str,
    group_id: str | None = None,
    **options: Any,
) -> AIOKafkaConsumer:
    """An unstarted consumer (subscribed to ``topics`` if any are given), never auto-committing
    unless ``enable_auto_commit=True`` is passed; ``group_id`` ``None``: no consumer group.
    ``options`` are further ``AIOKafkaConsumer`` arguments (``auto_offset_reset``,
    ``isolation_level``, ``max_poll_records``...)."""
    settings: dict[str, Any] = {"enable_auto_commit": False}
    settings.update(options)
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap_servers(target),
        client_id=client_id,
        group_id=group_id,
        **settings,
    )


def make_admin(target: KafkaTarget, *, client_id: str, **options: Any) -> AIOKafkaAdminClient:
    """An unstarted admin client; ``options`` are further ``AIOKafkaAdminClient`` arguments
    (``request_timeout_ms``)."""
    return AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers(target), client_id=client_id, **options
    )


def is_retriable(exc: BaseException) -> bool:
    """True for failures that end when the broker comes back: aiokafka's retriable errors,
    its timeouts (not marked retriable, but an outage is what causes them) and socket errors."""
    if isinstance(exc, KafkaTimeoutError | asyncio.TimeoutError | OSError):
        return True
    return isinstance(exc, KafkaError) and bool(exc.retriable)


def is_broker_unavailable(exc: BaseException) -> bool:
    """True for an exception flagged retriable (``exc.retriable is True``: aiokafka's, also
    through faust) or for aiokafka's connection errors, which are not ``OSError``\\ s. Matched by
    name: faust may raise them from its own copy of the client's import path."""
    if getattr(exc, "retriable", False) is True:
        return True
    return type(exc).__name__ in _UNAVAILABLE_NAMES


def is_connection_error(exc: BaseException) -> bool:
    """Only aiokafka's connection errors (matched by name, like :func:`is_broker_unavailable`)."""
    return type(exc).__name__ in _UNAVAILABLE_NAMES


class _Startable(Protocol):
    def start(self) -> Awaitable[Any]: ...


async def start_until_stopped(client: _Startable, stop: asyncio.Event, *, what: str) -> bool:
    """``await client.start()``, retrying any failure (logged as "kafka unavailable") with a delay
    doubling from :data:`START_FIRST_DELAY_SECONDS` to :data:`START_MAX_DELAY_SECONDS` seconds.
    Returns ``True`` once started, ``False`` when ``stop`` was set first."""
    delay = START_FIRST_DELAY_SECONDS
    while not stop.is_set():
        try:
            await client.start()
            return True
        except Exception as exc:
            log.warning("kafka unavailable, retrying", what=what, error=repr(exc), retry_in=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, START_MAX_DELAY_SECONDS)
    return False
