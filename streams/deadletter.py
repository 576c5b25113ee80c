"""Dead letters of the worker's agents (:mod:`streams.dedup`, :mod:`streams.governor`).

A record that does not decode, or whose body is of another type than its ``devicestate-type``
header says, is sent with its original key and bytes to ``settings.dead_letter_topic`` and the
stream goes on. Headers: ``devicestate-reason`` (the decode error), ``devicestate-stage`` (the
agent's stage: ``decode`` for the health agent, ``governor-decode`` for the governor,
``governor-device-ceiling`` for a transition of a node over ``max_devices_per_node``),
``devicestate-source`` (``<topic>/<partition>/<offset>`` of the original). Each is counted in
``dead_lettered{stage}``.
"""

from __future__ import annotations

from typing import Any

from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE
from streams.metrics import WorkerMetrics


async def dead_letter(
    topic: Any, metrics: WorkerMetrics, message: Any, *, stage: str, reason: str
) -> Any:
    """Send faust ``message`` to the dead-letter ``topic`` (a faust topic, raw serializers) and
    await the broker's acknowledgement (its record metadata). A producer failure is raised: the
    agent then withholds the batch's acks, so the batch is read again after a restart."""
    source = f"{message.topic}/{message.partition}/{message.offset}"
    return await dead_letter_record(
        topic,
        metrics,
        key=message.key,
        value=message.value,
        source=source,
        stage=stage,
        reason=reason,
    )


async def dead_letter_record(
    topic: Any,
    metrics: WorkerMetrics,
    *,
    key: bytes | None,
    value: bytes | None,
    source: str,
    stage: str,
    reason: str,
) -> Any:
    """:func:`dead_letter` of a record given by its parts (``source``:
    ``<topic>/<partition>/<offset>`` of the original)."""
    metrics.dead_lettered.labels(stage).inc()
    headers = [
        (HEADER_REASON, reason.encode()),
        (HEADER_STAGE, stage.encode()),
        (HEADER_SOURCE, source.encode()),
    ]
    fut = await topic.send(key=key, value=value, headers=headers, force=True)
    return await fut
