"""The dead letters a replay must honour: records the live worker sent to the dead-letter topic
because the projection refused them (issue 11 item 3), which a replay leaves out as the worker did
(``docs/reliability.md``). The health replay (:mod:`.run`) skips the records of stage ``write`` by
position; the governance replay (:mod:`.governance`) leaves out the folds of stage
``governor-write``.
"""

from __future__ import annotations

from typing import Final

from services.adapters.kafka.headers import HEADER_SOURCE, HEADER_STAGE
from services.adapters.kafka.reader import TopicMissing, TopicSnapshot, topic_partitions
from services.domain.log import LogPosition

CLIENT_ID: Final = "devicestate-replay-dead-letters"

HEALTH_REFUSED_STAGE: Final = "write"
"""``devicestate-stage`` of a health record the projection refused (``streams.dedup``)."""


async def dead_letters(
    bootstrap_servers: str, topic: str, stage: str
) -> list[tuple[str, bytes | None]]:
    """``(source, value)`` of every dead letter of ``stage`` in ``topic`` (``source``:
    ``<topic>/<partition>/<offset>`` of the original), up to the end offsets at the start; empty
    when the topic does not exist."""
    try:
        partitions = await topic_partitions(bootstrap_servers, topic, client_id=CLIENT_ID)
    except TopicMissing:  # no dead-letter topic: nothing was left out
        return []
    found: list[tuple[str, bytes | None]] = []
    async with TopicSnapshot(bootstrap_servers, topic, partitions, client_id=CLIENT_ID) as snapshot:
        while not snapshot.done:
            for records in (await snapshot.fetch(5000, timeout_ms=1000)).values():
                for record in records:
                    headers = {k: v.decode(errors="replace") for k, v in record.headers or ()}
                    source = headers.get(HEADER_SOURCE)
                    if headers.get(HEADER_STAGE) == stage and source is not None:
                        found.append((source, record.value))
    return found


def source_position(source: str) -> LogPosition | None:
    """``<topic>/<partition>/<offset>`` as a position (``None``: not one)."""
    rest, _, offset = source.rpartition("/")
    topic, _, partition = rest.rpartition("/")
    if not (topic and partition.isdigit() and offset.isdigit()):
        return None
    return LogPosition(topic, int(partition), int(offset))


async def refused_positions(
    bootstrap_servers: str, topic: str, source_topic: str
) -> set[LogPosition]:
    """Positions on ``source_topic`` of the health records the live projection refused."""
    letters = await dead_letters(bootstrap_servers, topic, HEALTH_REFUSED_STAGE)
    positions = (source_position(source) for source, _ in letters)
    return {p for p in positions if p is not None and p.topic == source_topic}
