"""``devicestate replay --in-place`` refuses to run while a worker consumes the topic."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from services.processes.replay.guard import active_group_members
from services.runtime.config import Settings
from tests.conftest import settings_env

pytestmark = pytest.mark.integration


async def test_in_place_replay_is_refused_while_the_worker_consumes(
    stream_settings: Settings, kafka_bootstrap: str, worker_process: Any
) -> None:
    worker = worker_process(stream_settings)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not await active_group_members(kafka_bootstrap, stream_settings.consumer_group):
        assert worker.process.poll() is None, worker.log_text()[-3000:]
        assert loop.time() < deadline, "the worker never joined its consumer group"
        await asyncio.sleep(0.5)

    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli.main", "replay", "--in-place", "--no-progress"],
        env={**os.environ, **settings_env(stream_settings)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "stop the worker before an in-place replay" in done.stderr
    assert worker.process.poll() is None  # the worker was left alone
