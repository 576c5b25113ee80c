"""The local stack runs (scripts/test.sh starts it): ``devicestate-dev stack status`` says so, the
Kafka broker answers a metadata request and PostgreSQL answers ``SELECT 1``. Real servers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaClient

from devtools.stack.supervisor import StackLayout

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def layout() -> StackLayout:
    # The same layout `devicestate-dev stack` uses when run from the repository root.
    return StackLayout.from_env(cwd=ROOT)


def _devicestate() -> list[str]:
    script = Path(sys.executable).with_name("devicestate-dev")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "devtools"]


def test_status_reports_kafka_and_postgres_ready(layout: StackLayout) -> None:
    result = subprocess.run(
        [*_devicestate(), "stack", "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert f"127.0.0.1:{layout.kafka_port}" in lines["kafka"]
    assert f"127.0.0.1:{layout.postgres_port}" in lines["postgres"]
    for name in ("kafka", "postgres"):
        assert "running pid" in lines[name] and ", ready" in lines[name], lines[name]


async def test_kafka_answers_metadata(layout: StackLayout) -> None:
    client = AIOKafkaClient(bootstrap_servers=layout.kafka_bootstrap_servers)
    try:
        await client.bootstrap()
        metadata = await client.fetch_all_metadata()
    finally:
        await client.close()
    brokers = metadata.brokers()
    assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", layout.kafka_port)]
    assert metadata.controller is not None


async def test_postgres_answers_select_1(layout: StackLayout) -> None:
    dsn = layout.database_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        assert await conn.fetchval("SELECT 1") == 1
        assert await conn.fetchval("SELECT current_user") == "devicestate"
        assert await conn.fetchval("SELECT current_database()") == "devicestate"
    finally:
        await conn.close()
