"""The API served by uvicorn on 127.0.0.1 in a thread of its own, on a free port: for clients
that need a real HTTP server (the synchronous CLI, schemathesis)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from services.processes.api.app import create_app
from services.runtime.config import Settings


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
