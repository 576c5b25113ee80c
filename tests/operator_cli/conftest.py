"""The API served by uvicorn in a thread on a free port (the CLI is a synchronous HTTP client),
with the fixtures of ``tests/api`` (tokens, private governance topic, simulated governor)."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import structlog
import typer
import uvicorn

from services.client.operator import register
from services.processes.api.app import create_app
from services.runtime.config import Settings
from tests.api.conftest import (  # noqa: F401 - fixtures
    api_settings,
    governance_topic,
    governor,
    inventory_writer,
)


class ServerThread:
    """``uvicorn`` serving ``create_app(settings)`` on 127.0.0.1 in a thread of its own."""

    def __init__(self, settings: Settings) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(
            create_app(settings), loop="asyncio", log_config=None, lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


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
