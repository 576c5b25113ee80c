"""The DRA-against-plugin comparison report (issue 16 item 5): golden cases of every figure, the
sample minimum, and properties (order of the rows, bounds of the figures)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.adoption.report import build_report, nearest_rank, report_pools
from services.domain.adoption.report_rows import (
    ClaimRow,
    DeviceRow,
    FailureRow,
    HistoryRow,
    ReportInput,
    ReportRow,
    StageRow,
    WorkloadRow,
)
from tests.conftest import T0

CLASS = "gpu.example.com"
PLUGIN = "example.com/gpu"
END = T0 + timedelta(hours=10)
POOLS = {"canary": frozenset({"n1", "n2"}), "legacy": frozenset({"n3"})}


def _inp(**kwargs: object) -> ReportInput:
    base: dict[str, object] = {
        "device_class": CLASS,
        "plugin_resource": PLUGIN,
        "pools": POOLS,
        "window_end": END,
        "window_seconds": 10 * 3600.0,
        "min_samples": 2,
    }
    base.update(kwargs)
    return ReportInput(**base)  # type: ignore[arg-type]


def _row(rows: tuple[ReportRow, ...], pool: str, path: str) -> ReportRow:
    [row] = [r for r in rows if r.pool == pool and r.path == path]
    return row


def _stage(uid: str, node: str, stage: str, seconds: float, path: str = "dra") -> StageRow:
    cls = CLASS if path == "dra" else PLUGIN
    return StageRow(uid, node, stage, cls, path, seconds, T0 + timedelta(hours=1))


def test_nearest_rank_is_an_observed_value() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert nearest_rank(values, 0.5) == 3.0
    assert nearest_rank(values, 0.95) == 5.0
    assert nearest_rank([7.0], 0.5) == 7.0


def test_stage_quantiles_per_pool_and_path_and_the_sample_minimum() -> None:
    stages = (
        _stage("a", "n1", "claim_allocated", 2),
        _stage("a", "n1", "pod_bound", 1),
        _stage("a", "n1", "pod_ready", 10),
        _stage("b", "n2", "pod_bound", 3),  # claim counted with another Pod: 0 added
        _stage("b", "n2", "pod_ready", 20),
        _stage("c", "n3", "pod_bound", 30, "device-plugin"),
        _stage("c", "n3", "pod_ready", 5, "device-plugin"),
    )
    report = build_report(_inp(stages=stages))
    canary = _row(report.rows, "canary", "dra")
    assert canary.pending_to_bound["p50"].value == 3.0  # a: 2 + 1, b: 3
    assert canary.pending_to_bound["p95"].value == 3.0
    assert canary.bound_to_ready["p50"].value == 10.0
    assert canary.bound_to_ready["p95"].value == 20.0
    assert canary.bound_to_ready["p95"].samples == 2
    legacy = _row(report.rows, "legacy", "device-plugin")
    assert legacy.pending_to_bound["p50"].value is None  # one sample, minimum 2
    assert legacy.pending_to_bound["p50"].samples == 1
    assert "insufficient data" in (legacy.pending_to_bound["p50"].note or "")
    fleet = _row(report.rows, "*", "dra")
    assert fleet.bound_to_ready["p50"].samples == 2


def test_rows_outside_the_window_do_not_count() -> None:
    old = StageRow("a", "n1", "pod_ready", CLASS, "dra", 1.0, T0 - timedelta(seconds=1))
    report = build_report(_inp(stages=(old,), min_samples=1))
    assert _row(report.rows, "canary", "dra").bound_to_ready["p50"].samples == 0


def test_fragmentation_is_one_minus_largest_free_block_over_free_devices() -> None:
    devices = (
        DeviceRow("n1", CLASS, "dra", allocated=False),
        DeviceRow("n1", CLASS, "dra", allocated=False),
        DeviceRow("n1", CLASS, "dra", allocated=False),
        DeviceRow("n2", CLASS, "dra", allocated=False),
        DeviceRow("n2", CLASS, "dra", allocated=True),
        DeviceRow("n2", CLASS, "dra", allocated=False, usable=False),
        DeviceRow("n3", PLUGIN, "device-plugin", allocated=True),
    )
    report = build_report(_inp(devices=devices))
    canary = _row(report.rows, "canary", "dra").fragmentation
    assert canary.value == 0.25 and canary.samples == 4
    legacy = _row(report.rows, "legacy", "device-plugin").fragmentation
    assert legacy.value is None and legacy.note == "no free device"


def test_device_hours_allocated_idle_and_capacity() -> None:
    def h(kind: str, pod: str, hours: float, rid: str = "g0") -> HistoryRow:
        at = T0 + timedelta(hours=hours)
        return HistoryRow("n3", rid, kind, pod, at, "device-plugin", PLUGIN)

    history = (
        h("observed", "p1", -2),  # before the window: counts from the window start
        h("observed", "p1", 1),  # the same allocation observed again
        h("released", "p1", 3),  # 3 h in the window
        h("observed", "p2", 4),
        h("observed", "p3", 6),  # p3 took the device: p2 held it 2 h
        h("observed", "p4", 8, "g1"),  # open: 2 h to the window end
    )
    devices = (
        DeviceRow("n3", PLUGIN, "device-plugin", allocated=True),
        DeviceRow("n3", PLUGIN, "device-plugin", allocated=True),
    )
    report = build_report(_inp(history=history, devices=devices))
    hours = _row(report.rows, "legacy", "device-plugin").device_hours
    assert hours["allocated"].value == 3 + 2 + 4 + 2  # p3 holds it 4 h to the window end
    assert hours["allocated"].samples == 4
    assert hours["capacity"].value == 20.0
    assert hours["idle"].value == 9.0


def test_dra_device_hours_take_the_class_of_the_pods_stages() -> None:
    history = (
        HistoryRow("n1", "gpu-0", "observed", "a", T0, "dra", "claim:gpu"),
        HistoryRow("n1", "gpu-1", "observed", "x", T0, "dra", "claim:gpu"),  # other class
    )
    stages = (_stage("a", "n1", "pod_ready", 1.0),)
    devices = (DeviceRow("n1", CLASS, "dra", allocated=True),)
    report = build_report(_inp(history=history, stages=stages, devices=devices))
    hours = _row(report.rows, "canary", "dra").device_hours
    assert hours["allocated"].value == 10.0 and hours["allocated"].samples == 1


def test_allocation_success_uses_what_is_projected() -> None:
    claims = (
        ClaimRow(CLASS, "n1", True),
        ClaimRow(CLASS, "n2", True),
        ClaimRow(CLASS, "n3", True),
        ClaimRow(CLASS, None, False),
        ClaimRow("other", None, False),
    )
    report = build_report(_inp(claims=claims))
    fleet = _row(report.rows, "*", "dra").allocation_success
    assert fleet.value == 0.75 and fleet.samples == 4
    assert "pending claims only" in (fleet.note or "")
    canary = _row(report.rows, "canary", "dra").allocation_success
    assert canary.value is None and "failure counts" in (canary.note or "")
    plugin = _row(report.rows, "legacy", "device-plugin").allocation_success
    assert plugin.value is None and plugin.samples == 0


def _failure(
    uid: str | None, node: str | None, reason: str, minutes: float = 60, cls: str = "retryable"
) -> FailureRow:
    at = T0 + timedelta(minutes=minutes)
    return FailureRow(uid, node, reason, cls, at, at)


def test_allocation_success_with_failure_counts() -> None:
    claims = (
        ClaimRow(CLASS, "n1", True, reserved_for=("a",)),
        ClaimRow(CLASS, "n2", True, reserved_for=("b",)),
        ClaimRow(CLASS, "n3", True, reserved_for=("c",)),
        ClaimRow(CLASS, None, False),  # a pending Pod's claim: its failure below is not counted
        ClaimRow("other", "n1", True, reserved_for=("x",)),
    )
    stages = (_stage("r", "n1", "pod_ready", 1),)  # Pod r ran (on n1) after failing to schedule
    failures = (
        _failure("a", "n1", "FailedPrepareDynamicResources"),
        _failure("a", "n1", "FailedPrepareDynamicResources", 90),  # the same Pod again: once
        _failure("r", None, "FailedScheduling"),  # no node: pool * only
        _failure("r", None, "Unschedulable"),  # the same failure seen twice: once
        _failure("q", None, "FailedScheduling"),  # still pending, class unknown: its claim counts
        _failure("b", "n2", "FailedUnprepareDynamicResources", cls="needs-cleanup"),  # not one
        _failure("c", "n3", "FailedPrepareDynamicResources", cls="non-retryable"),
        _failure("x", "n1", "FailedPrepareDynamicResources"),  # another class
        _failure(None, "n1", "FailedPrepareDynamicResources"),  # no Pod UID
        _failure("b", "n2", "FailedPrepareDynamicResources", minutes=-30),  # before the window
    )
    report = build_report(_inp(claims=claims, stages=stages, failures=failures))
    canary = _row(report.rows, "canary", "dra").allocation_success
    assert (canary.value, canary.samples) == (2 / 3, 3)  # a, b allocated; a failed
    assert canary.note == "failures without a node count in pool * only"
    legacy = _row(report.rows, "legacy", "dra").allocation_success
    assert (legacy.value, legacy.samples) == (0.5, 2)  # c allocated and failed (non-retryable)
    fleet = _row(report.rows, "*", "dra").allocation_success
    # 3 allocated over 3 + 1 pending claim + Pods a, c, r
    assert (fleet.value, fleet.samples, fleet.note) == (3 / 7, 7, None)
    plugin = _row(report.rows, "legacy", "device-plugin").allocation_success
    assert (plugin.value, plugin.note) == (None, "no source of failed device-plugin allocations")


def test_a_failure_overlapping_the_window_counts_and_one_after_it_does_not() -> None:
    claims = (ClaimRow(CLASS, "n1", True, reserved_for=("a",)),)
    start = END - timedelta(hours=10)
    spans = FailureRow(
        "a", "n1", "FailedPrepareDynamicResources", "retryable", start - timedelta(hours=1), start
    )
    report = build_report(_inp(claims=claims, failures=(spans,), min_samples=1))
    assert _row(report.rows, "canary", "dra").allocation_success.value == 0.5
    late = _failure("a", "n1", "FailedPrepareDynamicResources", minutes=11 * 60)
    report = build_report(_inp(claims=claims, failures=(late,), min_samples=1))
    assert _row(report.rows, "canary", "dra").allocation_success.value == 1.0


def test_retry_rate_counts_second_pods_of_jobs_only() -> None:
    stages = tuple(_stage(uid, "n1", "pod_ready", 1) for uid in ("j1a", "j1b", "j2", "d1", "d2"))
    workloads = (
        WorkloadRow("j1a", "job-1", "Job"),
        WorkloadRow("j1b", "job-1", "Job"),
        WorkloadRow("j2", "job-2", "CronJob"),
        WorkloadRow("d1", "deploy", "Deployment"),
        WorkloadRow("d2", "deploy", "Deployment"),
    )
    report = build_report(_inp(stages=stages, workloads=workloads))
    rate = _row(report.rows, "canary", "dra").retry_rate
    assert rate.samples == 3 and rate.value == 1 / 3


def test_pools_listed_and_no_plugin_rows_without_a_plugin_resource() -> None:
    stages = (_stage("z", "n9", "pod_ready", 1),)
    inp = _inp(stages=stages, plugin_resource=None)
    assert report_pools(inp) == ["canary", "legacy", "unpooled", "*"]
    report = build_report(inp)
    assert {r.path for r in report.rows} == {"dra"}
    assert _row(report.rows, "unpooled", "dra").bound_to_ready["p50"].samples == 1


_nodes = st.sampled_from(["n1", "n2", "n3", "n9"])
_stage_rows = st.builds(
    StageRow,
    pod_uid=st.sampled_from([f"p{i}" for i in range(8)]),
    node=_nodes,
    stage=st.sampled_from(["claim_allocated", "pod_bound", "pod_ready"]),
    device_class=st.sampled_from([CLASS, PLUGIN]),
    path=st.sampled_from(["dra", "device-plugin"]),
    seconds=st.floats(0, 1e5),
    observed_at=st.just(T0 + timedelta(hours=1)),
)
_devices = st.builds(
    DeviceRow,
    node=_nodes,
    device_class=st.sampled_from([CLASS, PLUGIN]),
    path=st.sampled_from(["dra", "device-plugin"]),
    allocated=st.booleans(),
    usable=st.booleans(),
)
_history = st.builds(
    HistoryRow,
    node=_nodes,
    resource_id=st.sampled_from(["g0", "g1"]),
    kind=st.sampled_from(["observed", "released"]),
    pod_uid=st.sampled_from(["p0", "p1", "p2"]),
    observed_at=st.integers(-3600, 40000).map(lambda s: T0 + timedelta(seconds=s)),
    source=st.sampled_from(["dra", "device-plugin"]),
    resource_name=st.just(PLUGIN),
)

_pods = st.sampled_from([f"p{i}" for i in range(8)])
_claims = st.builds(
    ClaimRow,
    device_class=st.sampled_from([CLASS, "other"]),
    node=st.one_of(st.none(), _nodes),
    allocated=st.booleans(),
    reserved_for=st.lists(_pods, max_size=2, unique=True).map(lambda u: tuple(sorted(u))),
)
_failures = st.builds(
    FailureRow,
    pod_uid=st.one_of(st.none(), _pods),
    node=st.one_of(st.none(), _nodes),
    reason=st.sampled_from(
        ["FailedScheduling", "Unschedulable", "FailedPrepareDynamicResources", "Other"]
    ),
    failure_class=st.sampled_from(["retryable", "non-retryable"]),
    first_observed_at=st.just(T0 + timedelta(hours=1)),
    observed_at=st.just(T0 + timedelta(hours=2)),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_stage_rows, max_size=30),
    st.lists(_devices, max_size=20),
    st.lists(_history, max_size=20),
    st.lists(_claims, max_size=10),
    st.lists(_failures, max_size=15),
)
def test_figures_are_bounded_and_independent_of_the_row_order(
    stages: list[StageRow],
    devices: list[DeviceRow],
    history: list[HistoryRow],
    claims: list[ClaimRow],
    failures: list[FailureRow],
) -> None:
    history.sort(key=lambda h: h.observed_at)
    inp = _inp(
        stages=tuple(stages),
        devices=tuple(devices),
        history=tuple(history),
        claims=tuple(claims),
        failures=tuple(failures),
    )
    report = build_report(inp)
    again = build_report(
        _inp(
            stages=tuple(reversed(stages)),
            devices=tuple(reversed(devices)),
            history=tuple(history),
            claims=tuple(reversed(claims)),
            failures=tuple(reversed(failures)),
        )
    )
    assert report == again
    for row in report.rows:
        for fig in (row.fragmentation, row.retry_rate, row.allocation_success):
            assert fig.value is None or 0 <= fig.value <= 1
        hours = row.device_hours
        capacity = hours["capacity"].value
        allocated = hours["allocated"].value
        assert allocated is not None and allocated >= 0
        if capacity is not None:
            assert hours["idle"].value == max(0.0, capacity - allocated)
        for figures in (row.pending_to_bound, row.bound_to_ready):
            low, high = figures["p50"].value, figures["p95"].value
            assert (low is None) == (high is None)
            assert low is None or high is None or low <= high


def test_a_declared_pool_named_unpooled_is_the_declared_one() -> None:
    stages = (_stage("a", "n1", "pod_ready", 1), _stage("z", "n9", "pod_ready", 2))
    inp = _inp(stages=stages, pools={"unpooled": frozenset({"n1"})}, min_samples=1)
    assert report_pools(inp) == ["unpooled", "*"]
    row = _row(build_report(inp).rows, "unpooled", "dra")
    assert row.bound_to_ready["p50"].value == 1.0 and row.bound_to_ready["p50"].samples == 1
