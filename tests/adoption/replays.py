"""The adoption signals' shared property: a log of forwarded records, fed to the governor with
random batch sizes, partition interleavings, redeliveries and restarts (a snapshot restored from
its JSON), must record the same ``AdoptionVerdictChanged`` decisions row for row.

Each signal's test (``test_verdicts``, ``test_failure_verdicts``, ``test_ready_verdicts``) builds
its log and asserts what the one outcome says; this module runs the seeds.
"""

from __future__ import annotations

import random

import orjson

from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.input_codec import decode_keyed, encode_input
from services.domain.governance.inputs import OperatorCommand
from services.domain.governance.intake import take
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from tests.governance.test_event_order import Log, forwarded_batches

VerdictRow = tuple[str, object, str | None, object, bytes]
"""One ``AdoptionVerdictChanged`` decision: (decision_id, at, incident, alert, details JSON)."""


def verdict_rows_of_every_seed(
    logs: list[Log], declaration: OperatorCommand, seeds: int = 16
) -> set[tuple[tuple[VerdictRow, ...], bytes]]:
    """Feed ``declaration`` then ``logs`` (one list of (record, event time) per partition) to a
    fresh governor once per seed, each time over the wire (encoded and decoded) with that
    seed's batching, interleaving, redeliveries and restarts (30 % of the batches end with a
    restore from the snapshot's JSON). Returns the distinct outcomes: (the verdict rows, the
    adoption state's JSON); one element when the decisions do not depend on any of it."""
    outcomes: set[tuple[tuple[VerdictRow, ...], bytes]] = set()
    for seed in range(seeds):
        rng = random.Random(seed)
        state, policy = GovernorState(), GovernancePolicy()
        decided: list[Decision] = []
        for folded in take(state, declaration, None, policy, step):
            decided.extend(folded.decisions)
        for batch in forwarded_batches(logs, rng):
            for record, key in batch:
                record, key = decode_keyed(encode_input(record, key))  # over the wire
                for folded in take(state, record, key, policy, step):
                    decided.extend(folded.decisions)
            if rng.random() < 0.3:
                snap = orjson.loads(orjson.dumps(state.snapshot()))
                state = GovernorState.restore(
                    snap["devices"],
                    snap["nodes"],
                    snap["fleet"],
                    policy.heartbeat_grace_seconds,
                    snap.get("workloads"),
                    snap.get("nodeLabels"),  # the nodes' label rows
                )
        rows = tuple(
            (d.decision_id, d.at, d.incident, d.alert, orjson.dumps(d.details))
            for d in decided
            if d.kind is DecisionKind.ADOPTION_VERDICT_CHANGED
        )
        adoption = state.fleet.adoption
        held = {**adoption.to_json(), "labelRows": adoption.label_rows()}  # labels: nodes' rows
        outcomes.add((rows, orjson.dumps(held)))
    return outcomes
