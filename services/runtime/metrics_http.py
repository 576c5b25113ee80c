"""The ``/metrics`` HTTP server of one process's Prometheus registry: prometheus_client's own
``start_http_server`` (a WSGI server in a daemon thread), and a clean stop, so a process (or a
test running several in one interpreter) can let its port go."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server


class MetricsHttpServer:
    """Serves ``registry`` on ``/metrics`` once :meth:`start` ed; :meth:`close` stops it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self, port: int, addr: str = "0.0.0.0") -> int:
        """Listen on ``addr:port`` (0: a free port); returns the port. Raises ``OSError`` if the
        port is taken."""
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop the server :meth:`start` started, if any (waits up to 5 s for its thread)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
