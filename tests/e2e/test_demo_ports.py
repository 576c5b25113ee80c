"""The demo refuses to start its API on a port another process holds: that process would answer
the demo's health check and the demo would print another directory as its own."""

from __future__ import annotations

import socket

import pytest

from devtools.demo.processes import require_free_port


def test_a_taken_api_port_is_refused_with_the_setting_named() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(RuntimeError, match="DEVICESTATE_API_PORT"):
            require_free_port("127.0.0.1", port, "DEVICESTATE_API_PORT")
    require_free_port("127.0.0.1", port, "DEVICESTATE_API_PORT")  # free again: no error
