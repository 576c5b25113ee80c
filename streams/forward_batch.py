"""Packing a batch's forwarded records into ``ForwardedBatch`` records (issue 12, the forwarding
lever; the wire form: :mod:`services.domain.governance.input_batch`).

:func:`pack` takes the records one health-agent batch forwards, already encoded and in order
(``(key, value, type)``, :mod:`streams.forward`), and returns the Kafka records to send: runs of
consecutive records, each run at most ``max_records`` entries and at most ``max_bytes`` encoded,
in the same order. A run of several records goes as one ``ForwardedBatch``; a run of one goes as
the record itself, as before issue 12 (so ``max_records`` 1 sends exactly what an older governor
reads, and one record larger than ``max_bytes`` goes alone, unwrapped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from services.domain.governance.input_batch import (
    ENVELOPE_BYTES,
    RECORD_TYPE,
    encode_batch,
)

FORWARD_BATCH_BYTES: Final = 256 * 1024
"""Most bytes of one ``ForwardedBatch`` value (its envelope included)."""
RECORD_OVERHEAD_BYTES: Final = 1024
"""Room left for the key, the headers and Kafka's record framing under ``max_message_bytes``."""
BATCH_KEY: Final = b"~forwarded-batch"
"""Kafka key of a ``ForwardedBatch`` (the governance topic has one partition: for readers only)."""

OutgoingRecord = tuple[bytes, bytes, str]
"""``(key, value, record type)`` of a record to send; the type goes in the type header."""


def batch_bytes_limit(max_message_bytes: int) -> int:
    """The byte bound of a ``ForwardedBatch``: :data:`FORWARD_BATCH_BYTES`, lower when the
    topics' records may not be that large (``max_message_bytes`` less
    :data:`RECORD_OVERHEAD_BYTES`)."""
    return min(FORWARD_BATCH_BYTES, max_message_bytes - RECORD_OVERHEAD_BYTES)


def pack(
    records: Sequence[OutgoingRecord], max_records: int, max_bytes: int = FORWARD_BATCH_BYTES
) -> list[OutgoingRecord]:
    """``records`` in runs of at most ``max_records`` entries and ``max_bytes`` encoded bytes
    (``max_records`` >= 1), in order: each run of two or more as one ``ForwardedBatch``, a run of
    one as itself. A record whose own batch would exceed ``max_bytes`` goes alone."""
    if max_records < 1:
        raise ValueError(f"max_records must be at least 1, not {max_records}")
    if max_records == 1:
        return list(records)
    out: list[OutgoingRecord] = []
    run: list[OutgoingRecord] = []
    size = ENVELOPE_BYTES - 1  # the envelope, less the comma the first entry does not need

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append((BATCH_KEY, encode_batch([v for _, v, _ in run]), RECORD_TYPE))
        run.clear()

    for record in records:
        grown = size + len(record[1]) + 1
        if run and (len(run) >= max_records or grown > max_bytes):
            flush()
            size = ENVELOPE_BYTES - 1
            grown = size + len(record[1]) + 1
        run.append(record)
        size = grown
    flush()
    return out
