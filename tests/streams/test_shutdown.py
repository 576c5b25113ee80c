"""The worker's shutdown bound (:mod:`streams.shutdown`): the clean stop starts on the loop, and
the process exits at the grace whatever the loop is doing."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from streams.shutdown import EXIT_CODE, ShutdownBound


class Recorder:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


async def test_first_signal_starts_the_clean_stop_on_the_loop_and_the_bound_expires() -> None:
    loop = asyncio.get_running_loop()
    stops: list[signal.Signals] = []
    exits = Recorder()
    bound = ShutdownBound(loop, 0.3, stops.append, exit_process=exits)
    bound.received(signal.SIGTERM)
    assert bound.armed and stops == []  # handed to the loop, not run in the handler
    await asyncio.sleep(0)
    assert stops == [signal.SIGTERM]
    assert exits.codes == []
    assert await asyncio.to_thread(exits.called.wait, 5.0)
    assert exits.codes == [EXIT_CODE]


async def test_the_bound_fires_while_the_event_loop_is_blocked() -> None:
    """A fold that holds the loop (no await for seconds) does not delay the exit."""
    loop = asyncio.get_running_loop()
    exits = Recorder()
    bound = ShutdownBound(loop, 0.2, lambda sig: None, exit_process=exits)
    bound.received(signal.SIGTERM)
    started = time.monotonic()
    while not exits.called.is_set() and time.monotonic() - started < 5.0:
        sum(range(10_000))  # CPU-bound, never yields to the loop
    assert exits.codes == [EXIT_CODE]
    assert time.monotonic() - started < 2.0


async def test_a_clean_stop_cancels_the_bound() -> None:
    exits = Recorder()
    bound = ShutdownBound(asyncio.get_running_loop(), 0.2, lambda sig: None, exit_process=exits)
    bound.received(signal.SIGINT)
    bound.cancel()
    await asyncio.sleep(0.5)
    assert exits.codes == []


async def test_a_second_signal_exits_at_once() -> None:
    stops: list[signal.Signals] = []
    exits = Recorder()
    bound = ShutdownBound(asyncio.get_running_loop(), 60.0, stops.append, exit_process=exits)
    bound.received(signal.SIGTERM)
    bound.received(signal.SIGINT)
    assert exits.codes == [EXIT_CODE]
    bound.cancel()
    await asyncio.sleep(0)
    assert stops == [signal.SIGTERM]  # the clean stop was asked for once


async def test_installed_handler_receives_a_real_signal() -> None:
    import os

    loop = asyncio.get_running_loop()
    stops: list[signal.Signals] = []
    exits = Recorder()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    bound = ShutdownBound(loop, 60.0, stops.append, exit_process=exits)
    try:
        bound.install()
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(50):
            if stops:
                break
            await asyncio.sleep(0.02)
    finally:
        bound.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert stops == [signal.SIGTERM] and exits.codes == []


def test_grace_must_be_positive() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="positive"):
            ShutdownBound(loop, 0.0, lambda sig: None)
    finally:
        loop.close()
