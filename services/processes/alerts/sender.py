"""POST alerts to Alertmanager's API v2 (httpx), with retries.

``POST <base>/api/v2/alerts`` with a JSON list of alerts. What an answer means:

- 2xx: delivered (:attr:`PostOutcome.SENT`);
- connection errors, timeouts, 429 and 5xx: retried with exponential backoff and jitter (tenacity)
  up to ``retries`` times, each retry counted through ``on_retry``; still failing after that:
  :attr:`PostOutcome.UNAVAILABLE` (the caller reads the decisions again later);
- any other 4xx: Alertmanager refused the alerts themselves (:attr:`PostOutcome.REJECTED`);
  sending them again would fail again, so the caller logs and skips them: one bad alert must not
  block the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Final

import httpx
import orjson
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from services.processes.alerts.mapping import Alert

log = structlog.get_logger(__name__)

ALERTS_PATH: Final = "/api/v2/alerts"


class PostOutcome(StrEnum):
    SENT = "sent"
    REJECTED = "rejected"
    UNAVAILABLE = "unavailable"


class _Retriable(Exception):
    """A 429 or 5xx answer: Alertmanager is overloaded or failing, try again."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status


class AlertmanagerClient:
    """Posts alert lists to one Alertmanager (``async with`` or :meth:`close` when done).

    ``retries``: retries after the first attempt; ``timeout_seconds``: per request;
    ``backoff_seconds``/``max_backoff_seconds``: first and longest wait between attempts;
    ``transport``: an httpx transport (tests).
    """

    def __init__(
        self,
        base_url: str,
        *,
        retries: int = 5,
        timeout_seconds: float = 5.0,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        on_retry: Callable[[], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + ALERTS_PATH
        self._retries = retries
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._on_retry = on_retry
        self._client = httpx.AsyncClient(
            timeout=timeout_seconds,
            transport=transport,
            headers={"Content-Type": "application/json", "User-Agent": "devicestate-alerts"},
        )

    async def __aenter__(self) -> AlertmanagerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.aclose()

    async def _post_once(self, body: bytes) -> httpx.Response:
        response = await self._client.post(self.url, content=body)
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retriable(response.status_code, response.text[:500])
        return response

    async def post(self, alerts: Sequence[Alert]) -> PostOutcome:
        """POST ``alerts`` (one request; retried as the module says) and say how it ended."""
        body = orjson.dumps(list(alerts))

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if self._on_retry is not None:
                self._on_retry()
            log.warning(
                "alertmanager unavailable, retrying",
                url=self.url,
                attempt=state.attempt_number,
                error=str(exc) or repr(exc),
            )

        retrying = AsyncRetrying(
            retry=retry_if_exception_type((httpx.TransportError, _Retriable)),
            wait=wait_random_exponential(multiplier=self._backoff, max=self._max_backoff),
            stop=stop_after_attempt(self._retries + 1),
            before_sleep=before_sleep,
        )
        try:
            response: httpx.Response = await retrying(self._post_once, body)
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            log.error(
                "alertmanager unavailable, giving up for now",
                url=self.url,
                attempts=self._retries + 1,
                alerts=len(alerts),
                error=str(cause) or repr(cause),
            )
            return PostOutcome.UNAVAILABLE
        if response.is_success:
            return PostOutcome.SENT
        log.error(
            "alertmanager refused the alerts; skipped",
            url=self.url,
            status=response.status_code,
            body=response.text[:1000],
            alerts=len(alerts),
            incidents=[a["labels"].get("incident") for a in alerts][:20],
        )
        return PostOutcome.REJECTED
