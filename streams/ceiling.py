"""Dead letters of the observations over the device ceiling (:mod:`services.domain.device_ceiling`).

The projection's writer leaves such an observation out of the batch and names it in the commit
hook's :attr:`~services.domain.batch.PendingCommit.over_ceiling`. When the batch is forwarded,
the first one of each node goes to the governor (:func:`~services.domain.device_ceiling.first_per_node`),
which flags the node and dead-letters it (stage ``governor-device-ceiling``). The health agent
dead-letters the others (stage :data:`CEILING_STAGE`) inside the hook, before the commit: a crash
before the commit re-reads the batch and sends them again, never loses them (at-least-once, as
the forwarding). Every such record is dead-lettered once.

**One letter per node and batch, not per record.** A hot node refuses thousands of observations
per batch; a dead letter each made their sends most of the worker's time and held the fleet's
decisions back behind the hot partition (``docs/reliability.md``, "One hot node"). So the health
agent's letters of one node and batch go together: :func:`ceiling_letters` packs them, in log
order, into letters of at most ``budget`` bytes, each with the node as key, the headers of every
dead letter (reason: the node, its device count, the setting and how many observations; source:
the first original's ``topic/partition/offset``), ``devicestate-records`` = how many, and as value
the envelope::

    {"deadLetters": "device-ceiling", "node": "<node>", "records": [
        {"source": "<topic>/<partition>/<offset>", "reason": "<why>", "value": <the original>}]}

where ``value`` is the original record's JSON, verbatim (a decoded observation is JSON); an
observation of a schema-2 record (:mod:`services.domain.observations`) is written alone, as
the schema-1 record it stands for, with its record's source. A lone
original (the only one of its node and batch, or too large for an envelope) is sent as any dead
letter: its bytes as the value, its own reason, no ``devicestate-records``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
import structlog

from services.adapters.kafka.headers import record_type
from services.domain.batch import CommitHook, PendingCommit
from services.domain.device_ceiling import OverCeiling, first_per_node
from services.domain.directory import DeviceKey
from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved
from services.domain.observations import OBSERVATIONS_TYPE
from streams.deadletter import Letter, deliver_in_order

log = structlog.get_logger(__name__)

CEILING_STAGE: Final = "device-ceiling"
"""``devicestate-stage`` of an observation of a new device of a node at the ceiling."""

ENVELOPE_KIND: Final = "device-ceiling"
"""``deadLetters`` of the envelope (:func:`ceiling_letters`)."""

HEADROOM_BYTES: Final = 4096
"""Left free in a letter below ``max_message_bytes``: its key, headers and the record framing."""


SendLetter = Callable[[Letter], Awaitable[Awaitable[Any]]]
"""``send(letter)``: put one dead letter on the producer (stage :data:`CEILING_STAGE`); gives the
broker's acknowledgement (:func:`streams.deadletter.deliver_in_order`)."""


def ceiling_letters(refused: Sequence[tuple[OverCeiling, Any]], budget: int) -> list[Letter]:
    """The dead letters of ``refused`` (each observation with its faust message, in log order):
    per node, envelopes (module doc) of at most ``budget`` bytes, the letters in log order; an
    original that does not fit an envelope alone is its own letter. Pure: the same input gives the same
    letters."""
    by_node: dict[str, list[tuple[OverCeiling, Any]]] = {}
    for item in refused:
        by_node.setdefault(_node(item[0]), []).append(item)
    letters: list[Letter] = []
    for node, items in by_node.items():
        head = orjson.dumps({"deadLetters": ENVELOPE_KIND, "node": node})[:-1] + b',"records":['
        chunk: list[bytes] = []
        first: tuple[OverCeiling, Any] | None = None
        size = len(head) + 2
        for over, message in items:
            entry = orjson.dumps(
                {
                    "source": _source(message),
                    "reason": over.reason,
                    "value": orjson.Fragment(message.value),
                }
            )
            alone = len(head) + len(entry) + 2 > budget  # too large for an envelope of its own
            if chunk and (alone or size + len(entry) + 1 > budget):  # letters in log order
                assert first is not None
                letters.append(_envelope(node, head, chunk, first))
                chunk, size = [], len(head) + 2
            if alone:
                letters.append(Letter(message.key, message.value, _source(message), over.reason))
                continue
            if not chunk:
                first = (over, message)
            chunk.append(entry)
            size += len(entry) + 1
        if chunk:
            assert first is not None
            letters.append(_envelope(node, head, chunk, first))
    return letters


def _envelope(
    node: str, head: bytes, entries: list[bytes], first: tuple[OverCeiling, Any]
) -> Letter:
    over, message = first
    if len(entries) == 1:  # a lone original goes as itself, as any dead letter
        return Letter(message.key, message.value, _source(message), over.reason)
    # The node's part of the first reason (services.domain.device_ceiling._reason), then the count.
    node_part = over.reason.partition("; resourceID")[0]
    reason = f"{node_part}; {len(entries)} observations of new resourceIDs not applied"
    return Letter(
        message.key, head + b",".join(entries) + b"]}", _source(message), reason, len(entries)
    )


def _node(over: OverCeiling) -> str:
    event = over.record.event
    assert isinstance(event, DeviceHealthObserved)  # only observations are over the ceiling
    return event.node


@dataclass(frozen=True, slots=True)
class _Observation:
    """The original of one observation of a schema-2 record: its own schema-1 bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


def _original(over: OverCeiling, message: Any) -> Any:
    """``message``, or for an observation of a schema-2 record (which holds others too) the
    observation alone as a schema-1 record (the letter's value), at the record's source."""
    headers = getattr(message, "headers", None)
    if record_type(headers) != OBSERVATIONS_TYPE and over.record.position.index == 0:
        value = message.value
        if value is None or b'"schema":2' not in value:
            return message
    return _Observation(
        message.topic,
        message.partition,
        message.offset,
        message.key,
        encode_event(over.record.event),
    )


def _source(message: Any) -> str:
    return f"{message.topic}/{message.partition}/{message.offset}"


def dead_lettering_over_ceiling(
    forward: CommitHook | None,
    events: Sequence[Any],
    send: SendLetter,
    refused: set[DeviceKey],
    budget: int,
) -> CommitHook:
    """A commit hook that dead-letters the batch's observations over the ceiling
    (:func:`ceiling_letters`, letters of at most ``budget`` bytes), then runs ``forward`` (the
    forwarder's hook, when there is one). ``events`` are the batch's faust events (their
    ``message`` gives each record's original key and bytes); the refused devices are added to
    ``refused`` (the dedup table must not remember them: the projection has not applied them)."""

    async def hook(commit: PendingCommit) -> None:
        if commit.over_ceiling:
            refused.update(
                o.record.event.device_key
                for o in commit.over_ceiling
                if isinstance(o.record.event, DeviceHealthObserved)
            )
            messages = {
                (e.message.topic, e.message.partition, e.message.offset): e.message for e in events
            }
            forwarded = (
                set() if forward is None else {id(o) for o in first_per_node(commit.over_ceiling)}
            )
            ours = [
                (o, _original(o, messages[(p.topic, p.partition, p.offset)]))
                for o in commit.over_ceiling
                if id(o) not in forwarded
                for p in (o.record.position,)
            ]
            letters = ceiling_letters(ours, budget)
            await deliver_in_order(send(letter) for letter in letters)
            log.warning(
                "observations over the device ceiling dead-lettered",
                count=len(commit.over_ceiling),
                letters=len(letters),
                first=commit.over_ceiling[0].reason,
            )
        if forward is not None:
            await forward(commit)

    return hook
