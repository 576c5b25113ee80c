""":func:`~services.domain.limits.field_violations` decides a plain observation at a glance
(printable ASCII within the limits, no per-field cache look-up); whatever the fields, it says
exactly what the field-by-field checks say, reasons and their order included."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.events import (
    MESSAGE_MAX_LENGTH,
    ClaimRef,
    ContainerKind,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Health,
)
from services.domain.limits import _field_by_field, field_violations, pod_fields_plain

# Characters each rule is about: control, invisible and bidi, non-ASCII visible, NUL, space.
_CHARS = st.sampled_from(
    ["a", "Z", "0", "-", ".", " ", "\x00", "\x1f", "\x7f", "\u200b", "\u202e", "é", "\u00ad"]
)


def _text(max_size: int) -> st.SearchStrategy[str]:
    """Mostly plain short values, sometimes empty, odd or just over a limit."""
    return st.one_of(
        st.text(st.sampled_from("abc-.09"), min_size=1, max_size=8),
        st.text(_CHARS, max_size=6),
        st.integers(min_value=max_size - 1, max_value=max_size + 1).map(lambda n: "a" * n),
    )


@st.composite
def _observations(draw: st.DrawFn) -> DeviceHealthObserved:
    claim = draw(
        st.one_of(
            st.none(),
            st.builds(
                ClaimRef,
                _text(253),
                st.one_of(st.none(), _text(253)),
                st.one_of(st.none(), _text(253)),
            ),
        )
    )
    return DeviceHealthObserved(
        node=draw(st.one_of(st.just("gpu-node-1"), _text(253))),
        namespace=draw(_text(63)),
        pod_name=draw(_text(253)),
        pod_uid=draw(_text(128)),
        containers=tuple(
            ContainerRef(name, ContainerKind.REGULAR)
            for name in draw(st.lists(_text(253), max_size=3))
        ),
        resource_name=draw(_text(1024)),
        resource_id=draw(_text(1024)),
        health=Health.HEALTHY,
        source=DeviceSource.DRA,
        status_version=draw(st.one_of(st.none(), st.just(7), st.just(10**39), st.just(10**38))),
        observed_at=datetime(2026, 12, 4, tzinfo=UTC),
        message=draw(
            st.one_of(
                st.none(),
                _text(8),
                st.integers(MESSAGE_MAX_LENGTH, MESSAGE_MAX_LENGTH + 1).map(lambda n: "m" * n),
            )
        ),
        raw_health=draw(st.one_of(st.none(), _text(256))),
        claim=claim,
        flags=tuple(draw(st.lists(_text(64), max_size=2))),
    )


@settings(max_examples=500, deadline=None)
@given(_observations())
def test_the_fast_path_says_what_the_field_checks_say(event: DeviceHealthObserved) -> None:
    assert field_violations(event) == _field_by_field(event)


@settings(max_examples=300, deadline=None)
@given(_observations())
def test_pod_fields_checked_once_say_what_the_field_checks_say(
    event: DeviceHealthObserved,
) -> None:
    """As a schema-2 record's decode asks: its Pod fields checked once, each observation's own
    fields then."""
    plain = pod_fields_plain(
        event.node, event.namespace, event.pod_name, event.pod_uid, event.status_version
    )
    assert field_violations(event, pod_plain=plain) == _field_by_field(event)


def test_a_plain_observation_has_no_violations_and_an_odd_one_its_reasons() -> None:
    plain = DeviceHealthObserved(
        "gpu-node-1",
        "ns",
        "pod",
        "uid-1",
        (ContainerRef("main", ContainerKind.REGULAR),),
        "nvidia.com/gpu",
        "GPU-0",
        Health.HEALTHY,
        DeviceSource.DRA,
        3,
        datetime(2026, 12, 4, tzinfo=UTC),
    )
    assert field_violations(plain) == []
    odd = DeviceHealthObserved(**{**_fields(plain), "resource_id": "GPU\u200b0"})
    assert field_violations(odd) == [
        "resourceID contains an invisible or bidirectional-control character, U+200B at position 3"
    ]


def _fields(event: DeviceHealthObserved) -> dict[str, object]:
    return {name: getattr(event, name) for name in event.__dataclass_fields__ if name != "type"}
