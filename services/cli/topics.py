"""``devicestate topics create|check``: the service's Kafka topics, made and checked on purpose.

Both read the topic names and shapes from the settings (``DEVICESTATE_TOPIC``,
``DEVICESTATE_DEAD_LETTER_TOPIC``, ``DEVICESTATE_GOVERNANCE_TOPIC``, ``DEVICESTATE_DECISIONS_TOPIC``,
``DEVICESTATE_TOPIC_PARTITIONS``, ``DEVICESTATE_MAX_MESSAGE_BYTES``) and do their work in the Kafka
adapter (:mod:`services.adapters.kafka.topics`). Exit codes: 0 every topic as needed; 1 a topic
missing or wrong (each problem printed with its fix); 2 Kafka did not answer or refused a creation.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Final

import typer

from services.runtime.config import GovernanceTopicSettings

EXIT_OK: Final = 0
EXIT_PROBLEMS: Final = 1
EXIT_ERROR: Final = 2

topics = typer.Typer(
    name="topics",
    help="Create or check the service's Kafka topics (partitions, replicas, configs).",
    no_args_is_help=True,
)

Timeout = Annotated[
    float, typer.Option("--timeout", help="Longest wait for a broker's answer (seconds).")
]


@topics.command("create")
def create(timeout: Timeout = 15.0) -> None:
    """Create the missing topics as the service needs them, then check all four; existing topics
    are never changed (a wrong one is reported with its fix, exit 1)."""
    from services.adapters.kafka.topics import (
        TopicCheckError,
        TopicCreationError,
        ensure_topics,
    )

    settings = GovernanceTopicSettings()
    try:
        states = asyncio.run(ensure_topics(settings, request_timeout_ms=int(timeout * 1000)))
    except TopicCheckError as exc:
        for problem in exc.problems:
            typer.echo(f"wrong: {problem}")
        raise typer.Exit(EXIT_PROBLEMS) from None
    except TopicCreationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    except Exception as exc:
        _unreachable(settings, exc)
    for name, state in states.items():
        typer.echo(f"{state.value}: {name}")


@topics.command("check")
def check(timeout: Timeout = 15.0) -> None:
    """Check the four topics (creating nothing): exit 0 when all are as needed, 1 when one is
    missing or wrong (each problem printed with its fix), 2 when Kafka did not answer."""
    from services.adapters.kafka.topics import check_topics, wanted_topics

    settings = GovernanceTopicSettings()
    try:
        problems = asyncio.run(check_topics(settings, request_timeout_ms=int(timeout * 1000)))
    except Exception as exc:
        _unreachable(settings, exc)
    for problem in problems:
        typer.echo(f"{'missing' if problem.missing else 'wrong'}: {problem}")
    if problems:
        raise typer.Exit(EXIT_PROBLEMS)
    for name in wanted_topics(settings):
        typer.echo(f"ok: {name}")


def _unreachable(settings: GovernanceTopicSettings, exc: Exception) -> None:
    typer.echo(
        f"error: Kafka at {settings.kafka_bootstrap_servers} did not answer: "
        f"{type(exc).__name__} {exc}".rstrip(),
        err=True,
    )
    raise typer.Exit(EXIT_ERROR) from None
