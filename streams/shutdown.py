"""SIGTERM and SIGINT stop the worker within its shutdown grace, whatever a batch is doing.

A clean stop finishes (or abandons, unacknowledged) the batch in flight, then lets faust commit
and leave the consumer group. That can take long: a write blocked on a lock, a broker that does
not answer, a fold that holds the event loop. :class:`ShutdownBound` makes the grace a bound:

- the handler is a plain ``signal.signal`` handler, not ``loop.add_signal_handler``: Python runs
  it between two bytecodes of the main thread even while the event loop is busy, so the bound
  starts at the signal, not when the loop is next free;
- it arms a timer thread for ``grace_seconds`` and hands the signal to the loop
  (``call_soon_threadsafe``) for the clean stop;
- when the timer fires first, or on a second signal, the process exits at once (``os._exit``)
  with the exit code of a requested stop (0).

Exiting there loses nothing: offsets are committed only after their batch is written, so
whatever was not committed is read again on restart, as after a ``kill -9`` (the projection's
version guard and the governor's redelivery check make the re-read harmless).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Final

import structlog

log = structlog.get_logger(__name__)

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)

EXIT_CODE: Final = 0
"""Exit code when the bound cuts the stop short: still a requested stop (nothing is lost)."""


def _exit_now(code: int) -> None:  # pragma: no cover - ends the process
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class ShutdownBound:
    """Installs the stop handlers: ``on_signal(sig)`` runs on ``loop`` for the clean stop, and
    the process exits ``grace_seconds`` after the first signal if it is still running.

    ``exit_process`` is called with the exit code when the bound expires (``os._exit`` by default;
    tests pass a recorder). Raises ``ValueError`` for a grace that is not positive.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        grace_seconds: float,
        on_signal: Callable[[signal.Signals], None],
        *,
        exit_process: Callable[[int], None] = _exit_now,
    ) -> None:
        if not grace_seconds > 0:
            raise ValueError(f"shutdown grace must be positive, got {grace_seconds!r}")
        self.loop = loop
        self.grace_seconds = grace_seconds
        self.on_signal = on_signal
        self._exit = exit_process
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    @property
    def armed(self) -> bool:
        """Whether a stop signal was received (the bound is running)."""
        return self._timer is not None

    def install(self) -> None:
        """Handle SIGTERM and SIGINT in this process (call from the main thread)."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def cancel(self) -> None:
        """The clean stop finished: the bound no longer applies."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received(signal.Signals(signum))

    def received(self, sig: signal.Signals) -> None:
        """A stop signal arrived (what the signal handler calls)."""
        with self._lock:
            first = self._timer is None
            if first:
                self._timer = threading.Timer(self.grace_seconds, self._expire, args=(sig, False))
                self._timer.daemon = True
                self._timer.start()
        if first:
            self.loop.call_soon_threadsafe(self.on_signal, sig)
        else:
            self._expire(sig, True)

    def _expire(self, sig: signal.Signals, again: bool) -> None:
        log.warning(
            "stopping now: uncommitted batches are read again on restart",
            signal=sig.name,
            reason="second signal" if again else "shutdown grace exceeded",
            grace_seconds=self.grace_seconds,
        )
        self._exit(EXIT_CODE)
