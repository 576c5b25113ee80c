"""Pools selected by node labels (issue 16), pure: the ``NodeLabelsChanged`` record's wire form
and its bounds, the gate's membership with a label selector (alone, or with a driver), and the
declaration's wire form with a label selector."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.domain.codec import EventDecodeError
from services.domain.governance.adoption import (
    AdoptionDeclaration,
    Declared,
    Phase,
    PoolSelector,
    PoolState,
    declaration_from_dict,
    declaration_to_dict,
)
from services.domain.governance.adoption_facts import InventoryFacts, LabelsFact, SliceFact
from services.domain.governance.adoption_gate import Thresholds, Verdict, evaluate_pool, pool_nodes
from services.domain.labels import parse
from services.domain.node_labels import (
    MAX_LABELS,
    NodeLabelsChanged,
    clean_labels,
    decode_node_labels,
    encode_node_labels,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DRIVER = "gpu.example.com"


def pool(selector: PoolSelector) -> PoolState:
    declared = Declared(
        1, T0, "olga", "canary", AdoptionDeclaration("east", selector, Phase.CANARY)
    )
    return PoolState(current=declared, history=(declared,))


LABELS = frozenset(
    {
        LabelsFact("node-a", (("pool", "east"), ("zone", "a"))),
        LabelsFact("node-b", (("pool", "east"), ("zone", "b"))),
        LabelsFact("node-c", (("pool", "west"),)),
        LabelsFact("node-d", ()),
    }
)
SLICES = frozenset({SliceFact(DRIVER, "p", "node-a"), SliceFact(DRIVER, "p", "node-c")})


def test_a_label_selector_alone_holds_every_node_whose_labels_match() -> None:
    facts = InventoryFacts(slices=SLICES, labels=LABELS)
    assert pool_nodes(pool(PoolSelector(labels=parse("pool=east"))), facts) == {"node-a", "node-b"}
    assert pool_nodes(pool(PoolSelector(labels=parse("!pool"))), facts) == {"node-d"}
    assert pool_nodes(pool(PoolSelector(labels=parse("zone in (b,c)"))), facts) == {"node-b"}


def test_a_label_selector_with_a_driver_holds_the_drivers_nodes_that_match() -> None:
    facts = InventoryFacts(slices=SLICES, labels=LABELS)
    sel = PoolSelector(driver=DRIVER, labels=parse("pool"))
    assert pool_nodes(pool(sel), facts) == {"node-a", "node-c"}
    sel = PoolSelector(driver=DRIVER, labels=parse("pool=east"))
    assert pool_nodes(pool(sel), facts) == {"node-a"}


def test_a_relabelled_node_leaves_the_pool_and_an_empty_pool_holds() -> None:
    state = pool(PoolSelector(labels=parse("pool=west")))
    facts = InventoryFacts(labels=LABELS)
    assert evaluate_pool(state, facts, Thresholds(), T0).nodes == ("node-c",)
    moved = (LABELS - {LabelsFact("node-c", (("pool", "west"),))}) | {
        LabelsFact("node-c", (("pool", "east"),))
    }
    gate = evaluate_pool(state, InventoryFacts(labels=moved), Thresholds(), T0)
    assert gate.nodes == ()
    assert gate.verdict is Verdict.HOLD
    assert [r.code for r in gate.reasons] == ["pool-empty"]


def test_a_plugin_pool_whose_labels_exclude_the_drivers_nodes_is_no_wait() -> None:
    # The driver's slices are there (node-a, node-c) but the selector matches neither: nothing
    # is left to wait for (a typo'd selector), so the hold alerts and does not say "waiting".
    declared = Declared(
        1,
        T0,
        "olga",
        "plan",
        AdoptionDeclaration(
            "east", PoolSelector(driver=DRIVER, labels=parse("pool=eats")), Phase.PLUGIN
        ),
    )
    state = PoolState(current=declared, history=(declared,))
    gate = evaluate_pool(state, InventoryFacts(slices=SLICES, labels=LABELS), Thresholds(), T0)
    assert (gate.nodes, gate.verdict, gate.waiting) == ((), Verdict.HOLD, False)
    assert gate.reasons[0].detail == "the pool's selector matches no node"
    # Before the driver publishes, the same pool waits.
    early = evaluate_pool(state, InventoryFacts(labels=LABELS), Thresholds(), T0)
    assert (early.verdict, early.waiting) == (Verdict.HOLD, True)


def test_the_declaration_with_a_label_selector_round_trips() -> None:
    for sel in (
        PoolSelector(labels=parse("k=v,k2 in (a,b),!k3")),
        PoolSelector(driver=DRIVER, pool="p", labels=parse("k")),
    ):
        d = AdoptionDeclaration("east", sel, Phase.CANARY)
        assert declaration_from_dict(declaration_to_dict(d)) == d
    # A driver selector without labels keeps its older bytes.
    plain = declaration_to_dict(AdoptionDeclaration("e", PoolSelector(driver=DRIVER), Phase.DRA))
    assert plain["selector"] == {"driver": DRIVER, "pool": None}


def test_a_declaration_with_a_bad_label_selector_is_refused_with_the_reason() -> None:
    raw = declaration_to_dict(
        AdoptionDeclaration("e", PoolSelector(labels=parse("k")), Phase.CANARY)
    )
    raw["selector"]["labelSelector"] = {"matchLabels": {}, "matchExpressions": []}
    with pytest.raises(EventDecodeError, match="at least one of matchLabels"):
        declaration_from_dict(raw)
    with pytest.raises(ValueError, match="or a label selector"):
        PoolSelector(nodes=("a",), labels=parse("k"))


def test_the_labels_record_round_trips_and_its_wire_form_is_stable() -> None:
    rec = NodeLabelsChanged("node-a", (("zone", "a"), ("pool", "east")), T0)
    payload = encode_node_labels(rec)
    assert payload == (
        b'{"labels":{"pool":"east","zone":"a"},"node":"node-a",'
        b'"observedAt":"2026-11-29T12:00:00Z","schema":1,"type":"NodeLabelsChanged"}'
    )
    assert decode_node_labels(payload) == rec


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"[]", "not a JSON object"),
        (b'{"schema":2,"type":"NodeLabelsChanged"}', "unsupported schema"),
        (
            b'{"schema":1,"type":"NodeLabelsChanged","node":"n","labels":{"-x":"v"},'
            b'"observedAt":"2026-11-29T12:00:00Z"}',
            "the name must be",
        ),
        (
            b'{"schema":1,"type":"NodeLabelsChanged","node":"n","labels":{"x":1},'
            b'"observedAt":"2026-11-29T12:00:00Z"}',
            "string values",
        ),
    ],
)
def test_a_bad_labels_record_is_refused_with_the_reason(payload: bytes, message: str) -> None:
    with pytest.raises(EventDecodeError, match=message):
        decode_node_labels(payload)


def test_cleaning_drops_bad_and_excess_labels_with_reasons() -> None:
    raw = {"zz": "v", "-bad": "v", "k": "not valid!", "n": 3}
    raw.update({f"x{i:03}": "v" for i in range(MAX_LABELS)})
    kept, dropped = clean_labels(raw)
    assert len(kept) == MAX_LABELS
    assert ("zz", "v") not in kept  # sorted by key: "zz" comes after the x… keys, over the limit
    assert sorted((d.key, d.reason) for d in dropped) == [
        ("-bad", "invalid-key"),
        ("k", "invalid-value"),
        ("n", "invalid-value"),
        ("zz", "too-many"),
    ]
    assert clean_labels(None) == ((), [])
