"""The governor's per-node counts (issue 11): kept incrementally, they equal a full recount
after every record of a generated governance topic, and after a snapshot and restore."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from services.domain.governance.machine import step
from services.domain.governance.node_index import NodeIndex, recount
from services.domain.governance.state import GovernorState
from tests.governance.strategies import Generated, governance_runs
from tests.governance.test_properties import PROPERTY_SETTINGS


def assert_counts_exact(state: GovernorState) -> None:
    """The incremental index against one computed from scratch over every device."""
    full = recount(state.devices.values())
    assert state.index.unhealthy == full.unhealthy
    assert state.index.unknown == full.unknown
    for node, keys in state.by_node.items():
        assert (
            state.device_count(node) == len(keys) == sum(1 for k in state.devices if k[0] == node)
        )


@PROPERTY_SETTINGS
@given(governance_runs(), st.floats(min_value=0.0, max_value=1.0))
def test_incremental_node_counts_equal_a_full_recount(g: Generated, fraction: float) -> None:
    state = GovernorState()
    cut = int(len(g.records) * fraction)
    for seq, record in enumerate(g.records[:cut]):
        step(state, record, seq, g.policy)
        assert_counts_exact(state)
    snapshot = orjson.loads(orjson.dumps(state.snapshot()))
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], g.policy.heartbeat_grace_seconds
    )
    assert_counts_exact(restored)
    assert restored.index == state.index
    for seq, record in enumerate(g.records[cut:], start=cut):
        step(restored, record, seq, g.policy)
        assert_counts_exact(restored)


def test_an_empty_state_has_no_counts() -> None:
    state = GovernorState()
    assert state.index == NodeIndex()
    assert state.device_count("n1") == 0
    assert state.index.unhealthy_count("n1") == 0
    assert not state.index.any_unknown("n1")
