"""Structured logging set-up (structlog), shared by every process.

``configure_logging(settings)`` is called once by each CLI command before it starts work; modules
get a logger with ``structlog.get_logger(__name__)`` and log events as key/value pairs.
"""

from __future__ import annotations

import logging
import sys

import structlog

from services.runtime.config import LoggingSettings


def configure_logging(settings: LoggingSettings) -> None:
    """Route structlog and the standard library's logging to stderr.

    ``settings.log_format`` picks one JSON object per line (``json``, for log shippers) or
    human-readable lines (``console``); ``settings.log_level`` sets the threshold.
    Raises ``ValueError`` for an unknown level name.
    """
    level = logging.getLevelName(settings.log_level.upper())
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {settings.log_level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiokafka and faust are chatty at INFO about every rebalance step.
    for noisy in ("aiokafka", "kafka", "faust.transport", "mode", "alembic", "httpx"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
