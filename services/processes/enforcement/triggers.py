"""What triggers an early reconcile pass: governance decisions on the decisions topic.

:func:`kafka_decisions` yields the decisions appended to ``settings.decisions_topic`` from now on
(read from its end, no consumer group, nothing committed: the periodic pass covers anything
missed; undecodable records are skipped). The governor publishes a decision just before it
commits the projection, so a ``DeviceQuarantined`` or ``QuarantineReleased`` decision
(:data:`TRIGGER_KINDS`) becomes an :class:`Expectations` entry (that quarantine present, or
absent) that the loop retries passes for until the database shows it, or its ttl passes.
:func:`follow_decisions` records them and wakes the loop; a failing decision stream is logged and
ends the following (passes continue every interval).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import structlog

from services.domain.governance.decisions import Decision, DecisionKind, decode_decision
from services.processes.enforcement.metrics import EnforcementMetrics
from services.runtime.config import GovernanceTopicSettings

log = structlog.get_logger(__name__)

TRIGGER_KINDS = frozenset({DecisionKind.QUARANTINED, DecisionKind.QUARANTINE_RELEASED})


class Expectations:
    """Quarantines a decision announced that the database does not show yet (``present``: it
    should be enforced; ``not present``: released). Settled by a pass that reads them so, or
    dropped after ``ttl`` seconds."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._pending: dict[str, tuple[bool, float]] = {}

    def add(self, decision: Decision) -> bool:
        quarantine_id = decision.details.get("quarantineID")
        if decision.kind not in TRIGGER_KINDS or not isinstance(quarantine_id, str):
            return False
        present = decision.kind is DecisionKind.QUARANTINED
        self._pending[quarantine_id] = (present, self.clock() + self.ttl)
        return True

    def settle(self, enforced: frozenset[str]) -> None:
        now = self.clock()
        self._pending = {
            q: (present, deadline)
            for q, (present, deadline) in self._pending.items()
            if deadline > now and (q in enforced) != present
        }

    @property
    def pending(self) -> bool:
        return bool(self._pending)


async def kafka_decisions(
    settings: GovernanceTopicSettings, stop: asyncio.Event
) -> AsyncIterator[Decision]:
    """Decisions appended to ``settings.decisions_topic`` from now on (no consumer group, nothing
    committed); waits and retries while Kafka is unreachable."""
    from services.adapters.kafka.follow import Start, TopicFollower

    async with TopicFollower(
        settings,
        [settings.decisions_topic],
        decode_decision,
        client_id="devicestate-enforce",
        group_id=None,
        start=Start.LATEST,
    ) as follower:
        if not await follower.start(stop):
            return
        async for batches in follower.batches(stop):
            for records in batches.values():
                for record in records:
                    if record.value is not None:  # undecodable: skipped
                        yield record.value


async def follow_decisions(
    decisions: AsyncIterator[Decision],
    expectations: Expectations,
    wake: asyncio.Event,
    metrics: EnforcementMetrics,
) -> None:
    """Record each trigger decision as an expectation, count it (``triggers{kind}``) and set
    ``wake``, until ``decisions`` ends or fails (logged, not raised) or the task is cancelled."""
    try:
        async for decision in decisions:
            if expectations.add(decision):
                metrics.triggers.labels(decision.kind.value).inc()
                wake.set()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("decisions no longer followed; reconciling every interval only")
