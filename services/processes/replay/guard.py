"""Refuse an in-place replay while the stream worker is consuming.

An in-place replay truncates the live tables, including the partition progress; a worker still
running would then record its current offsets and the replay would skip everything before them
(see ``ProjectionStore.apply_batch``), leaving a directory with most devices missing.
"""

from __future__ import annotations


async def active_group_members(bootstrap_servers: str, group: str) -> list[str]:
    """Member IDs of consumer group ``group`` (empty: nobody consumes).

    Raises the Kafka client's connection errors when the brokers cannot be reached.
    """
    from services.adapters.kafka.reader import group_member_ids

    return await group_member_ids(bootstrap_servers, group, client_id="devicestate-replay")
