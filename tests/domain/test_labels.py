"""Labels and label selectors, pure: the kubectl-syntax parser's golden cases, validation with
its messages and limits, matching as Kubernetes does, and properties (the printed form parses
back to the same selector; the JSON form round-trips)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.domain.labels import (
    MAX_EXPRESSIONS,
    MAX_MATCH_LABELS,
    MAX_VALUES,
    LabelSelector,
    Operator,
    Requirement,
    key_error,
    parse,
    selector_from_dict,
    value_error,
)

GOLDEN = [
    ("k=v", (("k", "v"),), ()),
    ("k==v", (("k", "v"),), ()),
    ("k!=v", (), (Requirement("k", Operator.NOT_IN, ("v",)),)),
    (
        "k=v,k2 in (a,b),!k3,k4",
        (("k", "v"),),
        (
            Requirement("k2", Operator.IN, ("a", "b")),
            Requirement("k3", Operator.DOES_NOT_EXIST),
            Requirement("k4", Operator.EXISTS),
        ),
    ),
    (
        " pool.example.com/tier notin ( b , a ) , x = ",
        (("x", ""),),
        (Requirement("pool.example.com/tier", Operator.NOT_IN, ("a", "b")),),
    ),
    # The empty value is a value, as kubectl reads it (apimachinery's parseValues).
    ("k in ()", (), (Requirement("k", Operator.IN, ("",)),)),
    ("k notin (,b)", (), (Requirement("k", Operator.NOT_IN, ("", "b")),)),
    ("k in (a,,b)", (), (Requirement("k", Operator.IN, ("", "a", "b")),)),
]


@pytest.mark.parametrize(("text", "labels", "exprs"), GOLDEN)
def test_the_parser_reads_kubectl_syntax(
    text: str, labels: tuple[tuple[str, str], ...], exprs: tuple[Requirement, ...]
) -> None:
    sel = parse(text)
    assert sel.match_labels == labels
    assert sel.match_expressions == tuple(sorted(exprs))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty term"),
        ("k=v,", "empty term"),
        ("k in (a", "unbalanced '('"),
        ("k=a,k=b", "two values"),
        ("-bad=v", "the name must be"),
        ("k=-v", "label value '-v'"),
        ("Upper.Case/k=v", "prefix must be a lower-case DNS subdomain"),
        ("!k in (a)", "'!' goes only before a bare key"),
        ("a b c", "cannot read"),
    ],
)
def test_the_parser_refuses_bad_selectors_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse(text)


def test_key_and_value_limits() -> None:
    assert key_error("a" * 63) is None
    assert key_error("a" * 64) is not None
    assert key_error(("a" * 63 + ".") * 3 + "a" * 61 + "/k") is None  # a 253-character prefix
    assert key_error(("a" * 63 + ".") * 3 + "a" * 62 + "/k") is not None
    assert key_error("/k") is not None
    assert value_error("") is None
    assert value_error("a" * 63) is None
    assert value_error("a" * 64) is not None


def test_selector_limits_and_emptiness() -> None:
    with pytest.raises(ValueError, match="at least one of matchLabels"):
        LabelSelector()
    with pytest.raises(ValueError, match=f"at most {MAX_MATCH_LABELS} matchLabels"):
        LabelSelector(tuple((f"k{i}", "v") for i in range(MAX_MATCH_LABELS + 1)))
    with pytest.raises(ValueError, match=f"at most {MAX_EXPRESSIONS} matchExpressions"):
        LabelSelector((), tuple(Requirement(f"k{i}", Operator.EXISTS) for i in range(33)))
    with pytest.raises(ValueError, match=f"at most {MAX_VALUES} values"):
        Requirement("k", Operator.IN, tuple(f"v{i}" for i in range(MAX_VALUES + 1)))
    with pytest.raises(ValueError, match="takes no values"):
        Requirement("k", Operator.EXISTS, ("v",))
    with pytest.raises(ValueError, match="operator must be one of"):
        selector_from_dict({"matchExpressions": [{"key": "k", "operator": "Gt"}]})


def test_matching_follows_kubernetes() -> None:
    sel = parse("tier=gpu,zone in (a,b),!cordoned,rack,env notin (prod)")
    base = {"tier": "gpu", "zone": "a", "rack": "r1"}
    assert sel.matches(base)
    assert sel.matches({**base, "env": "dev"})
    assert not sel.matches({**base, "env": "prod"})
    assert not sel.matches({**base, "cordoned": ""})
    assert not sel.matches({**base, "zone": "c"})
    assert not sel.matches({k: v for k, v in base.items() if k != "rack"})
    assert not sel.matches({**base, "tier": "cpu"})


names = st.from_regex(r"\A[a-z0-9]([-a-z0-9_.]{0,8}[a-z0-9])?\Z")
requirements = st.one_of(
    st.builds(
        Requirement,
        names,
        st.sampled_from([Operator.IN, Operator.NOT_IN]),
        st.lists(names | st.just(""), min_size=1, max_size=4).map(tuple),
    ),
    st.builds(Requirement, names, st.sampled_from([Operator.EXISTS, Operator.DOES_NOT_EXIST])),
)


@given(
    st.dictionaries(names, names | st.just(""), max_size=4),
    st.lists(requirements, max_size=4),
    st.dictionaries(names, names, max_size=6),
)
def test_printed_and_json_forms_read_back_to_the_same_selector(
    labels: dict[str, str], exprs: list[Requirement], node: dict[str, str]
) -> None:
    if not labels and not exprs:
        return
    sel = LabelSelector(tuple(labels.items()), tuple(exprs))
    assert parse(str(sel)) == sel
    assert selector_from_dict(sel.to_dict()) == sel
    # ANDed: a selector matches exactly when each of its parts does.
    parts = [LabelSelector(((k, v),)) for k, v in sel.match_labels] + [
        LabelSelector((), (r,)) for r in sel.match_expressions
    ]
    assert sel.matches(node) == all(p.matches(node) for p in parts)
