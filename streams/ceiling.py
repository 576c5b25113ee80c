"""Dead letters of the observations over the device ceiling (:mod:`services.domain.device_ceiling`).

The projection's writer leaves such an observation out of the batch and names it in the commit
hook's :attr:`~services.domain.batch.PendingCommit.over_ceiling`. The health agent sends each to
the dead-letter topic (stage :data:`CEILING_STAGE`, the reason names the node, its device count
and the setting) inside the hook, before the commit: a crash before the commit re-reads the batch
and sends them again, never loses them (at-least-once, as the forwarding). When the batch is
forwarded, the first one of each node goes to the governor instead
(:func:`~services.domain.device_ceiling.first_per_node`), which flags the node and dead-letters
it (stage ``governor-device-ceiling``): every such record is dead-lettered once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import structlog

from services.domain.batch import CommitHook, PendingCommit
from services.domain.device_ceiling import first_per_node
from services.domain.directory import DeviceKey
from services.domain.events import DeviceHealthObserved
from streams.deadletter import deliver_in_order

log = structlog.get_logger(__name__)

CEILING_STAGE: Final = "device-ceiling"
"""``devicestate-stage`` of an observation of a new device of a node at the ceiling."""

SendDeadLetter = Callable[[Any, str], Awaitable[Awaitable[Any]]]
"""``send(faust_message, reason)``: put the dead letter of one original record on the producer;
gives the broker's acknowledgement (:func:`streams.deadletter.deliver_in_order`)."""


def dead_lettering_over_ceiling(
    forward: CommitHook | None,
    events: Sequence[Any],
    send: SendDeadLetter,
    refused: set[DeviceKey],
) -> CommitHook:
    """A commit hook that dead-letters the batch's observations over the ceiling, then runs
    ``forward`` (the forwarder's hook, when there is one). ``events`` are the batch's faust
    events (their ``message`` gives each record's original key and bytes); the refused devices
    are added to ``refused`` (the dedup table must not remember them: the projection has not
    applied them)."""

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
            sends = []
            for over in commit.over_ceiling:
                if id(over) in forwarded:
                    continue
                p = over.record.position
                message = messages[(p.topic, p.partition, p.offset)]
                sends.append(send(message, over.reason))
            await deliver_in_order(sends)
            log.warning(
                "observations over the device ceiling dead-lettered",
                count=len(commit.over_ceiling),
                first=commit.over_ceiling[0].reason,
            )
        if forward is not None:
            await forward(commit)

    return hook
