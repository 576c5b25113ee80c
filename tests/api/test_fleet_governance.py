"""``GET /v1/fleet`` and ``GET /v1/governance`` show the fleet-level governance state of issue 15
(a stale watch, open node incidents) as the real governor leaves it: its fleet snapshot, after a
node-wide fault and a silent watch folded by ``machine.step``, in the real PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from services.domain.events import Health
from services.domain.governance.inputs import MergeKey
from services.domain.governance.machine import step
from services.domain.governance.state import GovernorState
from services.domain.node_events import WatcherTick
from tests.api.conftest import ApiFactory, Governor
from tests.governance.strategies import T0, at, transition
from tests.governance.test_node_incidents import GPUS, POLICY


def governed() -> GovernorState:
    """gpu-node-a: eight GPUs, four fault within 0.3 s; then the watch goes silent for 100 s."""
    state = GovernorState()
    records = [
        (WatcherTick(0, at(0), watch_seen_at=at(0)), 0.0),
        *((transition("gpu-node-a", g, Health.HEALTHY, i + 1, 0), 0.0) for i, g in enumerate(GPUS)),
        *(
            (transition("gpu-node-a", g, Health.UNHEALTHY, 20 + i, 10 + i * 0.1), 10 + i * 0.1)
            for i, g in enumerate(GPUS[:4])
        ),
        (WatcherTick(0, at(100), watch_seen_at=at(0)), 100.0),
    ]
    for seq, (record, seconds) in enumerate(records):
        step(state, record, seq, POLICY, MergeKey(at(seconds), 0, seq, 0))
    return state


async def test_the_fleet_shows_the_stale_watch_and_the_node_incident(
    make_api: ApiFactory, governor: Governor
) -> None:
    async with make_api(clock=lambda: T0 + timedelta(seconds=110)) as api:
        before = (await api.get("/v1/fleet")).json()
        assert before["governance"] == {
            "governorSeen": False,
            "breaker": {"open": False, "openedAt": None, "incident": None},
            "automation": {"paused": False, "pausedBy": None, "reason": None},
            "watch": {"stale": False, "lastSeenAt": None, "incident": None},
            "nodeIncidents": [],
        }
        state = governed()
        await governor.fleet(state.fleet.watermark, snapshot=state.fleet.to_json())
        fleet = (await api.get("/v1/fleet")).json()
        governance = fleet["governance"]
        assert governance["governorSeen"] is True
        assert governance["watch"] == {
            "stale": True,
            "lastSeenAt": "2026-11-29T12:00:00Z",
            "incident": "watch-stale/2026-11-29T12:00:00Z",
        }
        assert governance["nodeIncidents"] == [
            {
                "node": "gpu-node-a",
                "incident": "node-fault/gpu-node-a/2026-11-29T12:00:10Z",
                "openedAt": "2026-11-29T12:00:10.300000Z",
                "devices": GPUS[:4],
            }
        ]
        status = (await api.get("/v1/governance")).json()
        assert status["watch"] == governance["watch"]
        assert status["nodeIncidents"] == governance["nodeIncidents"]
        assert "watch STALE (no event or bookmark since 2026-11-29T12:00:00Z)" in status["message"]
        assert "1 node incident(s) open" in status["message"]
