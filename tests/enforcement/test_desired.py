"""The pure part of enforcement: quarantine rows -> desired DeviceTaintRules -> plan."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from services.domain.governance.held import QuarantineRow
from services.processes.enforcement import desired as d
from services.processes.enforcement.desired import (
    Effect,
    SkipReason,
    desired_rules,
    plan,
    rule_name,
    taint_value,
    updated_object,
)
from services.processes.recovery.manifests import label_hash as recovery_label_hash

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DRIVER = "gpu.example.com"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def row(
    resource_id: str = f"{DRIVER}/node-a/gpu-0",
    quarantine_id: str | None = None,
    *,
    node: str = "node-a",
    status: str = "active",
    kind: str = "system",
    reason: str = "pod-status-unhealthy",
    source: str | None = "dra",
    at: float = 0,
) -> QuarantineRow:
    return QuarantineRow(
        quarantine_id=quarantine_id or f"{node}/{resource_id}@7",
        node=node,
        resource_id=resource_id,
        kind=kind,
        status=status,
        reason=reason,
        created_at=T0 + timedelta(seconds=at),
        resource_claim="ns/claim-1" if source == "dra" else None,
        source=source,
    )


def served(manifest: dict[str, Any], **extra_labels: str) -> dict[str, Any]:
    """``manifest`` as the API server returns it: uid, resourceVersion, managedFields,
    timeAdded, an empty status; plus labels or annotations someone else added."""
    obj = copy.deepcopy(manifest)
    obj["metadata"].update(
        uid="0b6c0f5e-0000-4000-8000-000000000001",
        resourceVersion="42",
        generation=1,
        creationTimestamp="2026-11-29T12:00:01Z",
        managedFields=[{"manager": "devicestate", "operation": "Update"}],
    )
    obj["metadata"]["labels"].update(extra_labels)
    obj["metadata"]["annotations"]["example.com/note"] = "added by someone else"
    obj["spec"]["taint"]["timeAdded"] = "2026-11-29T12:00:01Z"
    obj["status"] = {}
    return obj


# --- names and labels -------------------------------------------------------------------------
def test_rule_name_is_a_deterministic_dns_label_from_the_quarantine_id() -> None:
    first = rule_name("node-a/gpu.example.com/node-a/gpu-0@7")
    assert first == rule_name("node-a/gpu.example.com/node-a/gpu-0@7")
    assert first != rule_name("node-a/gpu.example.com/node-a/gpu-0@8")
    assert len(first) <= 63 and DNS_LABEL.match(first)
    long_id = "manual/" + "x" * 500
    assert len(rule_name(long_id)) <= 63 and DNS_LABEL.match(rule_name(long_id))


def test_quarantine_label_equals_the_recovery_jobs_label() -> None:
    quarantine_id = "node-a/gpu.example.com/node-a/gpu-0@7"
    assert d.label_hash(quarantine_id) == recovery_label_hash(quarantine_id)
    labels = d.own_labels(quarantine_id)
    assert labels == {
        "app.kubernetes.io/managed-by": "devicestate",
        "app.kubernetes.io/component": "quarantine-enforcement",
        "devicestate.io/quarantine-id": d.label_hash(quarantine_id),
    }


# --- desired rules ----------------------------------------------------------------------------
def test_one_rule_per_active_or_recovering_dra_quarantine() -> None:
    rows = [
        row(f"{DRIVER}/node-a/gpu-0"),
        row(f"{DRIVER}/node-a/gpu-1", status="recovering"),
        row(f"{DRIVER}/node-a/gpu-2", status="released"),
    ]
    state = desired_rules(rows)
    assert sorted(r.device for r in state.rules.values()) == ["gpu-0", "gpu-1"]
    assert state.skipped == ()
    for name, rule in state.rules.items():
        assert name == rule_name(rule.quarantine_id)


def test_manifest_is_a_v1beta2_device_taint_rule() -> None:
    quarantine = row(f"{DRIVER}/node-a/gpu-0")
    (rule,) = desired_rules([quarantine]).rules.values()
    assert rule.manifest() == {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(quarantine.quarantine_id),
            "labels": d.own_labels(quarantine.quarantine_id),
            "annotations": {
                "devicestate.io/quarantine-id": quarantine.quarantine_id,
                "devicestate.io/device": f"{DRIVER}/node-a/gpu-0",
                "devicestate.io/node": "node-a",
                "devicestate.io/quarantine-kind": "system",
                "devicestate.io/reason": "pod-status-unhealthy",
            },
        },
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"},
            "taint": {
                "key": "devicestate.io/quarantined",
                "value": "pod-status-unhealthy",
                "effect": "NoSchedule",
            },
        },
    }


def test_no_execute_only_when_configured() -> None:
    (rule,) = desired_rules([row()], no_execute=True).rules.values()
    assert rule.effect is Effect.NO_EXECUTE
    assert rule.manifest()["spec"]["taint"]["effect"] == "NoExecute"
    (rule,) = desired_rules([row()]).rules.values()
    assert rule.manifest()["spec"]["taint"]["effect"] == "NoSchedule"


def test_pool_names_may_hold_slashes() -> None:
    (rule,) = desired_rules([row(f"{DRIVER}/cluster-1/rack-7/gpu-3")]).rules.values()
    assert (rule.driver, rule.pool, rule.device) == (DRIVER, "cluster-1/rack-7", "gpu-3")


def test_taint_value_is_a_short_reason_or_the_kind() -> None:
    assert taint_value("pod-status-unhealthy", "system") == "pod-status-unhealthy"
    assert taint_value("XID_79.fatal", "system") == "XID_79.fatal"
    assert taint_value("operator saw xid 79 (INC-123)", "manual") == "manual"
    assert taint_value("x" * 64, "system") == "system"
    assert taint_value("", "manual") == "manual"
    free_text = row(kind="manual", reason="flaky in training job, see INC-123")
    (rule,) = desired_rules([free_text]).rules.values()
    manifest = rule.manifest()
    assert manifest["spec"]["taint"]["value"] == "manual"
    assert manifest["metadata"]["annotations"]["devicestate.io/reason"] == free_text.reason


def test_device_plugin_and_unresolved_devices_are_skipped_with_a_reason() -> None:
    rows = [
        row("GPU-a5ced723-33de-5eef-89d7-909771744097", source="device-plugin"),
        # A legacy MIG id has slashes, but the device plugin owns it.
        row("MIG-GPU-a5ced723/1/0", quarantine_id="q-mig-plugin", source="device-plugin"),
        # The same without a governance row: not valid DRA names either.
        row("MIG-GPU-a5ced723/1/0", quarantine_id="q-mig-unknown", source=None),
        # A CDI-form id no claim resolved.
        row("k8s.gpu.example.com/claim=5f1e-gpu-0", source="dra"),
        row("GPU-0000", quarantine_id="q-plain", source=None),
        row(f"{DRIVER}/node-a/GPU_0", quarantine_id="q-bad-device", source="dra"),
    ]
    state = desired_rules(rows)
    assert state.rules == {}
    reasons = {s.quarantine_id: s.reason for s in state.skipped}
    assert reasons == {
        rows[0].quarantine_id: SkipReason.DEVICE_PLUGIN,
        "q-mig-plugin": SkipReason.DEVICE_PLUGIN,
        "q-mig-unknown": SkipReason.INVALID_DEVICE_ID,
        rows[3].quarantine_id: SkipReason.UNRESOLVED,
        "q-plain": SkipReason.UNRESOLVED,
        "q-bad-device": SkipReason.INVALID_DEVICE_ID,
    }
    counts = state.skipped_by_reason()
    assert counts[SkipReason.DEVICE_PLUGIN] == 2 and counts[SkipReason.DUPLICATE_DEVICE] == 0


def test_a_dra_id_without_a_governance_row_is_enforced() -> None:
    state = desired_rules([row(source=None)])
    assert len(state.rules) == 1 and state.skipped == ()


def test_a_device_gets_one_rule_the_oldest_quarantine_keeps_it() -> None:
    device = f"{DRIVER}/pool-x/gpu-0"
    older = row(device, "q-old", node="node-a", at=0)
    newer = row(device, "q-new", node="node-b", at=60)
    for rows in ([older, newer], [newer, older]):
        state = desired_rules(rows)
        assert [r.quarantine_id for r in state.rules.values()] == ["q-old"]
        assert [(s.quarantine_id, s.reason) for s in state.skipped] == [
            ("q-new", SkipReason.DUPLICATE_DEVICE)
        ]


def test_the_same_quarantine_read_twice_is_one_rule() -> None:
    state = desired_rules([row(), row(), row(status="recovering")])
    assert len(state.rules) == 1 and state.skipped == ()


rows_strategy = st.lists(
    st.builds(
        row,
        st.sampled_from(
            [
                f"{DRIVER}/node-a/gpu-0",
                f"{DRIVER}/node-a/gpu-1",
                f"{DRIVER}/node-b/gpu-0",
                "GPU-1234",
                "k8s.gpu.example.com/claim=u-gpu-0",
            ]
        ),
        st.sampled_from(["q1", "q2", "q3", "q4", "q5", "q6"]),
        node=st.sampled_from(["node-a", "node-b"]),
        status=st.sampled_from(["active", "recovering", "released"]),
        source=st.sampled_from(["dra", "device-plugin", None]),
        at=st.integers(0, 5),
    ),
    max_size=10,
)


@given(rows_strategy, st.randoms(use_true_random=False))
def test_desired_state_does_not_depend_on_row_order(rows: list[QuarantineRow], rnd: Any) -> None:
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert desired_rules(rows) == desired_rules(shuffled)
    state = desired_rules(rows)
    devices = [r.device_id for r in state.rules.values()]
    assert len(devices) == len(set(devices))  # never two rules for one device


# --- plan ----------------------------------------------------------------------------------------
def test_plan_creates_what_is_missing_and_keeps_what_matches() -> None:
    state = desired_rules([row(f"{DRIVER}/node-a/gpu-0"), row(f"{DRIVER}/node-a/gpu-1")])
    rule0, rule1 = state.rules.values()
    todo = plan(state, [served(rule0.manifest(), team="gpu")])
    assert [r.name for r in todo.create] == [rule1.name]
    assert todo.update == () and todo.delete == ()
    assert todo.unchanged == (rule0.name,)
    assert plan(state, [served(rule0.manifest()), served(rule1.manifest())]).empty


def test_plan_updates_a_changed_taint_selector_or_label() -> None:
    state = desired_rules([row()])
    (rule,) = state.rules.values()
    changes = {
        "spec.taint": lambda o: o["spec"]["taint"].update(effect="NoExecute"),
        "spec.deviceSelector": lambda o: o["spec"]["deviceSelector"].update(device="gpu-9"),
        "metadata.annotations": lambda o: o["metadata"]["annotations"].pop("devicestate.io/device"),
    }
    for what, change in changes.items():
        obj = served(rule.manifest())
        change(obj)
        todo = plan(state, [obj])
        assert [(u.rule.name, u.changed) for u in todo.update] == [(rule.name, (what,))]
        assert todo.create == () and todo.delete == ()
    # Extra selector fields are not ours: the rule is rewritten.
    obj = served(rule.manifest())
    obj["spec"]["deviceSelector"]["deviceClassName"] = "gpu"
    assert plan(state, [obj]).update


def test_plan_deletes_only_own_rules_without_a_quarantine() -> None:
    released = row(f"{DRIVER}/node-a/gpu-0", "q-released", status="released")
    gone_manifest = d.rule_manifest(
        d.DesiredRule(
            name=rule_name("q-released"),
            quarantine_id="q-released",
            node="node-a",
            driver=DRIVER,
            pool="node-a",
            device="gpu-0",
            kind="system",
            reason="pod-status-unhealthy",
            effect=Effect.NO_SCHEDULE,
        )
    )
    own = served(gone_manifest)
    unlabelled = served(gone_manifest)
    unlabelled["metadata"]["name"] = "admin-rule"
    unlabelled["metadata"]["labels"] = {}
    other_component = served(gone_manifest, **{"app.kubernetes.io/component": "something-else"})
    other_component["metadata"]["name"] = "other-component"
    other_manager = served(gone_manifest, **{"app.kubernetes.io/managed-by": "someone"})
    other_manager["metadata"]["name"] = "other-manager"
    todo = plan(desired_rules([released]), [own, unlabelled, other_component, other_manager])
    assert [(x.name, x.uid, x.quarantine_id) for x in todo.delete] == [
        (own["metadata"]["name"], own["metadata"]["uid"], "q-released")
    ]
    assert todo.create == () and todo.update == ()


def test_plan_never_updates_an_unlabelled_rule_with_our_name() -> None:
    state = desired_rules([row()])
    (rule,) = state.rules.values()
    squatter = served(rule.manifest())
    squatter["metadata"]["labels"] = {}
    todo = plan(state, [squatter])
    # It is not ours: the create will be refused by the server (409), nothing else is tried.
    assert [r.name for r in todo.create] == [rule.name]
    assert todo.update == () and todo.delete == ()


def test_updated_object_keeps_metadata_and_time_added_of_an_unchanged_taint() -> None:
    (rule,) = desired_rules([row()]).rules.values()
    obj = served(rule.manifest(), team="gpu")
    obj["metadata"]["annotations"].pop("devicestate.io/node")
    body = updated_object(obj, rule)
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["uid"] == obj["metadata"]["uid"]
    assert "managedFields" not in body["metadata"]
    assert body["metadata"]["labels"]["team"] == "gpu"
    assert body["metadata"]["annotations"]["example.com/note"] == "added by someone else"
    assert body["metadata"]["annotations"]["devicestate.io/node"] == "node-a"
    assert body["spec"]["taint"]["timeAdded"] == "2026-11-29T12:00:01Z"
    assert d.differences(body, rule) == []


def test_updated_object_drops_time_added_of_a_changed_taint() -> None:
    (rule,) = desired_rules([row()], no_execute=True).rules.values()
    obj = served(d.rule_manifest(desired_rules([row()]).rules[rule.name]))
    body = updated_object(obj, rule)
    assert body["spec"]["taint"] == {
        "key": "devicestate.io/quarantined",
        "value": "pod-status-unhealthy",
        "effect": "NoExecute",
    }
