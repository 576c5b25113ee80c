"""Packing a batch's forwarded records into ``ForwardedBatch`` records (issue 12,
``streams/forward_batch.py``): the entry count, the byte limit, a record larger than the limit,
and the order, which the packing never changes."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from services.domain.events import Health
from services.domain.governance.input_batch import RECORD_TYPE, decode_records
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import MergeKey
from streams.forward import record_key
from streams.forward_batch import (
    BATCH_KEY,
    FORWARD_BATCH_BYTES,
    OutgoingRecord,
    batch_bytes_limit,
    pack,
)
from tests.governance.strategies import at, transition


def records(n: int, message: str = "") -> list[OutgoingRecord]:
    out = []
    for i in range(n):
        record = transition("n0", f"GPU-{i}", Health.UNHEALTHY, i + 1, i)
        if message:
            record = replace(record, message=message)
        out.append(
            (record_key(record), encode_input(record, MergeKey(at(i), 0, i, 0)), record.type)
        )
    return out


def entries_of(sent: list[OutgoingRecord]) -> list[bytes]:
    """The single records the sent records carry, in order, each in its own wire form."""
    out = []
    for _, value, kind in sent:
        if kind == RECORD_TYPE:
            out.extend(encode_input(r, k) for r, k in decode_records(value, kind))
        else:
            out.append(value)
    return out


def test_one_record_per_input_with_a_limit_of_one() -> None:
    given = records(5)
    assert pack(given, 1) == given


def test_at_most_the_entry_count_per_batch_in_order() -> None:
    given = records(1200)
    sent = pack(given, 512)
    assert [kind for _, _, kind in sent] == [RECORD_TYPE] * 3
    assert [len(decode_records(v, k)) for _, v, k in sent] == [512, 512, 176]
    assert all(key == BATCH_KEY for key, _, _ in sent)
    assert entries_of(sent) == [v for _, v, _ in given]


def test_a_run_of_one_goes_as_the_record_itself() -> None:
    given = records(513)
    sent = pack(given, 512)
    assert sent[1] == given[-1]
    assert pack(given[:1], 512) == given[:1]
    assert pack([], 512) == []


def test_at_most_the_byte_limit_per_batch() -> None:
    given = records(300, message="x" * 2000)
    sent = pack(given, 4096, 64 * 1024)
    assert len(sent) > 1
    assert all(len(v) <= 64 * 1024 for _, v, _ in sent)
    assert all(k == RECORD_TYPE for _, _, k in sent[:-1])
    # each batch is full: the next entry would not have fitted
    sizes = [len(v) for _, v, _ in given]
    assert all(len(v) + sizes[0] + 1 > 64 * 1024 for _, v, _ in sent[:-1])
    assert entries_of(sent) == [v for _, v, _ in given]


def test_a_record_larger_than_the_limit_goes_alone() -> None:
    small = records(4)
    big = records(1, message="y" * 5000)
    given = [*small[:2], *big, *small[2:]]
    sent = pack(given, 512, 4096)
    assert len(big[0][1]) > 4096
    assert [k for _, _, k in sent] == [RECORD_TYPE, "HealthTransition", RECORD_TYPE]
    assert sent[1] == big[0]
    assert entries_of(sent) == [v for _, v, _ in given]


def test_random_limits_keep_every_record_in_order() -> None:
    rng = random.Random(7)
    given = records(400, message="z" * 300)
    for _ in range(50):
        limit, max_bytes = rng.randint(1, 600), rng.randint(500, 40_000)
        sent = pack(given, limit, max_bytes)
        assert entries_of(sent) == [v for _, v, _ in given]
        for _, value, kind in sent:
            if kind == RECORD_TYPE:
                assert 2 <= len(decode_records(value, kind)) <= limit
                assert len(value) <= max_bytes


def test_the_byte_limit_stays_under_the_topics_record_size() -> None:
    assert batch_bytes_limit(1_048_576) == FORWARD_BATCH_BYTES
    assert batch_bytes_limit(65_536) == 65_536 - 1024
    with pytest.raises(ValueError):
        pack(records(1), 0)
