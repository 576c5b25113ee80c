"""How the governor takes the governance topic's records, one at a time (issue 10).

:func:`take` is the only entry from a reader of the governance topic (the worker's governor agent,
``replay --governance``). A record (or each entry of a ``ForwardedBatch``, taken in its order as
if it were a record of its own: :mod:`.input_batch`) is one of:

- a forwarded record with its :class:`~.inputs.MergeKey`: into the event-time merge
  (:class:`~.event_order.EventOrder`); whatever the merge releases is folded, each at its key time;
- a :class:`~.inputs.PartitionWatermark`: the merge's progress, which may release records;
- anything else (operator commands, recovery records, records written before issue 10): folded
  at once, at the governor's current clock.

Every fold is numbered by ``state.fleet.order.next_seq`` (the decisions' ``seq``), so decision ids
follow the merged order, not governance-topic offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.domain.governance.decisions import Decision
from services.domain.governance.inputs import GovernanceInput, MergeKey, PartitionWatermark
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState

StepFn = Callable[
    [GovernorState, GovernanceInput, int, GovernancePolicy, MergeKey | None], list[Decision]
]
"""``step(state, record, seq, policy, key) -> decisions``
(:func:`services.domain.governance.machine.step`)."""
RefusalFn = Callable[[GovernorState, GovernanceInput, GovernancePolicy], str | None]
"""Why a record will not be governed (:func:`~services.domain.governance.machine.refusal`)."""


@dataclass(frozen=True, slots=True)
class Folded:
    """One record the governor folded: its merge key (``None`` outside the merge), the decisions
    it caused and, for a record over the node's device ceiling, why it is not governed (it is
    still folded: the node's data-quality decision)."""

    record: GovernanceInput
    key: MergeKey | None
    seq: int
    decisions: list[Decision]
    refused: str | None = None


def start_sequence(state: GovernorState, offset: int | None) -> None:
    """Number folds after a snapshot taken before issue 10 (no ``nextSeq``): from the offset after
    the last folded governance record, so new decision ids never collide with the old
    offset-based ones. A fresh state starts at 0."""
    order = state.fleet.order
    if order.next_seq is None:
        order.next_seq = 0 if offset is None else offset + 1


def take(
    state: GovernorState,
    record: GovernanceInput,
    key: MergeKey | None,
    policy: GovernancePolicy,
    step: StepFn,
    refusal: RefusalFn | None = None,
) -> list[Folded]:
    """Take one governance-topic record; returns what was folded because of it, in fold order
    (none: a record held by the merge, or a redelivery; several: a record that released others)."""
    order = state.fleet.order
    if isinstance(record, PartitionWatermark):
        order.progress(record)
    elif key is not None:
        if not order.offer(key, record):
            return []
    else:
        return [_fold(state, record, None, policy, step, refusal)]
    return [
        _fold(state, released, released_key, policy, step, refusal)
        for released_key, released in order.release()
    ]


def _fold(
    state: GovernorState,
    record: GovernanceInput,
    key: MergeKey | None,
    policy: GovernancePolicy,
    step: StepFn,
    refusal: RefusalFn | None,
) -> Folded:
    order = state.fleet.order
    seq = 0 if order.next_seq is None else order.next_seq
    order.next_seq = seq + 1
    refused = None if refusal is None else refusal(state, record, policy)
    return Folded(record, key, seq, step(state, record, seq, policy, key), refused)
