"""``python -m bench.governor.hotnode``: per-transition cost of the pure governor on one hot node
(issue 11) beside a normal fleet.

The state holds ``--hot-devices`` devices on one node and ``--fleet-nodes`` nodes of
``--fleet-devices`` devices each, all Healthy. Then ``--transitions`` health transitions
alternate between the hot node and the fleet, each device going Unhealthy (a quarantine) and,
half of them, Healthy again. Reported: microseconds per ``step`` on the hot node and on the fleet
(best of ``--repeat`` passes), after the worker's GC tuning unless ``--no-tune-gc``. The module imports only the domain (``step`` and its inputs), so it
can be run against another revision's code for an A/B: ``PYTHONPATH=<other tree> python
bench/governor/hotnode.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from datetime import UTC, datetime, timedelta

from services.domain.events import DeviceSource, Health
from services.domain.governance.inputs import HealthTransition
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOT = "hot-node"


def _transition(node: str, rid: str, health: Health, version: int, t: float) -> HealthTransition:
    return HealthTransition(
        node=node,
        resource_id=rid,
        resource_name="nvidia.com/gpu",
        source=DeviceSource.DEVICE_PLUGIN,
        health=health,
        status_version=version,
        observed_at=T0 + timedelta(seconds=t),
        partition=0,
        offset=version,
        pods=(),
    )


def one_pass(
    hot: int, fleet_nodes: int, fleet_devices: int, transitions: int, ceiling: int | None = None
) -> tuple[float, float]:
    """Build the state, then time ``transitions`` steps; returns (hot us/step, fleet us/step)."""
    # No rate limit or breaker in the way: every Unhealthy device is quarantined at once.
    # ``ceiling`` None keeps the policy's default (and runs on trees that predate the setting).
    policy = GovernancePolicy(
        restrict_node_burst=10**9,
        restrict_fleet_burst=10**9,
        breaker_min_devices=10**9,
        breaker_min_nodes=10**9,
    )
    if ceiling is not None:
        policy = dataclasses.replace(policy, max_devices_per_node=ceiling)
    state = GovernorState()
    seq = 0
    for i in range(hot):
        step(state, _transition(HOT, f"GPU-{i}", Health.HEALTHY, 1, 0.0), seq, policy)
        seq += 1
    for n in range(fleet_nodes):
        for i in range(fleet_devices):
            step(state, _transition(f"node-{n}", f"GPU-{i}", Health.HEALTHY, 1, 0.0), seq, policy)
            seq += 1
    state.clear_dirty()
    spent = {True: 0.0, False: 0.0}
    count = {True: 0, False: 0}
    for k in range(transitions):
        on_hot = k % 2 == 0
        j = k // 2
        if on_hot:
            node, rid = HOT, f"GPU-{j % hot}"
        else:
            node, rid = f"node-{j % fleet_nodes}", f"GPU-{(j // fleet_nodes) % fleet_devices}"
        health = Health.UNHEALTHY if (j // max(1, hot)) % 2 == 0 else Health.HEALTHY
        record = _transition(node, rid, health, 2 + k, 1.0 + k)
        started = time.perf_counter()
        step(state, record, seq, policy)
        spent[on_hot] += time.perf_counter() - started
        count[on_hot] += 1
        seq += 1
        if seq % 2000 == 0:
            state.clear_dirty()
    return (spent[True] / max(1, count[True]) * 1e6, spent[False] / max(1, count[False]) * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hot-devices", type=int, default=1000, help="devices on the hot node")
    parser.add_argument("--fleet-nodes", type=int, default=100, help="normal nodes")
    parser.add_argument("--fleet-devices", type=int, default=8, help="devices per normal node")
    parser.add_argument("--transitions", type=int, default=2000, help="timed transitions")
    parser.add_argument("--repeat", type=int, default=3, help="passes (best one counts)")
    parser.add_argument(
        "--max-devices-per-node",
        type=int,
        default=None,
        help="the governor's device ceiling (default: the policy's, 4096)",
    )
    parser.add_argument(
        "--tune-gc",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="apply the worker's GC tuning (services.runtime.loop.tune_gc) first, as it does",
    )
    args = parser.parse_args()
    if args.tune_gc:
        from services.runtime.loop import tune_gc

        tune_gc()
    best = min(
        (
            one_pass(
                args.hot_devices,
                args.fleet_nodes,
                args.fleet_devices,
                args.transitions,
                args.max_devices_per_node,
            )
            for _ in range(args.repeat)
        ),
        key=lambda r: r[0],
    )
    print(f"hot node ({args.hot_devices} devices): {best[0]:.1f} us/transition")
    print(f"fleet ({args.fleet_nodes} x {args.fleet_devices}): {best[1]:.1f} us/transition")


if __name__ == "__main__":
    main()
