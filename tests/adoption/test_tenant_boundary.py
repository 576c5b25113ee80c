"""The adoption gate's ``tenant-boundary`` signal (issue 16 item 2): claims holding devices for
admin access (KEP-5018 ``adminAccess``) in a Namespace without the admin-access label.

Golden cases of the rule (pure), reading ``adminAccess`` from a v1 ResourceClaim, the wire forms
(records written before the signal still decode, as no admin access), the worker's node facts,
and the property that the recorded verdicts do not depend on batching, interleaving, redelivery
or restarts (:func:`tests.adoption.replays.verdict_rows_of_every_seed`)."""

from __future__ import annotations

from datetime import datetime

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.governance.adoption import Phase
from services.domain.governance.adoption_facts import ClaimFact
from services.domain.governance.adoption_gate import RULES, Thresholds, Verdict, evaluate_pool
from services.domain.governance.adoption_tenancy import rule_tenant_boundary
from services.domain.governance.decisions import AlertAction
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs_adoption import NodeAdoptionFacts
from services.domain.inventory.adoption_facts import node_adoption_facts
from services.domain.inventory.events import (
    InventoryObserved,
    decode_inventory,
    encode_inventory,
)
from services.domain.inventory.objects import parse_resource_claim
from services.domain.inventory.state import InventoryState
from services.domain.node_events import WatcherTick
from tests.adoption.replays import verdict_rows_of_every_seed
from tests.adoption.test_gate import DRIVER, NOW, T0, facts, pool, reason
from tests.adoption.test_verdicts import VERDICT, canary, declare, keyed, node_facts, verdicts
from tests.governance.strategies import at
from tests.governance.test_event_order import Log


def admin_claim(
    name: str,
    node: str = "node-a",
    *,
    tenant: bool = True,
    reserved: bool = True,
    driver: str = DRIVER,
    allocated: datetime | None = T0,
    namespace: str = "team-a",
) -> ClaimFact:
    return ClaimFact(namespace, name, node, ((driver, "east"),), allocated, reserved, tenant)


# --- the rule (pure) ----------------------------------------------------------------------------


def test_the_rule_is_registered_and_a_clean_pool_reads_it_expand() -> None:
    assert rule_tenant_boundary in RULES
    verdict, figures = reason(evaluate_pool(pool(), facts(), Thresholds(), NOW), "tenant-boundary")
    assert (verdict, figures) == (
        Verdict.EXPAND,
        {"claims": 0, "names": "", "holdAt": 1, "rollbackAt": 0},
    )


def test_an_admin_claim_in_an_unlabelled_namespace_holds_the_pool() -> None:
    found = frozenset({admin_claim("probe")})
    gate = evaluate_pool(pool(), facts(claims=found), Thresholds(), NOW)
    verdict, figures = reason(gate, "tenant-boundary")
    assert (gate.verdict, verdict) == (Verdict.HOLD, Verdict.HOLD)
    assert figures == {"claims": 1, "names": "team-a/probe", "holdAt": 1, "rollbackAt": 0}
    [r] = [r for r in gate.reasons if r.code == "tenant-boundary"]
    assert r.detail.endswith(": team-a/probe")


def test_only_the_pools_allocated_claims_that_cross_the_boundary_count() -> None:
    found = frozenset(
        {
            admin_claim("labelled", tenant=False),  # its namespace has the label
            admin_claim("elsewhere", node="node-w"),  # not a node of the pool
            admin_claim("other-driver", driver="other.example.com"),
            admin_claim("pending", allocated=None),  # not allocated
        }
    )
    verdict, figures = reason(
        evaluate_pool(pool(), facts(claims=found), Thresholds(), NOW), "tenant-boundary"
    )
    assert (verdict, figures["claims"]) == (Verdict.EXPAND, 0)


def test_thresholds_a_bounded_list_of_names_and_the_plugin_path() -> None:
    found = frozenset(admin_claim(f"c{i}", reserved=i % 2 == 0) for i in range(7))
    _, figures = reason(
        evaluate_pool(pool(), facts(claims=found), Thresholds(), NOW), "tenant-boundary"
    )
    assert figures["claims"] == 7  # reserved or not: both hold admin access
    assert figures["names"] == "team-a/c0, team-a/c1, team-a/c2, team-a/c3, team-a/c4"
    off = Thresholds(tenant_hold=0)
    assert reason(evaluate_pool(pool(), facts(claims=found), off, NOW), "tenant-boundary")[0] is (
        Verdict.EXPAND
    )
    higher = Thresholds(tenant_hold=8)
    assert reason(evaluate_pool(pool(), facts(claims=found), higher, NOW), "tenant-boundary")[
        0
    ] is (Verdict.EXPAND)
    rolling = Thresholds(tenant_rollback=7)
    gate = evaluate_pool(pool(), facts(claims=found), rolling, NOW)
    assert (gate.verdict, reason(gate, "tenant-boundary")[0]) == (
        Verdict.ROLLBACK,
        Verdict.ROLLBACK,
    )
    # On the plugin path there is nothing to roll back: the pool holds, the reason keeps it.
    back = evaluate_pool(pool(Phase.ROLLED_BACK), facts(claims=found), rolling, NOW)
    assert (back.verdict, reason(back, "tenant-boundary")[0]) == (Verdict.HOLD, Verdict.ROLLBACK)


def test_a_claim_of_explicitly_named_nodes_counts_whatever_its_driver() -> None:
    found = frozenset({admin_claim("probe", node="node-n", driver="other.example.com")})
    gate = evaluate_pool(pool(nodes=("node-n",)), facts(claims=found), Thresholds(), NOW)
    assert reason(gate, "tenant-boundary")[1]["claims"] == 1


# --- reading adminAccess from a resource.k8s.io/v1 ResourceClaim --------------------------------


def v1_claim(requests: list[dict[str, object]], results: list[dict[str, object]]) -> object:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "probe", "namespace": "team-a", "uid": "u1"},
        "spec": {"devices": {"requests": requests}},
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
                            ]
                        }
                    ]
                },
            }
        },
    }


def result(request: str, admin: bool | None = None) -> dict[str, object]:
    out: dict[str, object] = {"request": request, "driver": DRIVER, "pool": "east", "device": "g0"}
    if admin is not None:
        out["adminAccess"] = admin
    return out


def test_admin_access_is_read_from_the_request_and_from_the_allocation_result() -> None:
    exactly = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}
    plain = {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
    chosen = {"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": "gpu"}]}
    assert parse_resource_claim(v1_claim([exactly], [result("gpu")])).admin_access
    assert parse_resource_claim(v1_claim([plain], [result("gpu", True)])).admin_access
    # firstAvailable: the result names <request>/<subrequest>; its adminAccess says it (v1's
    # DeviceSubRequest has no adminAccess field of its own)
    assert parse_resource_claim(v1_claim([chosen], [result("gpu/big", True)])).admin_access
    assert not parse_resource_claim(v1_claim([plain], [result("gpu")])).admin_access
    assert not parse_resource_claim(v1_claim([exactly], [])).admin_access  # not allocated
    info = parse_resource_claim(v1_claim([exactly], [result("gpu")]))
    assert info.namespace_admin is None and not info.tenant_boundary  # namespace not known


# --- wire forms: old records decode, as no admin access ----------------------------------------


def test_a_claim_record_of_before_the_signal_decodes_without_admin_access() -> None:
    info = parse_resource_claim(
        v1_claim([{"name": "gpu", "exactly": {"adminAccess": True}}], [result("gpu", True)])
    )
    old = orjson.loads(encode_inventory(InventoryObserved("node-a", info, False, T0)))
    for r in (*old["object"]["requests"], *old["object"]["results"]):
        r.pop("adminAccess")
    decoded = decode_inventory(orjson.dumps(old))
    assert isinstance(decoded.obj, type(info))
    assert not decoded.obj.admin_access and decoded.obj.namespace_admin is None
    # and the new form round-trips, the Namespace's label with it
    labelled = InventoryObserved(
        "node-a", info.__class__(**{**_fields(info), "namespace_admin": False}), False, T0
    )
    again = decode_inventory(encode_inventory(labelled))
    assert again == labelled and again.obj.tenant_boundary  # type: ignore[union-attr]
    plain = parse_resource_claim(v1_claim([{"name": "gpu", "exactly": {}}], [result("gpu")]))
    body = orjson.loads(encode_inventory(InventoryObserved("node-a", plain, False, T0)))
    assert "namespaceAdminAccess" not in body["object"]  # unchanged bytes for other claims
    assert all("adminAccess" not in r for r in body["object"]["results"])


def _fields(obj: object) -> dict[str, object]:
    return {f: getattr(obj, f) for f in obj.__slots__}  # type: ignore[attr-defined]


def test_node_facts_of_version_1_decode_with_no_claim_across_the_boundary() -> None:
    record = NodeAdoptionFacts(
        "node-a", at(5), ((DRIVER, "east"),), claims=(admin_claim("probe", tenant=True),)
    )
    body = orjson.loads(encode_input(record))
    assert body["version"] == 2 and body["claims"][0]["tenantBoundary"] is True
    assert decode_input(orjson.dumps(body)) == record
    del body["version"]
    del body["claims"][0]["tenantBoundary"]  # a record of before the signal
    [old] = decode_input(orjson.dumps(body)).claims  # type: ignore[union-attr]
    assert not old.tenant_boundary
    body["version"] = 3
    with pytest.raises(EventDecodeError, match="version"):
        decode_input(orjson.dumps(body))
    body["version"] = 2
    body["claims"][0]["tenantBoundary"] = "yes"
    with pytest.raises(EventDecodeError, match="tenantBoundary"):
        decode_input(orjson.dumps(body))


def test_the_worker_forwards_a_bound_claim_only_when_it_crosses_the_boundary() -> None:
    admin = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}
    raw = v1_claim([admin], [result("gpu")])
    raw["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "p1"}]  # type: ignore[index]
    info = parse_resource_claim(raw)
    state = InventoryState()
    state.claims[(info.namespace, info.name)] = info
    assert node_adoption_facts(state, "node-a", T0).claims == ()  # bound, namespace not known
    crossing = info.__class__(**{**_fields(info), "namespace_admin": False})
    state.claims[(info.namespace, info.name)] = crossing
    [fact] = node_adoption_facts(state, "node-a", T0).claims
    assert (fact.name, fact.reserved, fact.tenant_boundary) == ("probe", True, True)
    allowed = info.__class__(**{**_fields(info), "namespace_admin": True})
    state.claims[(info.namespace, info.name)] = allowed
    assert node_adoption_facts(state, "node-a", T0).claims == ()


# --- in the governor, on event time -------------------------------------------------------------


def test_the_governor_holds_on_the_label_loss_and_expands_when_it_is_back() -> None:
    run = canary()
    keyed(run, node_facts("node-a", 20, claims=(admin_claim("probe", tenant=True),)), 20)
    keyed(run, node_facts("node-a", 30, claims=()), 30)  # labelled again: the claim not sent
    assert verdicts(run.decisions) == [
        (None, None, "expand"),
        ("adoption-hold/east", "firing", "hold"),
        ("adoption-hold/east", "resolved", "expand"),
    ]
    held = [d for d in run.decisions if d.kind is VERDICT][1]
    [r] = [r for r in held.details["reasons"] if r["code"] == "tenant-boundary"]
    assert (r["verdict"], r["figures"]["claims"], r["figures"]["names"]) == (
        "hold",
        1,
        "team-a/probe",
    )
    assert held.at == at(20)


def test_any_batching_interleaving_redelivery_or_restart_records_the_same_verdicts() -> None:
    """node-a's facts (partition 0) lose and regain the label while node-b's (partition 1)
    carry a crossing claim for a while; every seed records the same decisions."""
    crossing = (admin_claim("probe", tenant=True),)
    other = (admin_claim("admin-b", node="node-b", tenant=True),)
    logs: list[Log] = [
        [
            (node_facts("node-a", 20), at(20)),
            (node_facts("node-a", 40, claims=crossing), at(40)),
            (WatcherTick(0, at(50)), at(50)),
            (node_facts("node-a", 60), at(60)),
            (WatcherTick(0, at(200)), at(200)),
        ],
        [
            (node_facts("node-b", 25), at(25)),
            (WatcherTick(1, at(45)), at(45)),
            (node_facts("node-b", 100, claims=other), at(100)),
            (node_facts("node-b", 150), at(150)),
            (WatcherTick(1, at(200)), at(200)),
        ],
    ]
    runs = verdict_rows_of_every_seed(logs, declare(1))
    assert len(runs) == 1
    [(rows, _)] = runs
    summary = [
        (when, alert, orjson.loads(details)["verdict"], _codes(orjson.loads(details)))
        for _, when, _, alert, details in rows
    ]
    assert summary == [
        (at(1), AlertAction.FIRING, "hold", ["pool-empty"]),  # declared before any facts
        (at(20), AlertAction.RESOLVED, "expand", []),
        (at(40), AlertAction.FIRING, "hold", ["tenant-boundary"]),  # node-a's label lost
        (at(60), AlertAction.RESOLVED, "expand", []),  # labelled again
        (at(100), AlertAction.FIRING, "hold", ["tenant-boundary"]),  # node-b's claim
        (at(150), AlertAction.RESOLVED, "expand", []),
    ]


def _codes(details: dict[str, object]) -> list[str]:
    return [r["code"] for r in details["reasons"] if r["verdict"] != "expand"]  # type: ignore[attr-defined, index]
