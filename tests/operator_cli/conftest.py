"""The API served by uvicorn in a thread on a free port (the CLI is a synchronous HTTP client),
with the fixtures of ``tests/api`` (tokens, private governance topic, simulated governor)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import structlog
import typer

from services.client.operator import register
from services.runtime.config import Settings
from tests.api.conftest import (  # noqa: F401 - fixtures
    api_settings,
    governance_topic,
    governor,
    inventory_writer,
)
from tests.api.server import ServerThread


@pytest.fixture
def api_url(api_settings: Settings) -> Iterator[str]:  # noqa: F811 - the imported fixture
    """The server's base URL. Its logs go to the real stderr meanwhile: CliRunner swaps
    ``sys.stdout`` while a command runs, and the server thread would log into the output."""
    saved = structlog.get_config()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.__stderr__))
    server = ServerThread(api_settings)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        structlog.configure(**saved)


@pytest.fixture
def cli() -> typer.Typer:
    """The operator commands as ``devicestate`` registers them."""
    app = typer.Typer()
    register(app)
    return app
