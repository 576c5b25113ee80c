"""The rollback admission policies of rolled-back adoption pools, the pure part (issue 16, item
4): which pools get a policy, the manifests, and the plan against what is present. The API
server's own enforcement of them is tests/kubeapi/test_adoption_enforcement.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.domain.governance.adoption import (
    AdoptionDeclaration,
    Declared,
    Phase,
    PoolSelector,
    PoolState,
)
from services.processes.enforcement.admission_desired import (
    LABEL_SELECTOR,
    RollbackPolicy,
    desired_policies,
    expression,
    object_name,
    plan,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def pool(name: str, phase: Phase, device_class: str | None = "gpu.example.com") -> PoolState:
    declaration = AdoptionDeclaration(
        name, PoolSelector(driver="gpu.example.com"), phase, device_class
    )
    declared = Declared(1, T0, "olga", "why", declaration)
    return PoolState(current=declared, history=(declared,))


def present(wanted: RollbackPolicy, **changes: Any) -> dict[str, list[dict[str, Any]]]:
    """The objects as the server returns them: ours plus server fields and defaults."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in ("policy", "binding"):
        obj = wanted.manifest(kind)  # type: ignore[arg-type]
        obj["metadata"].update(uid=f"uid-{kind}", resourceVersion="7")
        if kind == "policy":
            obj["spec"]["matchConstraints"]["namespaceSelector"] = {}  # a server default
        obj["metadata"]["labels"].update(changes.get(kind, {}))
        out[kind] = [obj]
    return out


def test_only_rolled_back_pools_with_a_device_class_get_a_policy() -> None:
    pools = {
        "a": pool("a", Phase.ROLLED_BACK),
        "b": pool("b", Phase.CANARY),
        "c": pool("c", Phase.ROLLED_BACK, None),
        "d": pool("d", Phase.ROLLED_BACK, "Bad Class"),
    }
    wanted, skipped = desired_policies(pools)
    assert wanted == [RollbackPolicy("a", "gpu.example.com")]
    assert [(s.pool, "DeviceClass" in s.reason) for s in skipped] == [("c", True), ("d", True)]


def test_a_pool_whose_name_makes_no_object_name_is_skipped() -> None:
    # Declared before the API refused such names: the API server would refuse every write.
    pools = {"a..b": pool("a..b", Phase.ROLLED_BACK), "a.b": pool("a.b", Phase.ROLLED_BACK)}
    wanted, skipped = desired_policies(pools)
    assert wanted == [RollbackPolicy("a.b", "gpu.example.com")]
    assert [s.pool for s in skipped] == ["a..b"] and "object name" in skipped[0].reason


def test_a_device_class_too_long_for_a_label_value_is_not_a_label() -> None:
    # A DeviceClass name is a DNS subdomain of up to 253 characters, a label value at most 63.
    long_class = f"{'a' * 40}.{'b' * 40}.example.com"
    [wanted], _ = desired_policies({"east": pool("east", Phase.ROLLED_BACK, long_class)})
    for kind in ("policy", "binding"):
        labels = wanted.manifest(kind)["metadata"]["labels"]  # type: ignore[arg-type]
        assert all(len(v) <= 63 for v in labels.values())
        assert labels["devicestate.io/adoption-pool"] == "east"
    assert long_class in wanted.policy()["spec"]["validations"][0]["expression"]
    assert plan([wanted], present(wanted)).writes == []  # and it is found equal next pass


def test_the_policy_refuses_claim_creation_for_the_class_only() -> None:
    p = RollbackPolicy("east", "gpu.example.com")
    policy, binding = p.policy(), p.binding()
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == object_name("east")
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE"] and rule["resources"] == ["resourceclaims"]
    assert rule["apiVersions"] == ["v1"]  # other versions are converted (matchPolicy Equivalent)
    assert policy["spec"]["validations"][0]["expression"] == expression("gpu.example.com")
    assert "r.exactly.deviceClassName == 'gpu.example.com'" in expression("gpu.example.com")
    assert "s.deviceClassName == 'gpu.example.com'" in expression("gpu.example.com")
    assert binding["spec"] == {"policyName": object_name("east"), "validationActions": ["Deny"]}
    for selector in LABEL_SELECTOR.split(","):
        key, value = selector.split("=")
        assert policy["metadata"]["labels"][key] == value


def test_the_plan_creates_policy_first_deletes_binding_first_and_leaves_equal_ones() -> None:
    east = RollbackPolicy("east", "gpu.example.com")
    created = plan([east], {})
    assert [(w.op, w.kind) for w in created.writes] == [("create", "policy"), ("create", "binding")]
    assert plan([east], present(east)).writes == []  # server defaults are not a difference
    changed = plan([east], present(east, policy={"devicestate.io/device-class": "x"}))
    [update] = changed.writes
    assert (update.op, update.kind) == ("update", "policy")
    assert update.body is not None and update.body["metadata"]["resourceVersion"] == "7"
    removed = plan([], present(east))
    assert [(w.op, w.kind, w.uid) for w in removed.writes] == [
        ("delete", "binding", "uid-binding"),
        ("delete", "policy", "uid-policy"),
    ]
