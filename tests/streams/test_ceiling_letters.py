"""The health agent's dead letters of observations over the device ceiling
(:func:`streams.ceiling.ceiling_letters`): one envelope per node and batch in log order, each
within its byte budget, every original in exactly one letter, verbatim."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.device_ceiling import OverCeiling
from services.domain.event_codec import encode_event
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.log import LoggedEvent, LogPosition
from streams.ceiling import ENVELOPE_KIND, ceiling_letters

T0 = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass
class Message:
    """What the letters read of a faust message."""

    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes


def refused(node: str, offset: int, message: str | None = None) -> tuple[OverCeiling, Message]:
    event = DeviceHealthObserved(
        node=node,
        namespace="ml",
        pod_name="p",
        pod_uid="u",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=f"GPU-{offset}",
        health=Health.HEALTHY,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=offset + 1,
        observed_at=T0 + timedelta(seconds=offset),
        message=message,
    )
    position = LogPosition("health", 3, offset)
    reason = (
        f"device ceiling: node {node!r} already holds 4 devices "
        f"(DEVICESTATE_MAX_DEVICES_PER_NODE=4); resourceID 'GPU-{offset}' of nvidia.com/gpu "
        "is not applied"
    )
    over = OverCeiling(LoggedEvent(position, event), reason)
    return over, Message("health", 3, offset, node.encode(), encode_event(event))


def originals(letter_value: bytes, records: int) -> list[tuple[str, bytes]]:
    """``(source, original bytes)`` of a letter (an envelope, or one original)."""
    if records == 1:  # a lone original, as itself
        return [("", orjson.dumps(orjson.loads(letter_value)))]
    body = orjson.loads(letter_value)
    assert body["deadLetters"] == ENVELOPE_KIND
    assert len(body["records"]) == records
    return [(r["source"], orjson.dumps(r["value"])) for r in body["records"]]


def test_one_envelope_per_node_in_log_order_with_the_originals_verbatim() -> None:
    items = [refused("a", 1), refused("b", 2), refused("a", 3), refused("a", 4)]
    letters = ceiling_letters(items, budget=1_000_000)
    assert [(letter.key, letter.records) for letter in letters] == [(b"a", 3), (b"b", 1)]
    assert letters[1].value == items[1][1].value  # the lone one: itself, its own reason
    assert letters[1].reason == items[1][0].reason
    a = letters[0]
    assert a.source == "health/3/1"  # the first original's
    assert a.reason == (
        "device ceiling: node 'a' already holds 4 devices (DEVICESTATE_MAX_DEVICES_PER_NODE=4); "
        "3 observations of new resourceIDs not applied"
    )
    body = orjson.loads(a.value)
    assert [r["source"] for r in body["records"]] == ["health/3/1", "health/3/3", "health/3/4"]
    assert body["records"][1]["reason"] == items[2][0].reason
    assert orjson.dumps(body["records"][0]["value"]) == orjson.dumps(
        orjson.loads(items[0][1].value)
    )
    # Verbatim: the original's bytes are in the letter as they were read.
    assert all(m.value in a.value for _, m in (items[0], items[2], items[3]))


def test_an_original_too_large_for_an_envelope_goes_alone_as_its_bytes_in_log_order() -> None:
    big = refused("a", 3, message="x" * 2_000)
    items = [refused("a", 1), refused("a", 2), big, refused("a", 4)]
    letters = ceiling_letters(items, budget=1_500)
    assert [(letter.records, letter.source) for letter in letters] == [
        (2, "health/3/1"),
        (1, "health/3/3"),  # alone, its own bytes and reason
        (1, "health/3/4"),
    ]
    assert letters[1].value == big[1].value
    assert letters[1].reason == big[0].reason


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=80),
    big=st.sets(st.integers(0, 79), max_size=5),
    budget=st.integers(1_500, 6_000),
)
def test_every_original_is_in_one_letter_within_the_budget(
    nodes: list[str], big: set[int], budget: int
) -> None:
    items = [
        refused(node, offset, "x" * 2_000 if offset in big else None)
        for offset, node in enumerate(nodes)
    ]
    letters = ceiling_letters(items, budget)
    seen: list[tuple[str, bytes]] = []
    for letter in letters:
        assert letter.value is not None
        if letter.records > 1:
            assert len(letter.value) <= budget
        else:
            assert not letter.value.startswith(b'{"deadLetters"')
        seen += [
            (letter.key.decode() if letter.key else "", v)
            for _, v in originals(letter.value, letter.records)
        ]
    expected = [
        (node, orjson.dumps(orjson.loads(m.value)))
        for (_, m), node in zip(items, nodes, strict=True)
    ]
    # Each node's originals in log order, each exactly once.
    for node in {"a", "b", "c"}:
        assert [v for n, v in seen if n == node] == [v for n, v in expected if n == node]
    assert ceiling_letters(items, budget) == letters  # pure
