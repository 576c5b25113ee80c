"""The ceiling of governed devices per node (issue 11, ``max_devices_per_node``): a new device of a
node at the ceiling is refused (not governed) and the node gets one data-quality decision, also
after a snapshot and restore; known devices and other nodes are governed as before."""

from __future__ import annotations

import orjson

from services.domain.events import Health
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.inputs import GovernanceInput
from services.domain.governance.machine import CEILING_CONFLICT, refusal, step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.runtime.config import PolicySettings
from tests.governance.strategies import transition

POLICY = GovernancePolicy(max_devices_per_node=3)


def run(records: list[GovernanceInput], state: GovernorState, start: int = 0) -> list[Decision]:
    decisions: list[Decision] = []
    for seq, record in enumerate(records, start=start):
        decisions.extend(step(state, record, seq, POLICY))
    return decisions


def flags(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if d.kind is DecisionKind.DATA_QUALITY]


def test_the_default_ceiling_is_4096_and_the_setting_feeds_the_policy() -> None:
    assert GovernancePolicy().max_devices_per_node == 4096
    assert PolicySettings().max_devices_per_node == 4096
    policy = GovernancePolicy.from_settings(PolicySettings(max_devices_per_node=7))
    assert policy.max_devices_per_node == 7


def test_a_node_at_its_ceiling_governs_no_new_device_and_is_flagged_once() -> None:
    state = GovernorState()
    healthy = [transition("node-a", f"GPU-{i}", Health.HEALTHY, 1 + i, i) for i in range(3)]
    assert not flags(run(healthy, state))

    new = transition("node-a", "GPU-3", Health.UNHEALTHY, 10, 10)
    reason = refusal(state, new, POLICY)
    assert reason == (
        "device ceiling: node node-a already has 3 governed devices "
        "(max_devices_per_node=3); GPU-3 is not governed"
    )
    [flag] = flags(decisions := run([new], state, start=3))
    assert decisions == [flag]  # no quarantine of a device that is not governed
    assert flag.node == "node-a"
    assert flag.incident == f"data-quality/{CEILING_CONFLICT}/node-a"
    assert flag.details["conflict"] == CEILING_CONFLICT
    assert flag.details["detail"] == reason and flag.details["ceiling"] == 3
    assert ("node-a", "GPU-3") not in state.devices and state.device_count("node-a") == 3

    # A second new device: refused again, no second flag, also after a snapshot and restore.
    snapshot = orjson.loads(orjson.dumps(state.snapshot()))
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], POLICY.heartbeat_grace_seconds
    )
    again = transition("node-a", "GPU-4", Health.UNHEALTHY, 11, 11)
    assert refusal(restored, again, POLICY) is not None
    assert run([again], restored, start=4) == []

    # Known devices of the node and devices of other nodes are governed as before.
    assert (
        refusal(restored, transition("node-a", "GPU-0", Health.UNHEALTHY, 12, 12), POLICY) is None
    )
    known = run([transition("node-a", "GPU-0", Health.UNHEALTHY, 12, 12)], restored, start=5)
    assert DecisionKind.QUARANTINED in {d.kind for d in known}
    other = run([transition("node-b", "GPU-9", Health.UNHEALTHY, 13, 13)], restored, start=6)
    assert DecisionKind.QUARANTINED in {d.kind for d in other}


def test_a_node_below_its_ceiling_keeps_no_flag_in_its_snapshot() -> None:
    state = GovernorState()
    run([transition("node-a", "GPU-0", Health.UNHEALTHY, 1, 0)], state)
    assert all("ceilingIncident" not in n for n in state.snapshot()["nodes"])
