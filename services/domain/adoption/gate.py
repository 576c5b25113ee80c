"""The adoption gate, evaluated by the governor on event time: its rules live in
:mod:`services.domain.governance.adoption_gate` (the governor folds it, and the governance package
imports nothing of this one). Re-exported here for the API's on-read view."""

from services.domain.governance.adoption_gate import (
    RULES,
    PoolGate,
    Reason,
    Thresholds,
    Verdict,
    evaluate,
    evaluate_pool,
    pool_claims,
    pool_nodes,
)

__all__ = [
    "RULES",
    "PoolGate",
    "Reason",
    "Thresholds",
    "Verdict",
    "evaluate",
    "evaluate_pool",
    "pool_claims",
    "pool_nodes",
]
