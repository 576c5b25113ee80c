"""The ``/metrics`` server shared by the worker and the watcher
(:mod:`services.runtime.metrics_http`): it serves its registry and lets its port go on close."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from services.runtime.metrics_http import MetricsHttpServer


def test_it_serves_its_registry_and_frees_the_port_on_close() -> None:
    registry = CollectorRegistry()
    Counter("devicestate_test_things", "Things counted.", registry=registry).inc(3)
    server = MetricsHttpServer(registry)
    port = server.start(0, "127.0.0.1")
    assert server.running
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert "devicestate_test_things_total 3.0" in response.read().decode()
    server.close()
    assert not server.running
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    server.close()  # twice is harmless


def test_a_taken_port_is_an_oserror() -> None:
    first = MetricsHttpServer(CollectorRegistry())
    port = first.start(0, "127.0.0.1")
    try:
        with pytest.raises(OSError):
            MetricsHttpServer(CollectorRegistry()).start(port, "127.0.0.1")
    finally:
        first.close()
