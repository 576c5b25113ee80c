"""Refuse an in-place replay while the stream worker is consuming.

An in-place replay truncates the live tables, including the partition progress; a worker still
running would then record its current offsets and the replay would skip everything before them
(see ``ProjectionStore.apply_batch``), leaving a directory with most devices missing.
"""

from __future__ import annotations

from typing import Any


async def active_group_members(bootstrap_servers: str, group: str) -> list[str]:
    """Client IDs of the members of consumer group ``group`` (empty: nobody consumes).

    Raises aiokafka's connection errors when the brokers cannot be reached.
    """
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
        groups: list[dict[str, Any]] = response.to_object()["groups"]
        return [
            str(member["member_id"])
            for described in groups
            if described["group"] == group
            for member in described["members"]
        ]
    finally:
        await admin.close()
