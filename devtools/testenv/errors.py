"""The test environment's error, shared by its builders and servers (kept apart so each can raise it
without importing the others)."""

from __future__ import annotations


class KubeAPIError(RuntimeError):
    """Building or starting the test API server failed; the message says what and where."""
