"""The adoption gate's rules, pure: one golden case per signal, the verdicts' precedence, pool
membership, and the property that the gate is a function of its inputs (the order facts and
declarations arrive in does not matter)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.adoption.facts import (
    ClaimFact,
    ConflictFact,
    DeviceFact,
    DivergenceFact,
    FailureFact,
    InventoryFacts,
    ReadyFact,
    SliceFact,
)
from services.domain.adoption.gate import PoolGate, Thresholds, Verdict, evaluate, evaluate_pool
from services.domain.governance.adoption import (
    AdoptionDeclaration,
    Declared,
    Phase,
    PoolSelector,
    PoolState,
    fold,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DRIVER = "gpu.example.com"
NOW = T0 + timedelta(hours=1)
SLICES = frozenset(
    {
        SliceFact(DRIVER, "east", "node-a"),
        SliceFact(DRIVER, "east", "node-b"),
        SliceFact(DRIVER, "west", "node-w"),
        SliceFact("other.example.com", "east", "node-x"),
    }
)


def pool(
    phase: Phase = Phase.CANARY,
    slice_pool: str | None = "east",
    name: str = "east",
    nodes: tuple[str, ...] = (),
) -> PoolState:
    selector = PoolSelector(nodes=nodes) if nodes else PoolSelector(driver=DRIVER, pool=slice_pool)
    declared = Declared(1, T0, "olga", "canary", AdoptionDeclaration(name, selector, phase))
    return PoolState(current=declared, history=(declared,))


def facts(**fields: object) -> InventoryFacts:
    return InventoryFacts(slices=SLICES, **fields)  # type: ignore[arg-type]


def reason(gate: PoolGate, code: str) -> tuple[Verdict, dict[str, object]]:
    [found] = [r for r in gate.reasons if r.code == code]
    return found.verdict, dict(found.figures)


def test_a_clean_pool_expands_and_says_every_signal_it_read() -> None:
    gate = evaluate_pool(pool(), facts(), Thresholds(), NOW)
    assert gate.verdict is Verdict.EXPAND
    assert gate.nodes == ("node-a", "node-b")
    assert [(r.code, r.verdict) for r in gate.reasons] == [
        ("ownership-conflict", Verdict.EXPAND),
        ("slice-capacity-divergence", Verdict.EXPAND),
        ("devices-quarantined", Verdict.EXPAND),
        ("leaked-claims", Verdict.EXPAND),
        ("claim-failures", Verdict.EXPAND),
        ("ready-latency", Verdict.EXPAND),
        ("tenant-boundary", Verdict.EXPAND),
    ]


def failure(
    node: str, seconds_ago: float, cls: str = "retryable", count: int = 1, uid: str = "ev"
) -> FailureFact:
    return FailureFact(node, NOW - timedelta(seconds=seconds_ago), uid, count, count, cls)


def test_claim_failures_in_the_window_hold_and_the_tenants_are_a_figure_only() -> None:
    found = frozenset(
        {
            failure("node-a", 10, count=2, uid="e1"),  # an Event whose count reached 2
            failure("node-b", 600, "needs-cleanup", uid="e2"),  # at the window's edge: counted
            failure("node-a", 601, count=7, uid="e3"),  # out of the window
            failure("node-w", 10, count=9, uid="e4"),  # another pool's node
            failure("node-b", 5, "non-retryable", count=30, uid="e5"),  # the tenant's claim
        }
    )
    gate = evaluate_pool(pool(), facts(failures=found), Thresholds(failures_hold=4), NOW)
    assert gate.verdict is Verdict.EXPAND
    assert reason(gate, "claim-failures") == (
        Verdict.EXPAND,
        {
            "failures": 3,
            "retryable": 2,
            "needsCleanup": 1,
            "nonRetryable": 30,
            "windowSeconds": 600.0,
            "holdAt": 4,
            "rollbackAt": 0,
        },
    )
    more = found | {failure("node-b", 1, uid="e6")}
    gate = evaluate_pool(pool(), facts(failures=more), Thresholds(failures_hold=4), NOW)
    assert (gate.verdict, reason(gate, "claim-failures")[0]) == (Verdict.HOLD, Verdict.HOLD)
    rollback = Thresholds(failures_hold=2, failures_rollback=4)
    assert evaluate_pool(pool(), facts(failures=more), rollback, NOW).verdict is Verdict.ROLLBACK
    off = Thresholds(failures_hold=0)
    assert evaluate_pool(pool(), facts(failures=more), off, NOW).verdict is Verdict.EXPAND


GPU_CLASS = "gpu.example.com"
PLUGIN_RESOURCE = "example.com/gpu"


def classed_pool(device_class: str | None = GPU_CLASS, phase: Phase = Phase.CANARY) -> PoolState:
    selector = PoolSelector(driver=DRIVER, pool="east")
    declaration = AdoptionDeclaration("east", selector, phase, device_class)
    declared = Declared(1, T0, "olga", "canary", declaration)
    return PoolState(current=declared, history=(declared,))


def ready(
    node: str, pod: str, seconds: float, path: str = "dra", ago: float = 60, cls: str = GPU_CLASS
) -> ReadyFact:
    """A Pod's bound-to-Ready sample ``ago`` seconds before NOW; a plugin sample is of
    PLUGIN_RESOURCE, which the class ``cls`` names as its extendedResourceName."""
    if path == "dra":
        return ReadyFact(node, NOW - timedelta(seconds=ago), pod, cls, path, seconds, (cls,))
    at = NOW - timedelta(seconds=ago)
    return ReadyFact(node, at, pod, PLUGIN_RESOURCE, path, seconds, (cls,))


def test_ready_latency_compares_the_pools_dra_p95_with_the_plugins_of_the_class() -> None:
    dra = {ready("node-a" if i % 2 else "node-b", f"d{i}", float(i)) for i in range(1, 21)}
    plugin = {ready(f"plug-{i}", f"p{i}", i / 2, "device-plugin") for i in range(1, 21)}
    noise = {
        ready("node-w", "w1", 900.0),  # DRA on another pool's node
        ready("node-a", "o1", 900.0, cls="other.example.com"),  # DRA of another class
        ready("plug-1", "q1", 0.0, "device-plugin", cls="other.example.com"),  # another resource
        ready("node-a", "old", 900.0, ago=3601),  # out of the window
        ready("node-b", "d2", 2.0, ago=30),  # Pod d2 seen again (a restarted watcher): once
    }
    samples = frozenset(dra | plugin | noise)
    gate = evaluate_pool(classed_pool(), facts(ready=samples), Thresholds(), NOW)
    # nearest rank: the ceil(0.95 * 20) = 19th smallest of each side
    assert reason(gate, "ready-latency") == (
        Verdict.EXPAND,
        {
            "deviceClass": GPU_CLASS,
            "draP95": 19.0,
            "pluginP95": 9.5,
            "draSamples": 20,
            "pluginSamples": 20,
            "ratio": 2.0,
            "windowSeconds": 3600.0,
            "minSamples": 20,
            "holdRatio": 2.0,
            "rollbackRatio": 0.0,
        },
    )
    slower = samples | {ready("node-a", "d21", 100.0)}  # 21 samples: the 20th smallest, 20 s
    gate = evaluate_pool(classed_pool(), facts(ready=slower), Thresholds(), NOW)
    verdict, figures = reason(gate, "ready-latency")
    assert (gate.verdict, verdict, figures["draP95"], figures["ratio"]) == (
        Verdict.HOLD,
        Verdict.HOLD,
        20.0,
        round(20 / 9.5, 4),
    )
    [latency] = [r for r in gate.reasons if r.code == "ready-latency"]
    assert "p95 20 s on DRA against 9.5 s" in latency.detail
    rollback = Thresholds(ready_rollback_ratio=2.05)
    assert evaluate_pool(classed_pool(), facts(ready=slower), rollback, NOW).verdict is (
        Verdict.ROLLBACK
    )
    off = Thresholds(ready_hold_ratio=0)
    assert evaluate_pool(classed_pool(), facts(ready=slower), off, NOW).verdict is Verdict.EXPAND
    dra_pool = evaluate_pool(classed_pool(phase=Phase.DRA), facts(ready=slower), Thresholds(), NOW)
    assert reason(dra_pool, "ready-latency")[0] is Verdict.HOLD
    # A pool on the plugin path is not gated on DRA latency (its figures are still given).
    for phase in (Phase.PLUGIN, Phase.ROLLED_BACK):
        plain = evaluate_pool(classed_pool(phase=phase), facts(ready=slower), Thresholds(), NOW)
        [found] = [r for r in plain.reasons if r.code == "ready-latency"]
        assert (found.verdict, found.figures["draP95"]) == (Verdict.EXPAND, 20.0)
        assert found.detail == "the pool is on the plugin path: no DRA latency to gate"
    # The order the samples came in does not matter: the same answer from any sequence.
    items = list(slower)
    random.Random(7).shuffle(items)
    again = evaluate_pool(classed_pool(), facts(ready=frozenset(items)), Thresholds(), NOW)
    assert again == gate


def test_ready_latency_needs_enough_samples_on_each_side_and_a_device_class() -> None:
    dra = {ready("node-a", f"d{i}", 100.0) for i in range(25)}
    plugin = {ready(f"plug-{i}", f"p{i}", 1.0, "device-plugin") for i in range(19)}
    gate = evaluate_pool(classed_pool(), facts(ready=frozenset(dra | plugin)), Thresholds(), NOW)
    verdict, figures = reason(gate, "ready-latency")
    assert (verdict, figures["draSamples"], figures["pluginSamples"]) == (Verdict.EXPAND, 25, 19)
    assert figures["ratio"] == 100.0
    [found] = [r for r in gate.reasons if r.code == "ready-latency"]
    assert found.detail.startswith("not enough samples: 25 DRA on the pool, 19 device-plugin")
    fewer = Thresholds(ready_min_samples=19)
    gate = evaluate_pool(classed_pool(), facts(ready=frozenset(dra | plugin)), fewer, NOW)
    assert reason(gate, "ready-latency")[0] is Verdict.HOLD
    gate = evaluate_pool(classed_pool(None), facts(ready=frozenset(dra | plugin)), fewer, NOW)
    verdict, figures = reason(gate, "ready-latency")
    assert (verdict, figures["deviceClass"], figures["draSamples"]) == (Verdict.EXPAND, None, 0)


def test_an_ownership_conflict_rolls_a_canary_back() -> None:
    conflict = ConflictFact("plugin-and-dra", "node-b", "example.com/gpu")
    other = ConflictFact("vanished-from-slice", "node-a", "gpu-7")  # not an ownership conflict
    outside = ConflictFact("plugin-and-dra", "node-w", "example.com/gpu")  # another pool's node
    gate = evaluate_pool(
        pool(), facts(conflicts=frozenset({conflict, other, outside})), Thresholds(), NOW
    )
    assert gate.verdict is Verdict.ROLLBACK
    verdict, figures = reason(gate, "ownership-conflict")
    assert (verdict, figures) == (Verdict.ROLLBACK, {"conflicts": 1, "rollbackAt": 1})
    assert "node-b/example.com/gpu" in gate.reasons[0].detail


def test_a_pool_on_the_plugin_path_holds_where_a_canary_rolls_back() -> None:
    conflict = frozenset({ConflictFact("plugin-and-dra", "node-a", "example.com/gpu")})
    for phase in (Phase.PLUGIN, Phase.ROLLED_BACK):
        gate = evaluate_pool(pool(phase), facts(conflicts=conflict), Thresholds(), NOW)
        assert gate.verdict is Verdict.HOLD
        assert reason(gate, "ownership-conflict")[0] is Verdict.ROLLBACK  # the finding stays
    dra = evaluate_pool(pool(Phase.DRA), facts(conflicts=conflict), Thresholds(), NOW)
    assert dra.verdict is Verdict.ROLLBACK


def test_slice_capacity_divergence_holds_the_canary() -> None:
    divergent = frozenset({DivergenceFact("node-a", "example.com/gpu", 8, 6)})
    gate = evaluate_pool(pool(), facts(divergences=divergent), Thresholds(), NOW)
    assert gate.verdict is Verdict.HOLD
    assert reason(gate, "slice-capacity-divergence") == (
        Verdict.HOLD,
        {"divergent": 1, "sliceDevices": 8, "nodeCapacity": 6, "holdAt": 1, "rollbackAt": 0},
    )
    # A threshold turns it into a rollback.
    rolled = evaluate_pool(
        pool(), facts(divergences=divergent), Thresholds(divergence_rollback=1), NOW
    )
    assert rolled.verdict is Verdict.ROLLBACK


def test_quarantined_devices_hold_then_roll_back_past_the_fraction() -> None:
    devices = {DeviceFact("node-a", f"gpu-{i}", i == 0) for i in range(8)}
    gate = evaluate_pool(pool(), facts(devices=frozenset(devices)), Thresholds(), NOW)
    assert gate.verdict is Verdict.HOLD
    assert reason(gate, "devices-quarantined") == (
        Verdict.HOLD,
        {"quarantined": 1, "devices": 8, "fraction": 0.125, "holdAt": 1, "rollbackFraction": 0.25},
    )
    worse = {DeviceFact("node-a", f"gpu-{i}", i < 2) for i in range(8)}
    assert evaluate_pool(pool(), facts(devices=frozenset(worse)), Thresholds(), NOW).verdict is (
        Verdict.ROLLBACK
    )
    # Quarantines on another pool's node do not count.
    elsewhere = frozenset({DeviceFact("node-w", "gpu-0", True)})
    assert (
        evaluate_pool(pool(), facts(devices=elsewhere), Thresholds(), NOW).verdict is Verdict.EXPAND
    )


def claim(
    name: str, allocated_minutes_ago: float | None, reserved: bool, node: str = "node-a"
) -> ClaimFact:
    return ClaimFact(
        namespace="ml",
        name=name,
        node=node,
        devices=((DRIVER, "east"),),
        allocated_at=None
        if allocated_minutes_ago is None
        else NOW - timedelta(minutes=allocated_minutes_ago),
        reserved=reserved,
    )


def test_a_leaked_claim_is_flagged_after_its_threshold_only() -> None:
    thresholds = Thresholds(leaked_claim_seconds=900)
    young = claim("young", 14, reserved=False)  # 840 s: not yet
    in_use = claim("in-use", 60, reserved=True)
    pending = claim("pending", None, reserved=False)
    gate = evaluate_pool(pool(), facts(claims=frozenset({young, in_use, pending})), thresholds, NOW)
    assert reason(gate, "leaked-claims")[0] is Verdict.EXPAND
    leaked = claim("leaked", 16, reserved=False)  # 960 s
    gate = evaluate_pool(pool(), facts(claims=frozenset({young, in_use, leaked})), thresholds, NOW)
    assert gate.verdict is Verdict.HOLD
    assert reason(gate, "leaked-claims") == (
        Verdict.HOLD,
        {
            "leaked": 1,
            "oldestSeconds": 960.0,
            "leakedClaimSeconds": 900,
            "holdAt": 1,
            "rollbackAt": 0,
        },
    )
    assert "ml/leaked" in next(r for r in gate.reasons if r.code == "leaked-claims").detail
    # Event time decides, not the wall clock: 61 s earlier the same claim was not leaked yet.
    earlier = evaluate_pool(
        pool(), facts(claims=frozenset({leaked})), thresholds, NOW - timedelta(seconds=61)
    )
    assert reason(earlier, "leaked-claims")[0] is Verdict.EXPAND


def test_a_leaked_claim_of_another_driver_or_node_is_not_the_pools() -> None:
    other_driver = ClaimFact(
        "ml", "x", "node-a", (("other.example.com", "east"),), NOW - timedelta(hours=2), False
    )
    other_node = claim("y", 120, reserved=False, node="node-w")
    gate = evaluate_pool(
        pool(), facts(claims=frozenset({other_driver, other_node})), Thresholds(), NOW
    )
    assert reason(gate, "leaked-claims")[1]["leaked"] == 0


def test_without_event_time_the_gate_holds() -> None:
    gate = evaluate_pool(pool(), facts(), Thresholds(), None)
    assert gate.verdict is Verdict.HOLD
    assert "no-event-time" in [r.code for r in gate.reasons]


def test_an_empty_pool_holds() -> None:
    gate = evaluate_pool(pool(slice_pool="nowhere"), facts(), Thresholds(), NOW)
    assert (gate.verdict, gate.nodes, [r.code for r in gate.reasons]) == (
        Verdict.HOLD,
        (),
        ["pool-empty"],
    )


def test_a_plugin_pool_without_slices_yet_holds_while_it_waits_for_the_driver() -> None:
    # The plan declared before the DRA driver publishes: still hold (no canary without nodes),
    # but a wait, which raises no alert; in any other phase an empty pool is a plain hold.
    gate = evaluate_pool(pool(Phase.PLUGIN, slice_pool="nowhere"), facts(), Thresholds(), NOW)
    assert (gate.verdict, gate.waiting) == (Verdict.HOLD, True)
    [empty] = gate.reasons
    assert empty.code == "pool-empty" and empty.figures == {"nodes": 0}
    assert empty.detail == (
        "waiting for the DRA driver's ResourceSlices: no slice of driver gpu.example.com (pool "
        "nowhere) names a node yet; the pool cannot go to canary before it does"
    )
    for phase in (Phase.CANARY, Phase.DRA, Phase.ROLLED_BACK):
        other = evaluate_pool(pool(phase, slice_pool="nowhere"), facts(), Thresholds(), NOW)
        assert (other.verdict, other.waiting) == (Verdict.HOLD, False), phase
        assert other.reasons[0].detail == "the pool's selector matches no node"
    # With its slices there, a plugin pool's hold is a finding again, not a wait.
    held = evaluate_pool(pool(Phase.PLUGIN), facts(), Thresholds(), None)
    assert (held.verdict, held.waiting) == (Verdict.HOLD, False)


def test_membership_by_driver_by_slice_pool_and_by_node_names() -> None:
    assert evaluate_pool(pool(slice_pool=None), facts(), Thresholds(), NOW).nodes == (
        "node-a",
        "node-b",
        "node-w",
    )
    named = evaluate_pool(pool(nodes=("node-x", "node-a")), facts(), Thresholds(), NOW)
    assert named.nodes == ("node-a", "node-x")


# --- the gate is a function of its inputs -------------------------------------------------------

NODES = ("node-a", "node-b", "node-w", "node-x")
conflicts = st.builds(
    ConflictFact,
    st.sampled_from(["plugin-and-dra", "ambiguous-resource-id"]),
    st.sampled_from(NODES),
    st.sampled_from(["r1", "r2"]),
)
divergences = st.builds(
    DivergenceFact,
    st.sampled_from(NODES),
    st.just("example.com/gpu"),
    st.integers(1, 8),
    st.integers(1, 8),
)
devices = st.builds(
    DeviceFact, st.sampled_from(NODES), st.sampled_from([f"g{i}" for i in range(6)]), st.booleans()
)
failures = st.builds(
    FailureFact,
    st.sampled_from(NODES),
    st.integers(0, 1200).map(lambda s: NOW - timedelta(seconds=s)),
    st.sampled_from(["e1", "e2", "e3"]),
    st.integers(1, 9),
    st.integers(1, 9),
    st.sampled_from(["retryable", "non-retryable", "needs-cleanup"]),
)
claims = st.builds(
    ClaimFact,
    st.just("ml"),
    st.sampled_from([f"c{i}" for i in range(6)]),
    st.sampled_from(NODES),
    st.just(((DRIVER, "east"),)),
    st.one_of(st.none(), st.integers(0, 7200).map(lambda s: NOW - timedelta(seconds=s))),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(conflicts, max_size=6),
    st.lists(divergences, max_size=6),
    st.lists(devices, max_size=12),
    st.lists(claims, max_size=8),
    st.lists(failures, max_size=10),
    st.randoms(use_true_random=False),
)
def test_the_gate_does_not_depend_on_the_order_of_its_facts(
    cs: list[ConflictFact],
    ds: list[DivergenceFact],
    vs: list[DeviceFact],
    ls: list[ClaimFact],
    fs: list[FailureFact],
    rnd: random.Random,
) -> None:
    def build() -> InventoryFacts:
        parts = [list(x) for x in (cs, ds, vs, ls, fs)]
        for part in parts:
            rnd.shuffle(part)
        return InventoryFacts(
            slices=SLICES,
            conflicts=frozenset(parts[0]),  # type: ignore[arg-type]
            divergences=frozenset(parts[1]),  # type: ignore[arg-type]
            devices=frozenset(parts[2]),  # type: ignore[arg-type]
            claims=frozenset(parts[3]),  # type: ignore[arg-type]
            failures=frozenset(parts[4]),  # type: ignore[arg-type]
        )

    pools = {"east": pool(), "named": pool(Phase.DRA, name="named", nodes=("node-w", "node-x"))}
    first = evaluate(pools, build(), Thresholds(), NOW)
    again = evaluate(pools, build(), Thresholds(), NOW)
    assert first == again
    assert [(g.pool, g.verdict, [dict(r.figures) for r in g.reasons]) for g in first] == [
        (g.pool, g.verdict, [dict(r.figures) for r in g.reasons]) for g in again
    ]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["east", "west"]), st.sampled_from(list(Phase))),
        min_size=1,
        max_size=8,
    ),
    st.randoms(use_true_random=False),
)
def test_the_fold_of_declarations_follows_the_log_not_the_arrival_order(
    steps: list[tuple[str, Phase]], rnd: random.Random
) -> None:
    entries = [
        Declared(
            seq,
            T0 + timedelta(minutes=seq),
            "olga",
            "r",
            AdoptionDeclaration(name, PoolSelector(driver=DRIVER), phase),
        )
        for seq, (name, phase) in enumerate(steps)
    ]
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    pools = fold(shuffled)
    assert pools == fold(entries)
    for name, state in pools.items():
        mine = [e for e in entries if e.declaration.pool == name]
        assert state.current == mine[-1]
        assert state.history == tuple(mine)
        # ``since``: the start of the last run of the current phase.
        run = [e for e in mine]
        while len(run) > 1 and run[-2].declaration.phase is state.phase:
            run.pop()
        assert state.since == run[-1].at
