"""Writing one batch: retried on transient errors, shielded from cancellation, bounded at shutdown.

Both agents of the worker (the health agent, :mod:`streams.dedup`, and the governor,
:mod:`streams.governor`) commit each batch with :meth:`BatchWriter.write`:

- the write runs in its own task, retried with exponential backoff while the error is retriable
  (``retriable``: lost database connections, serialization failures, Kafka timeouts...);
- cancelling the caller (shutdown) does not cancel the write: it gets up to
  :data:`SHUTDOWN_GRACE_SECONDS` more, so a batch is either committed (and acknowledged) or not
  committed (and not acknowledged), never half-way;
- once :meth:`BatchWriter.begin_shutdown` was called, a write still retrying gives up after the
  same grace period.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential_jitter

from services.adapters.kafka.clients import is_broker_unavailable
from services.adapters.projection.errors import is_transient
from services.runtime.config import WorkerSettings

log = structlog.get_logger(__name__)

SHUTDOWN_GRACE_SECONDS: Final = 20.0
"""How long a batch write in flight may still run once the worker is asked to stop (when no
settings say otherwise)."""

WRITE_SHARE_OF_GRACE: Final = 0.75
"""The share of the worker's shutdown grace a batch write in flight may still use: the rest is for
faust to stop (commit, leave the group) before the worker's hard bound (:mod:`streams.shutdown`)."""


def write_grace_seconds(settings: WorkerSettings) -> float:
    """Seconds a batch write may still run after SIGTERM: three quarters of
    ``settings.worker_shutdown_grace_seconds``."""
    return WRITE_SHARE_OF_GRACE * settings.worker_shutdown_grace_seconds


T = TypeVar("T")


def is_retriable(exc: BaseException) -> bool:
    """What a batch write retries: :func:`is_transient` database errors, and Kafka errors the
    client marks retriable (the forwarding inside the transaction), or a delivery that timed out
    (:func:`~services.adapters.kafka.clients.is_broker_unavailable`)."""
    return is_transient(exc) or is_broker_unavailable(exc)


class BatchNotWritten(Exception):
    """A batch could not be committed; its offsets were not acknowledged."""


class BatchWriter:
    """Runs batch writes for one agent. ``retries`` is a counter (``.inc()``) of retried errors;
    ``retriable`` says which errors to retry."""

    def __init__(
        self,
        retries: Any,
        retriable: Callable[[BaseException], bool],
        *,
        what: str = "batch",
        grace_seconds: float = SHUTDOWN_GRACE_SECONDS,
    ) -> None:
        self.retries = retries
        self.retriable = retriable
        self.what = what
        self.grace_seconds = grace_seconds
        self.give_up_at: float | None = None

    @property
    def shutting_down(self) -> bool:
        return self.give_up_at is not None

    def begin_shutdown(self) -> None:
        """The worker is stopping: a write still retrying gets :attr:`grace_seconds` more, then is
        abandoned (faust waits for in-flight batches before it stops, so an endless retry would
        block the shutdown)."""
        if self.give_up_at is None:
            self.give_up_at = time.monotonic() + self.grace_seconds

    def _stop_retrying(self, state: RetryCallState) -> bool:
        return self.give_up_at is not None and time.monotonic() >= self.give_up_at

    async def write(self, fn: Callable[[], Awaitable[T]], size: int) -> tuple[T | None, bool]:
        """Run ``await fn()`` with retries, shielded. Returns its result (``None``: not done,
        abandoned at shutdown) and whether the caller was cancelled meanwhile. Raises
        :class:`BatchNotWritten` for an error that is not retriable (or retried until shutdown).
        """
        task = asyncio.ensure_future(self._with_retry(fn, size))
        try:
            return await asyncio.shield(task), False
        except asyncio.CancelledError:
            if task.cancelled():  # the write itself was cancelled, not the caller
                raise
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace_seconds
        log.info("stopping: waiting for the batch write in flight", what=self.what, size=size)
        while not task.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning(
                    "batch write did not finish in time; abandoning it", what=self.what, size=size
                )
                task.cancel()
                remaining = self.grace_seconds
            try:
                await asyncio.wait({task}, timeout=remaining)
            except asyncio.CancelledError:
                continue
        if task.cancelled():
            return None, True
        exc = task.exception()
        if exc is not None:
            log.error("batch write failed during shutdown", what=self.what, error=repr(exc))
            return None, True
        return task.result(), True

    async def _with_retry(self, fn: Callable[[], Awaitable[T]], size: int) -> T:
        def before_sleep(state: RetryCallState) -> None:
            self.retries.inc()
            outcome = state.outcome
            exc = outcome.exception() if outcome is not None else None
            log.warning(
                "batch write failed, retrying",
                what=self.what,
                attempt=state.attempt_number,
                error=repr(exc),
                size=size,
            )

        retrying = AsyncRetrying(
            retry=retry_if_exception(self.retriable),
            wait=wait_exponential_jitter(multiplier=0.1, max=10.0, jitter=0.1),
            stop=self._stop_retrying,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await fn()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise BatchNotWritten(f"{self.what} of {size} records not written: {exc!r}") from exc
        raise AssertionError("unreachable")  # pragma: no cover
