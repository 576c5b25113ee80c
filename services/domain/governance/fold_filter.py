"""Which folds of the governance log are carried out: leaving out the records whose rows the
projection refused (issue 11 item 3).

A record the governor folds is identified by its :data:`FoldId`: a forwarded record of the
event-time merge by its :attr:`MergeKey.source <.inputs.MergeKey.source>` (``(partition, offset,
index)`` on the device-health topic: the merge may release it in a later batch than the one it
was read in), any other record by its governance-topic offset. :class:`FoldFilter` wraps the
``step`` that :func:`~.intake.take` calls: a fold it leaves out still takes its place in the order
(its ``seq`` is used, so later decision ids do not move) but changes nothing and decides nothing.
The worker's governor leaves out the folds the database refused (and, trying prefixes of a batch,
every fold after a limit); ``replay --governance`` leaves out the same folds, read back from the
dead-letter topic, so a replay folds the same log minus the same records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from services.domain.governance.decisions import Decision
from services.domain.governance.input_codec import decode_keyed
from services.domain.governance.inputs import GovernanceInput, MergeKey
from services.domain.governance.intake import StepFn
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState

FoldId: TypeAlias = tuple[int, int, int] | int
"""A merged record's ``(partition, offset, index)`` on the device-health topic, or the
governance-topic offset of any other record."""

REFUSED_STAGE: Final = "governor-write"
"""``devicestate-stage`` of the dead letter of a fold whose rows the database refused."""


def fold_id(key: MergeKey | None, offset: int) -> FoldId:
    """The :data:`FoldId` of a record with merge key ``key`` read at governance ``offset``."""
    return key.source if key is not None else offset


@dataclass(slots=True)
class FoldFilter:
    """Leaves out the folds in ``refused`` (``FoldId -> why``) and, when ``limit`` is set, every
    fold after the first ``limit`` carried out. Set :attr:`offset` to the governance offset of
    the record before each :func:`~.intake.take`; :attr:`folded` lists the folds carried out, in
    order, and :attr:`left_out` those in ``refused`` met on the way."""

    refused: Mapping[FoldId, str] = field(default_factory=dict)
    limit: int | None = None
    offset: int = -1
    folded: list[FoldId] = field(default_factory=list)
    left_out: list[FoldId] = field(default_factory=list)

    def guard(self, step: StepFn) -> StepFn:
        """``step``, carried out only for the folds this filter lets through."""

        def guarded(
            state: GovernorState,
            record: GovernanceInput,
            seq: int,
            policy: GovernancePolicy,
            key: MergeKey | None,
        ) -> list[Decision]:
            which = fold_id(key, self.offset)
            if which in self.refused:
                self.left_out.append(which)
                return []
            if self.limit is not None and len(self.folded) >= self.limit:
                return []
            self.folded.append(which)
            return step(state, record, seq, policy, key)

        return guarded


def refused_fold(
    stage: str | None, source: str | None, value: bytes | None, governance_topic: str
) -> FoldId | None:
    """The fold a dead letter says the governor left out (its ``devicestate-stage`` is
    :data:`REFUSED_STAGE`), from its ``devicestate-source`` (``<topic>/<partition>/<offset>``) and
    its value: a record of ``governance_topic`` by its offset, a merged record by the
    :class:`~.inputs.MergeKey` its re-encoded value carries. ``None`` for any other dead letter
    (or one that does not parse)."""
    if stage != REFUSED_STAGE or source is None:
        return None
    topic, _, offset = source.rpartition("/")
    topic = topic.rpartition("/")[0]
    if topic == governance_topic:
        return int(offset) if offset.isdigit() else None
    if value is None:
        return None
    try:
        _, key = decode_keyed(value)
    except ValueError:  # EventDecodeError: not a letter the governor wrote
        return None
    return key.source if key is not None else None
